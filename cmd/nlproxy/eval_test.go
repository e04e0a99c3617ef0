package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/evalsim"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestEvalCommands drives load, run (with its own proxy, a simulated model
// that always answers right), a resumed run after an interrupted write,
// report with HTML, and compare — as a user would, through run().
func TestEvalCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{})
	data := filepath.Join("..", "..", "datasets", "sql-eval")
	prefix := pgtest.UniqueName(t, "cli") + "_"
	upstream := cluster.URL(pgtest.Superuser, pgtest.SuperuserPassword, "postgres")
	dir := t.TempDir()

	var out, errb bytes.Buffer
	if err := run(ctx, []string{"eval", "load", "--upstream", upstream, "--data", data, "--db", "restaurants", "--prefix", prefix}, &out, &errb); err != nil {
		t.Fatalf("eval load: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "loaded restaurants as "+prefix+"restaurants") {
		t.Fatalf("eval load said %q", out.String())
	}
	// A second load names --replace; a dataset directory that is not there
	// names --data.
	err := run(ctx, []string{"eval", "load", "--upstream", upstream, "--data", data, "--db", "restaurants", "--prefix", prefix}, &out, &errb)
	if err == nil || !strings.Contains(reportError(err), "--replace") {
		t.Errorf("second eval load: %v, want a hint naming --replace", err)
	}
	err = run(ctx, []string{"eval", "load", "--upstream", upstream, "--data", filepath.Join(dir, "nosuch")}, &out, &errb)
	if err == nil || !strings.Contains(reportError(err), "--data DIR") {
		t.Errorf("eval load without a dataset: %v, want a hint naming --data", err)
	}
	var comments int
	conn, err := cluster.Connect(ctx, prefix+"restaurants")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_description d JOIN pg_class c ON c.oid = d.objoid WHERE c.relnamespace = 'public'::regnamespace AND d.objsubid > 0").Scan(&comments); err != nil || comments == 0 {
		t.Fatalf("column comments: %d, %v", comments, err)
	}
	conn.Close(ctx)

	ds, err := dataset.OpenSQLEval(data)
	if err != nil {
		t.Fatal(err)
	}
	ds.Filter([]string{"restaurants"}, false)
	sim, _, err := evalsim.New(ctx, ds, func(ctx context.Context, db string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, prefix+db)
	}, evalsim.Options{P: 1, Q: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{Default: sim.Rule()})
	results := filepath.Join(dir, "fast.jsonl")
	evalRunArgs := func(limit string) []string {
		return []string{"eval", "run", "--upstream", upstream, "--data", data, "--db", "restaurants", "--prefix", prefix,
			"--out", results, "--limit", limit, "--run", "sim", "--quiet", "--",
			"--ollama-host", fake.URL(), "--model", "sim-model", "--data-dir", filepath.Join(dir, "catalog")}
	}
	out.Reset()
	if err := run(ctx, evalRunArgs("4"), &out, &errb); err != nil {
		t.Fatalf("eval run: %v\n%s", err, errb.String())
	}
	rs, err := runner.ReadResults(results)
	if err != nil || len(rs) != 4 {
		t.Fatalf("results: %d, %v", len(rs), err)
	}
	for _, r := range rs {
		if !r.Right() {
			t.Errorf("%s: %s %s", r.ID, r.Outcome, r.Error)
		}
	}
	if !strings.Contains(out.String(), "answerable") {
		t.Errorf("no summary table:\n%s", out.String())
	}

	// An interrupted write leaves half a line; the next run drops it and
	// asks only the questions not yet answered.
	f, err := os.OpenFile(results, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"id":"restaurants/q`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	calls := len(fake.RequestsTo(fakeollama.RouteChat))
	if err := run(ctx, evalRunArgs("6"), &out, &errb); err != nil {
		t.Fatalf("resumed eval run: %v\n%s", err, errb.String())
	}
	rs, err = runner.ReadResults(results)
	if err != nil || len(rs) != 6 {
		t.Fatalf("after resuming: %d results, %v", len(rs), err)
	}
	ids := map[string]bool{}
	for _, r := range rs {
		if ids[r.ID] {
			t.Errorf("%s asked twice", r.ID)
		}
		ids[r.ID] = true
	}
	// Two new questions, each a keywords call and a generation call.
	if n := len(fake.RequestsTo(fakeollama.RouteChat)) - calls; n != 4 {
		t.Errorf("resumed run made %d model calls, want 4 (two new questions)", n)
	}

	html := filepath.Join(dir, "report.html")
	out.Reset()
	if err := run(ctx, []string{"eval", "report", "--html", html, results}, &out, &errb); err != nil {
		t.Fatalf("eval report: %v", err)
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("html report: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"eval", "compare", results, results}, &out, &errb); err != nil {
		t.Fatalf("eval compare: %v", err)
	}
	if !strings.Contains(out.String(), "6 questions in both; 0 gained, 0 lost") {
		t.Errorf("compare said:\n%s", out.String())
	}
	if err := run(ctx, []string{"eval", "compare", results}, &out, &errb); exitCode(err) != 2 {
		t.Errorf("compare with one file: %v (exit %d), want a usage error", err, exitCode(err))
	}

	// A model that never writes SQL: the asks fail, and their results
	// still record the model calls and tokens they spent.
	bad := fakeollama.New(t, fakeollama.Options{Default: &fakeollama.Rule{Name: "no sql", Reply: "I would rather not."}})
	failedResults := filepath.Join(dir, "failed.jsonl")
	if err := run(ctx, []string{"eval", "run", "--upstream", upstream, "--data", data, "--db", "restaurants", "--prefix", prefix,
		"--out", failedResults, "--limit", "2", "--run", "bad", "--quiet", "--",
		"--ollama-host", bad.URL(), "--model", "sim-model", "--data-dir", filepath.Join(dir, "catalog")}, &out, &errb); err != nil {
		t.Fatalf("eval run with a failing model: %v\n%s", err, errb.String())
	}
	rs, err = runner.ReadResults(failedResults)
	if err != nil || len(rs) != 2 {
		t.Fatalf("failed results: %d, %v", len(rs), err)
	}
	failedCalls := 0
	for _, r := range rs {
		if r.Right() || r.LLMCalls == 0 {
			t.Errorf("%s: outcome %s with %d model calls, want a failure that counts its calls", r.ID, r.Outcome, r.LLMCalls)
		}
		failedCalls += r.LLMCalls
	}
	if n := len(bad.RequestsTo(fakeollama.RouteChat)); failedCalls != n {
		t.Errorf("results record %d model calls, the model saw %d", failedCalls, n)
	}
}

// TestEvalBIRDFormat: a BIRD-format directory (dev.json, databases/<db>/<db>.sql)
// loads and runs with BIRD's comparison (same set of rows).
func TestEvalBIRDFormat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "databases", "shop"), 0o755); err != nil {
		t.Fatal(err)
	}
	ddl := `CREATE TABLE item (id int PRIMARY KEY, name text, price numeric);
INSERT INTO item VALUES (1, 'pen', 2.5), (2, 'ink', 7), (3, 'pad', 4), (4, 'nib', 1.25);`
	if err := os.WriteFile(filepath.Join(dir, "databases", "shop", "shop.sql"), []byte(ddl), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := `[
 {"question_id": 0, "db_id": "shop", "question": "How many items cost more than 2?", "evidence": "cost refers to price", "SQL": "SELECT count(*) FROM item WHERE price > 2", "difficulty": "simple"},
 {"question_id": 1, "db_id": "shop", "question": "Which items cost less than 5?", "evidence": "", "SQL": "SELECT name FROM item WHERE price < 5", "difficulty": "moderate"}
]`
	if err := os.WriteFile(filepath.Join(dir, "dev.json"), []byte(dev), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := pgtest.UniqueName(t, "bird") + "_"
	upstream := cluster.URL(pgtest.Superuser, pgtest.SuperuserPassword, "postgres")
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"eval", "load", "--dataset", "bird", "--upstream", upstream, "--data", dir, "--prefix", prefix}, &out, &errb); err != nil {
		t.Fatalf("eval load: %v\n%s", err, errb.String())
	}
	ds, err := dataset.OpenBIRD(dir)
	if err != nil {
		t.Fatal(err)
	}
	sim, _, err := evalsim.New(ctx, ds, func(ctx context.Context, db string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, prefix+db)
	}, evalsim.Options{P: 1, Q: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{Default: sim.Rule()})
	results := filepath.Join(dir, "bird.jsonl")
	if err := run(ctx, []string{"eval", "run", "--dataset", "bird", "--upstream", upstream, "--data", dir, "--prefix", prefix,
		"--out", results, "--quiet", "--", "--ollama-host", fake.URL(), "--model", "sim-model", "--data-dir", filepath.Join(dir, "catalog")}, &out, &errb); err != nil {
		t.Fatalf("eval run: %v\n%s", err, errb.String())
	}
	rs, err := runner.ReadResults(results)
	if err != nil || len(rs) != 2 {
		t.Fatalf("results: %d, %v", len(rs), err)
	}
	for _, r := range rs {
		if r.Dataset != "bird" || !r.Right() || r.Difficulty == "" {
			t.Errorf("%s: dataset %q outcome %s %s difficulty %q", r.ID, r.Dataset, r.Outcome, r.Error, r.Difficulty)
		}
	}
	// Results are appended as questions finish, in any order.
	var withEvidence bool
	for _, r := range rs {
		withEvidence = withEvidence || strings.Contains(r.Question, "\ncost refers to price")
	}
	if !withEvidence {
		t.Errorf("evidence not passed with the question: %+v", rs)
	}
	if u := sim.Unknown(); len(u) > 0 {
		t.Errorf("unrecognised model calls: %q", u)
	}
}
