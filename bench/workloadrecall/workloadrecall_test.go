package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// The leave-one-out workload holds the other questions' gold SQL of the
// same database only, counted by fingerprint, with their joins.
func TestLeaveOneOut(t *testing.T) {
	var golds []gold
	for _, q := range []dataset.Question{
		{DB: "a", Gold: "SELECT x.n FROM x JOIN y ON y.id = x.yid WHERE x.k = 1"},
		{DB: "a", Gold: "SELECT x.n FROM x JOIN y ON y.id = x.yid WHERE x.k = 2"},
		{DB: "a", Gold: "SELECT count(*) FROM z"},
		{DB: "b", Gold: "SELECT count(*) FROM w"},
	} {
		g, err := analyse(q)
		if err != nil {
			t.Fatal(err)
		}
		golds = append(golds, g)
	}
	w := &leaveOneOut{golds: golds, cur: 2}
	l, err := w.Learned(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Queries) != 1 || l.Queries[0].Count != 2 || len(l.Joins) != 1 || l.Joins[0].Count != 2 {
		t.Fatalf("learned %+v: want one query run twice and its join, counted twice", l)
	}
	if j := l.Joins[0]; j.Left.Relation.Schema != "a" || j.Right.Relation.Schema != "a" {
		t.Errorf("join %+v: relations not qualified with the database's schema", j)
	}
	if got := golds[0].joins; len(got) != 1 || got[0][0] != "a.x.yid=a.y.id" {
		t.Errorf("gold joins %q", got)
	}
}

// On two databases, merged into one: the workload offers the gold join
// path of more questions than names alone, and never fewer gold tables
// (the full run is go run ./bench/workloadrecall).
func TestWorkloadRecall(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	ds, err := dataset.OpenSQLEval(filepath.Join("..", "..", "datasets", "sql-eval"))
	if err != nil {
		t.Fatal(err)
	}
	snap, qs, err := sqleval.Merged(ctx, c, pgtest.UniqueName(t, "wlrecall"), ds, []string{"restaurants", "academic"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := evaluate(ctx, snap, qs, []int{1000, 4000})
	if err != nil {
		t.Fatal(err)
	}
	all := rep.Rows[""]
	if all.Joining == 0 {
		t.Fatal("no question's gold SQL joins")
	}
	for i, b := range rep.Budgets {
		if all.Joins[1][i] <= all.Joins[0][i] {
			t.Errorf("@%d: join path offered for %d questions with the workload, %d without", b, all.Joins[1][i], all.Joins[0][i])
		}
		if all.Tables[1][i] < all.Tables[0][i] {
			t.Errorf("@%d: gold tables shown for %d questions with the workload, %d without", b, all.Tables[1][i], all.Tables[0][i])
		}
	}
}
