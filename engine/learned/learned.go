// Package learned hands what package workload learned of a database to
// the engine, as the engine's own types (engine.Workload): the engine
// resolves the names against the catalog and keeps what the asker may see.
package learned

import (
	"context"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/workload"
)

// Store is the engine's Workload over the proxy's workload store.
type Store struct{ Store *workload.Store }

func (s Store) Learned(_ context.Context, database string) (*engine.Learned, error) {
	p, err := s.Store.Profile(database)
	if p == nil {
		return nil, err
	}
	// An unreadable file leaves the profile empty but usable: what the
	// proxy learnt since serves.
	return Learned(p), nil
}

// Profiles is the engine's Workload over fixed profiles, by database
// (benchmarks and simulations).
type Profiles map[string]*workload.Profile

func (ps Profiles) Learned(_ context.Context, database string) (*engine.Learned, error) {
	if p := ps[database]; p != nil {
		return Learned(p), nil
	}
	return nil, nil
}

// Learned is p as the engine reads it: each fingerprint's normalised text,
// relations, joins, count and distinct roles and sessions, the joins by
// use and the columns filtered or grouped by (ordering alone does not make
// a column one questions ask about).
func Learned(p *workload.Profile) *engine.Learned {
	rel := func(r workload.Rel) engine.Relation { return engine.Relation{Schema: r.Schema, Name: r.Name} }
	col := func(c workload.Col) engine.ColumnRef { return engine.ColumnRef{Relation: rel(c.Rel), Column: c.Name} }
	l := &engine.Learned{}
	for _, q := range p.Queries() {
		lq := engine.LearnedQuery{Fingerprint: q.Fingerprint, SQL: q.Text, Count: int(q.Count),
			Use: engine.Use{Roles: len(q.Roles), Sessions: len(q.Sessions)}}
		for _, r := range q.Relations {
			lq.Relations = append(lq.Relations, rel(r))
		}
		for _, j := range q.Joins {
			lq.Joins = append(lq.Joins, engine.LearnedJoin{Left: col(j.Left), Right: col(j.Right)})
		}
		for _, c := range q.Filtered {
			lq.Filtered = append(lq.Filtered, col(c))
		}
		l.Queries = append(l.Queries, lq)
	}
	for _, j := range p.Joins() {
		l.Joins = append(l.Joins, engine.LearnedJoin{Left: col(j.Left), Right: col(j.Right), Count: int(j.Count),
			Use: engine.Use{Roles: j.Roles, Sessions: j.Sessions}})
	}
	for _, c := range p.Columns() {
		if n := c.Filtered + c.Grouped; n > 0 {
			l.Columns = append(l.Columns, engine.LearnedColumn{Column: col(c.Col), Uses: int(n), Use: engine.Use{Roles: c.Roles, Sessions: c.Sessions}})
		}
	}
	return l
}
