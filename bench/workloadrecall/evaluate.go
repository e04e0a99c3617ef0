package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/learned"
	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/workload"
)

// gold is what one question's gold SQL reads and joins, per accepted
// alternative, names qualified with its database's schema.
type gold struct {
	q      dataset.Question
	shape  *workload.Shape // the first alternative's, for the others' workload
	tables [][]string      // "db.table", per alternative
	joins  [][]string      // "db.t.c=db.u.d" (sorted ends), per alternative with a join
}

func analyse(q dataset.Question) (gold, error) {
	g := gold{q: q}
	for i, alt := range compare.Alternatives(q.Gold) {
		s, err := workload.Analyze(alt)
		if err != nil {
			return g, fmt.Errorf("%s: gold %q: %w", q.DB, alt, err)
		}
		if i == 0 {
			g.shape = &s
		}
		var ts []string
		for _, r := range s.Relations {
			ts = append(ts, q.DB+"."+r.Name)
		}
		g.tables = append(g.tables, ts)
		var js []string
		for _, j := range s.Joins {
			js = append(js, joinKey(q.DB+"."+j.Left.Rel.Name+"."+j.Left.Name, q.DB+"."+j.Right.Rel.Name+"."+j.Right.Name))
		}
		if len(js) > 0 {
			g.joins = append(g.joins, js)
		}
	}
	return g, nil
}

func joinKey(a, b string) string {
	if b < a {
		a, b = b, a
	}
	return a + "=" + b
}

// leaveOneOut is the workload the bench's engine reads: the profile of
// the gold SQL of every question of the current question's database but
// its own. The bench asks one question at a time.
type leaveOneOut struct {
	golds []gold
	cur   int
}

func (w *leaveOneOut) Learned(ctx context.Context, _ string) (*engine.Learned, error) {
	db := w.golds[w.cur].q.DB
	p := workload.NewProfile(db, workload.Limits{MaxAge: -1})
	for i, g := range w.golds {
		if i == w.cur || g.q.DB != db {
			continue
		}
		// The databases are schemas of one database here: the relations
		// are qualified with theirs, as each database's own would resolve.
		s := *g.shape
		s.Relations = qualified(s.Relations, db)
		s.Joins = slices.Clone(s.Joins)
		for k := range s.Joins {
			s.Joins[k].Left.Rel.Schema, s.Joins[k].Right.Rel.Schema = db, db
		}
		s.Filtered, s.Grouped, s.Ordered = qualifiedCols(s.Filtered, db), qualifiedCols(s.Grouped, db), qualifiedCols(s.Ordered, db)
		p.Add(s, "", time.Now())
	}
	return learned.Profiles{db: p}.Learned(ctx, db)
}

func qualified(rs []workload.Rel, schema string) []workload.Rel {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Schema = schema
	}
	return out
}

func qualifiedCols(cs []workload.Col, schema string) []workload.Col {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Rel.Schema = schema
	}
	return out
}

// report is the outcome per database and overall ("" key).
type report struct {
	Budgets []int                `json:"budgets"`
	Tables  int                  `json:"relations"`
	DBs     []string             `json:"databases"`
	Rows    map[string]*dbResult `json:"results"`
	Gained  []string             `json:"gained,omitempty"` // join path offered with the workload only (largest budget)
	Missed  []string             `json:"missed,omitempty"` // offered with neither
}

// dbResult: index [0] without the workload, [1] with it; per budget.
type dbResult struct {
	Questions int      `json:"questions"`
	Joining   int      `json:"joining"` // questions whose gold SQL joins
	Tables    [2][]int `json:"tables_hits"`
	Joins     [2][]int `json:"join_path_hits"`
	Tokens    [2][]int `json:"tokens"`
	JoinLines [2][]int `json:"join_lines"`
}

func evaluate(ctx context.Context, snap *catalog.Snapshot, qs []dataset.Question, budgets []int) (*report, error) {
	var golds []gold
	for _, q := range qs {
		g, err := analyse(q)
		if err != nil {
			return nil, err
		}
		golds = append(golds, g)
	}
	loo := &leaveOneOut{golds: golds}
	engines := [2]*engine.Engine{{}, {Workload: loo}}
	rep := &report{Budgets: budgets, Tables: len(snap.Schema.Tables), Rows: map[string]*dbResult{}}
	row := func(db string) *dbResult {
		r := rep.Rows[db]
		if r == nil {
			r = &dbResult{}
			for m := range 2 {
				r.Tables[m], r.Joins[m] = make([]int, len(budgets)), make([]int, len(budgets))
				r.Tokens[m], r.JoinLines[m] = make([]int, len(budgets)), make([]int, len(budgets))
			}
			rep.Rows[db] = r
			if db != "" {
				rep.DBs = append(rep.DBs, db)
			}
		}
		return r
	}
	for i, g := range golds {
		loo.cur = i
		rows := []*dbResult{row(g.q.DB), row("")}
		for _, r := range rows {
			r.Questions++
			if len(g.joins) > 0 {
				r.Joining++
			}
		}
		for bi, b := range budgets {
			var joinHit [2]bool
			for m, e := range engines {
				ch := e.PreviewSchema(ctx, snap, g.q.Question, b, nil)
				offered := map[string]bool{}
				for _, j := range ch.Joins {
					offered[joinKey(j.Left, j.Right)] = true
				}
				tablesHit := slices.ContainsFunc(g.tables, func(ts []string) bool { return subset(ts, ch.Tables) })
				joinHit[m] = slices.ContainsFunc(g.joins, func(js []string) bool {
					return !slices.ContainsFunc(js, func(j string) bool { return !offered[j] })
				})
				for _, r := range rows {
					r.Tokens[m][bi] += ch.Tokens
					r.JoinLines[m][bi] += len(ch.Joins)
					if tablesHit {
						r.Tables[m][bi]++
					}
					if joinHit[m] {
						r.Joins[m][bi]++
					}
				}
			}
			if bi == len(budgets)-1 && len(g.joins) > 0 {
				line := fmt.Sprintf("[%s] %s  gold joins %s", g.q.DB, g.q.Question, strings.Join(g.joins[0], ", "))
				switch {
				case joinHit[1] && !joinHit[0]:
					rep.Gained = append(rep.Gained, line)
				case !joinHit[1] && !joinHit[0]:
					rep.Missed = append(rep.Missed, line)
				}
			}
		}
	}
	return rep, nil
}

func subset(want, got []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

func pct(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func (rep *report) print(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "workload learning, leave-one-out (workload: the gold SQL of the other questions of the database); lexical keywords, no model; %d relations\n", rep.Tables)
	fmt.Fprintf(w, "each cell: without → with the workload\n")
	fmt.Fprintf(w, "%-12s %4s %5s", "database", "n", "joins")
	for _, b := range rep.Budgets {
		fmt.Fprintf(w, " %15s", fmt.Sprintf("tables@%d", b))
	}
	for _, b := range rep.Budgets {
		fmt.Fprintf(w, " %15s", fmt.Sprintf("join path@%d", b))
	}
	fmt.Fprintln(w)
	for _, db := range append(slices.Clone(rep.DBs), "") {
		r := rep.Rows[db]
		name := db
		if name == "" {
			name = "overall"
		}
		fmt.Fprintf(w, "%-12s %4d %5d", name, r.Questions, r.Joining)
		for i := range rep.Budgets {
			fmt.Fprintf(w, " %15s", fmt.Sprintf("%5.1f → %5.1f", pct(r.Tables[0][i], r.Questions), pct(r.Tables[1][i], r.Questions)))
		}
		for i := range rep.Budgets {
			fmt.Fprintf(w, " %15s", fmt.Sprintf("%5.1f → %5.1f", pct(r.Joins[0][i], r.Joining), pct(r.Joins[1][i], r.Joining)))
		}
		fmt.Fprintln(w)
	}
	all := rep.Rows[""]
	fmt.Fprintf(w, "mean prompt schema tokens / join paths listed:")
	for i, b := range rep.Budgets {
		n := max(all.Questions, 1)
		fmt.Fprintf(w, "  @%d %d/%.1f → %d/%.1f", b, all.Tokens[0][i]/n, float64(all.JoinLines[0][i])/float64(n), all.Tokens[1][i]/n, float64(all.JoinLines[1][i])/float64(n))
	}
	fmt.Fprintln(w)
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\ngold join path offered only with the workload, at %d tokens:\n", rep.Budgets[len(rep.Budgets)-1])
	for _, l := range rep.Gained {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintf(w, "\ngold join path offered with neither, at %d tokens:\n", rep.Budgets[len(rep.Budgets)-1])
	for _, l := range rep.Missed {
		fmt.Fprintln(w, "  "+l)
	}
}
