package engine

import (
	"context"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/prompts"
)

// SchemaChoice is what schema selection put in front of the model.
type SchemaChoice struct {
	// Tables are the tables shown in detail ("schema.table"), in rank order.
	Tables []string
	// Schema is the rendered schema text and Tokens its estimated size.
	Schema string
	Tokens int
	// Joins are the join paths listed under the schema, Queries the
	// workload queries offered (Engine.Workload).
	Joins   []JoinLink
	Queries []string
	// Keywords and Values are what retrieval worked from and found.
	Keywords []string
	Values   []valueindex.Match
}

// PreviewSchema runs the model-free front of the pipeline for a question on
// a snapshot — lexical keywords (the fallback when the model's keyword call
// fails), value and description retrieval, deterministic schema selection
// under budget tokens — as the catalog role sees it (no session, no
// privilege filtering), with the engine's Workload and SemanticJoins, names resolved on
// searchPath (nil: public). Benchmarks and `explain`-style tools use it;
// it makes no LLM call and runs no SQL.
func (e *Engine) PreviewSchema(ctx context.Context, snap *catalog.Snapshot, question string, budget int, searchPath []string) *SchemaChoice {
	e.once.Do(e.applyDefaults)
	a := &ask{req: Request{Question: question, Database: snap.Database}, snap: snap, schema0: snap.Schema,
		sess: &session{searchPath: searchPath}, trace: &Trace{}}
	e.loadLearned(ctx, a)
	e.addSemanticJoins(a)
	a.keywords = lexicalKeywords(question)
	e.retrieve(ctx, a)
	sel := e.selectSchemaBudget(a, budget)
	return &SchemaChoice{Tables: sel, Schema: a.schema, Tokens: estimateTokens(a.schema), Joins: a.joins, Queries: a.queries, Keywords: a.keywords, Values: a.values}
}

// PreviewExamples returns the remembered pairs (Engine.Pairs) the prompt
// would show for a question on a snapshot — nearest in meaning first when
// the store embeds, then those sharing words — as a session with no role
// and searchPath would get them. Benchmarks compare the two rankings with
// it; it makes no chat call and runs no SQL.
func (e *Engine) PreviewExamples(ctx context.Context, snap *catalog.Snapshot, question string, searchPath []string) []prompts.Example {
	e.once.Do(e.applyDefaults)
	if e.Pairs == nil {
		return nil
	}
	a := &ask{req: Request{Question: question, Database: snap.Database}, snap: snap, schema0: snap.Schema,
		sess: &session{searchPath: searchPath}, trace: &Trace{}}
	return e.examples(ctx, a)
}
