package engine

import (
	"context"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// Candidate is one SQL answer a generator proposed, as it went through
// fixing and its trial run.
type Candidate struct {
	// SQL is the candidate as last written (after fixes and literal
	// correction); Statement is its sealed form when it passed the guard.
	SQL       string
	Statement sealed.Statement
	Generator string
	// Fixes is how many times the fixer rewrote it.
	Fixes int
	// Rows is the trial run's result (at most the trial row limit) when it
	// ran without error.
	Rows *pg.Rows
	// Problem says why it is not usable, or what is doubtful about it
	// ("returned no rows"); "" for a clean candidate.
	Problem string
	// Code is the SQLSTATE its last trial run failed with ("" when it did
	// not fail on the server).
	Code string
	// Usable: it passed the guard and its trial run raised no error.
	Usable bool
	// Unanswerable: the generator said the data cannot answer the question
	// (Problem holds its reason).
	Unanswerable bool
	// Cluster is the index of its result cluster among usable candidates
	// (-1 when not usable).
	Cluster int
	// Trace lists what happened to it, in order.
	Trace []string
	// Rewrites are the literals literal correction changed in SQL.
	Rewrites []memory.LiteralRewrite
}

// GenInput is what a generator, the fixer and the selector know about the
// question: the prompt material, ready to render.
type GenInput struct {
	Question     string
	Schema       string // rendered schema the model sees
	Values       []prompts.ValueMatch
	Descriptions []prompts.Description
	Examples     []prompts.Example // remembered question→SQL pairs
	// Queries are normalised statements this database runs over the
	// tables shown (no question attached; literals are parameters).
	Queries       []string
	ServerVersion string
	// Guard is what this ask's SQL is sealed with (the operator's lists and
	// the database's function catalog), for stages that seal SQL themselves.
	Guard guard.Options

	view modelView // what of the data stages may show the model
}

// Runner checks SQL with the guard and trial-runs it on the asking session,
// through the same executor as every other statement of the ask.
type Runner interface {
	Run(ctx context.Context, sql string) (*pg.Rows, error)
}

// Generator proposes candidate SQL for a question.
type Generator interface {
	Name() string
	Generate(ctx context.Context, in *GenInput, m Model, run Runner) ([]string, error)
}

// Fixer rewrites SQL given what went wrong with it.
type Fixer interface {
	Fix(ctx context.Context, in *GenInput, m Model, sql string, prob Problem) (string, error)
}

// Cluster is a group of usable candidates whose trial results are equal
// (see resultKey); Candidates[0] stands for the group.
type Cluster struct {
	Candidates []*Candidate
}

// Choice is a selector's verdict: the winning cluster and, per cluster, a
// score in [0, 1] (its share of the wins or tests passed).
type Choice struct {
	Cluster int
	Scores  []float64
	Note    string
}

// Selector picks among clusters whose results disagree (called only when
// there are at least two).
type Selector interface {
	Name() string
	Select(ctx context.Context, in *GenInput, m Model, clusters []Cluster) (Choice, error)
}

// Optimizer rewrites the chosen statement into a faster equivalent one, or
// returns it unchanged. Whatever it returns was sealed by the guard and
// checked on the asking session through exec.
type Optimizer interface {
	Optimize(ctx context.Context, in *GenInput, m Model, exec sealed.Executor, stmt sealed.Statement) (sealed.Statement, string, error)
}
