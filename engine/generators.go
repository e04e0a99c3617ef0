package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// Chain-of-thought methods of the SQL generator (CHASE-SQL).
const (
	methodDivide = prompts.MethodDivide // divide and conquer
	methodPlan   = prompts.MethodPlan   // reason in the steps an executor takes
)

// cotGenerator asks once for SQL with one chain-of-thought method. shuffle
// reorders the schema's tables (seeded by the question) and temperature
// varies the decoding: the two diversity levers of CHASE-SQL.
type cotGenerator struct {
	method      string
	temperature float64
	shuffle     bool
}

func (g cotGenerator) Name() string {
	n := g.method
	if g.shuffle {
		n += "+shuffled"
	}
	if g.temperature > 0 {
		n += fmt.Sprintf("@%.1f", g.temperature)
	}
	return n
}

func (g cotGenerator) Generate(ctx context.Context, in *GenInput, m Model, _ Runner) ([]string, error) {
	schema := in.Schema
	if g.shuffle {
		schema = shuffleSchema(schema, in.Question)
	}
	p, err := prompts.Candidate(prompts.CandidateParams{
		Question: in.Question, Schema: schema, Values: in.Values, Descriptions: in.Descriptions,
		Examples: in.Examples, Queries: in.Queries, ServerVersion: in.ServerVersion, Method: g.method,
	})
	if err != nil {
		return nil, err
	}
	sql, err := m.SQL(ctx, p, g.temperature)
	if err != nil {
		return nil, err
	}
	return []string{sql}, nil
}

// directGenerator asks for the query alone, as a JSON object {"sql": …}
// constrained by a JSON schema (Ollama's format, response_format on
// OpenAI-compatible servers), with no chain of thought: a few hundred
// tokens at most, for models too small to reason usefully or too slow to
// reason within the ask's time.
type directGenerator struct{}

func (directGenerator) Name() string { return "direct" }

func (directGenerator) Generate(ctx context.Context, in *GenInput, m Model, _ Runner) ([]string, error) {
	p, err := prompts.Direct(prompts.DirectParams{
		Question: in.Question, Schema: in.Schema, Values: in.Values, Descriptions: in.Descriptions,
		Examples: in.Examples, ServerVersion: in.ServerVersion,
	})
	if err != nil {
		return nil, err
	}
	var out prompts.DirectResult
	if err := m.JSON(ctx, p, 0, &out); err != nil {
		return nil, err
	}
	sql := strings.TrimSpace(out.SQL)
	if reason, ok := llm.Unanswerable(sql); ok {
		return nil, &llm.Error{Op: "chat", Step: "direct", Kind: llm.ErrUnanswerable, Err: errors.New(reason)}
	}
	if sql == "" {
		return nil, &llm.Error{Op: "chat", Step: "direct", Kind: llm.ErrBadOutput, Err: errors.New(`the answer's "sql" is empty`)}
	}
	if extracted, err := llm.ExtractSQL(sql); err == nil {
		sql = extracted // a model that put a fence inside the string
	}
	return []string{sql}, nil
}

// adaptiveGenerator is the fast profile's generator: the direct one when
// the model is small (under smallModelParams) or measured slow (under
// slowTokensPerSecond), else the chain of thought. Which one ran is in the
// candidate's generator name.
type adaptiveGenerator struct {
	cot cotGenerator
}

// Models below this many parameters gain little from a chain of thought
// and lose the time it takes.
const smallModelParams = 2e9

func (g adaptiveGenerator) Name() string { return "direct|" + g.cot.Name() }

func (g adaptiveGenerator) pick(ctx context.Context, m Model) Generator {
	if d, ok := m.(modelDescriber); ok && d.smallOrSlow(ctx) {
		return directGenerator{}
	}
	return g.cot
}

func (g adaptiveGenerator) Generate(ctx context.Context, in *GenInput, m Model, run Runner) ([]string, error) {
	return g.pick(ctx, m).Generate(ctx, in, m, run)
}

// shuffleSchema reorders the table blocks of a rendered schema (separated by
// blank lines), deterministically for a question.
func shuffleSchema(schema, seed string) string {
	blocks := strings.Split(strings.TrimSpace(schema), "\n\n")
	if len(blocks) < 2 {
		return schema
	}
	h := fnv.New64a()
	h.Write([]byte(seed))
	r := rand.New(rand.NewSource(int64(h.Sum64())))
	r.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	return strings.Join(blocks, "\n\n")
}

// syntheticGenerator is CHASE-SQL's online synthetic example generation: the
// model writes a few question→SQL pairs over this schema's own tables with
// the question's features; those that run and return rows become few-shot
// examples for one more generation.
type syntheticGenerator struct{ examples int }

func (g syntheticGenerator) Name() string { return "synthetic" }

func (g syntheticGenerator) Generate(ctx context.Context, in *GenInput, m Model, run Runner) ([]string, error) {
	p, err := prompts.Synthetic(prompts.SyntheticParams{Question: in.Question, Schema: in.Schema, Count: g.examples})
	if err != nil {
		return nil, err
	}
	var out prompts.SyntheticResult
	if err := m.JSON(ctx, p, 0.7, &out); err != nil {
		return nil, err
	}
	examples := append([]prompts.Example(nil), in.Examples...)
	for _, ex := range out.Examples {
		if len(examples) >= g.examples+len(in.Examples) {
			break
		}
		if strings.TrimSpace(ex.Question) == "" || strings.TrimSpace(ex.SQL) == "" {
			continue
		}
		rows, err := run.Run(ctx, ex.SQL)
		if err != nil || len(rows.Values) == 0 {
			continue // an example that fails or finds nothing teaches the wrong thing
		}
		examples = append(examples, prompts.Example{Question: ex.Question, SQL: ex.SQL})
	}
	cp, err := prompts.Candidate(prompts.CandidateParams{
		Question: in.Question, Schema: in.Schema, Values: in.Values, Descriptions: in.Descriptions,
		Examples: examples, Queries: in.Queries, ServerVersion: in.ServerVersion, Method: methodDivide,
	})
	if err != nil {
		return nil, err
	}
	sql, err := m.SQL(ctx, cp, 0)
	if err != nil {
		return nil, err
	}
	return []string{sql}, nil
}

// decomposeGenerator is MAG-SQL's targets–conditions decomposition: the
// question is split into what to return and the conditions on it; SQL is
// built one condition at a time, each sub-SQL run and, when it fails,
// refined once with the server's error before the next condition is added.
type decomposeGenerator struct{ maxSteps int }

func (g decomposeGenerator) Name() string { return "decompose" }

func (g decomposeGenerator) Generate(ctx context.Context, in *GenInput, m Model, run Runner) ([]string, error) {
	p, err := prompts.Decompose(prompts.DecomposeParams{Question: in.Question, Schema: in.Schema, Descriptions: in.Descriptions})
	if err != nil {
		return nil, err
	}
	var d prompts.DecomposeResult
	if err := m.JSON(ctx, p, 0, &d); err != nil {
		return nil, err
	}
	conds := d.Conditions
	steps := len(conds)
	if steps == 0 {
		steps = 1
	}
	if steps > g.maxSteps {
		// Fold the remaining conditions into the last step.
		last := strings.Join(conds[g.maxSteps-1:], "; ")
		conds = append(conds[:g.maxSteps-1:g.maxSteps-1], last)
		steps = g.maxSteps
	}
	var sql string
	var sample *prompts.Sample
	for i := 0; i < steps; i++ {
		params := prompts.SubSQLParams{
			Question: in.Question, Schema: in.Schema, Values: in.Values, Descriptions: in.Descriptions,
			Targets: d.Targets, PreviousSQL: sql, PreviousResult: sample, Final: i == steps-1,
		}
		if len(conds) > 0 {
			params.Conditions = conds[:i+1]
		}
		sp, err := prompts.SubSQL(params)
		if err != nil {
			return nil, err
		}
		next, err := m.SQL(ctx, sp, 0)
		if err != nil {
			if sql != "" && errors.Is(err, ErrBudget) {
				return []string{sql}, nil
			}
			return nil, err
		}
		rows, rerr := run.Run(ctx, next)
		var se *pg.Error
		if errors.As(rerr, &se) && i < steps-1 {
			// The refiner: one repair with the server's error, so the next
			// step builds on SQL that runs.
			fp, err := prompts.Fixer(prompts.FixerParams{Question: in.Question, Schema: in.Schema, SQL: next,
				Error: in.view.execError(se, next)})
			if err != nil {
				return nil, err
			}
			if fixed, err := m.SQL(ctx, fp, 0); err == nil {
				next = fixed
				rows, rerr = run.Run(ctx, next)
			}
		}
		sql = next
		sample = nil
		if rerr == nil && rows != nil {
			sample = in.view.sample(rows, 3)
		}
	}
	return []string{sql}, nil
}

// llmFixer repairs SQL with the fixer prompt.
type llmFixer struct{}

func (llmFixer) Fix(ctx context.Context, in *GenInput, m Model, sql string, prob Problem) (string, error) {
	params := prompts.FixerParams{
		Question:     in.Question,
		Schema:       in.Schema,
		Values:       in.Values,
		Descriptions: in.Descriptions,
		SQL:          sql,
		GuardReason:  prob.GuardReason,
		Empty:        prob.Empty,
		NullColumns:  prob.NullColumns,
		Sample:       prob.Sample,
	}
	if se := prob.ExecErr; se != nil {
		params.Error = in.view.execError(se, sql)
	}
	p, err := prompts.Fixer(params)
	if err != nil {
		return "", err
	}
	return m.SQL(ctx, p, 0)
}
