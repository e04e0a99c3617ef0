package main

import (
	"context"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/workload"
)

// learnedWorkload gives the engine what the workload store learned of each
// database; the engine resolves the names and keeps what the asker may see.
type learnedWorkload struct{ store *workload.Store }

func (w learnedWorkload) Learned(_ context.Context, database string) (*engine.Learned, error) {
	p, err := w.store.Profile(database)
	if p == nil {
		return nil, err
	}
	// An unreadable file leaves the profile empty but usable: what the
	// proxy learnt since serves.
	rel := func(r workload.Rel) engine.Relation { return engine.Relation{Schema: r.Schema, Name: r.Name} }
	col := func(c workload.Col) engine.ColumnRef { return engine.ColumnRef{Relation: rel(c.Rel), Column: c.Name} }
	l := &engine.Learned{}
	for _, q := range p.Queries() {
		lq := engine.LearnedQuery{SQL: q.Text, Count: int(q.Count)}
		for _, r := range q.Relations {
			lq.Relations = append(lq.Relations, rel(r))
		}
		l.Queries = append(l.Queries, lq)
	}
	for _, j := range p.Joins() {
		l.Joins = append(l.Joins, engine.LearnedJoin{Left: col(j.Left), Right: col(j.Right), Count: int(j.Count)})
	}
	for _, c := range p.Columns() {
		if n := c.Filtered + c.Grouped; n > 0 {
			l.Columns = append(l.Columns, engine.LearnedColumn{Column: col(c.Col), Uses: int(n)})
		}
	}
	return l, nil
}
