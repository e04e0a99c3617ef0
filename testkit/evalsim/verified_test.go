package evalsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// verifiedRuns measures verified-query matching through the proxy: the
// entries of datasets/verified/sql-eval.yaml answer; asked are held-out
// paraphrases of them (datasets/verified/sql-eval-paraphrases.json, with
// gold SQL; parameters such as the city are filled from the question
// through the value index) and every answerable sql-eval question of the
// entries' databases, none of them written as a paraphrase. The model
// writes nothing useful (SELECT 1), so a right answer is an entry's. Every
// answer an entry gave must be right (its result the gold's): a question
// an entry does not answer is never answered by it. Recall (paraphrases
// answered by their entry) and precision (entry answers that are right)
// are logged.
func verifiedRuns(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := filepath.Join(repoRoot(t), "datasets", "verified")
	es, err := verified.Read(filepath.Join(root, "sql-eval.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "sql-eval-paraphrases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var paras []struct{ DB, Entry, Question, Gold string }
	if err := json.Unmarshal(b, &paras); err != nil {
		t.Fatal(err)
	}
	var dbs []string
	for _, e := range es {
		if !slices.Contains(dbs, e.Database) {
			dbs = append(dbs, e.Database)
		}
	}
	all, err := dataset.OpenSQLEval(datasetDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ds := &dataset.Dataset{Name: all.Name, Dir: all.Dir}
	want := map[string]string{} // question ID → the entry that should answer it
	for i, p := range paras {
		id := fmt.Sprintf("paraphrase/%d", i+1)
		ds.Questions = append(ds.Questions, dataset.Question{ID: id, DB: p.DB, Question: p.Question, Gold: p.Gold})
		want[id] = p.Entry
	}
	others := 0
	for _, q := range all.Questions {
		if slices.Contains(dbs, q.DB) && !q.Unanswerable {
			ds.Questions = append(ds.Questions, q)
			others++
		}
	}
	// The databases carry the run's prefix on the server.
	served := make(verified.List, len(es))
	for i, e := range es {
		e.Database = f.prefix + e.Database
		served[i] = e
	}
	f.verified = served
	defer func() { f.verified = nil }()
	connect := f.proxyWith(t, &fakeollama.Rule{Name: "nothing", Reply: "```sql\nSELECT 1\n```"}, nil)
	out := filepath.Join(outDir(t), "verified.jsonl")
	_ = os.Remove(out)
	res, err := runner.Run(ctx, ds, runner.Options{Connect: connect, Profile: "fast", Run: "verified queries", Parallel: parallel(),
		Timeout: time.Minute, Results: out})
	if err != nil {
		t.Fatal(err)
	}
	recalled, answered, right, wrongEntry := 0, 0, 0, 0
	for _, r := range res {
		if r.Verified == "" {
			if e, ok := want[r.ID]; ok {
				t.Logf("missed: %q (entry %s)", r.Question, e)
			}
			continue
		}
		answered++
		if r.Right() {
			right++
		} else {
			t.Errorf("%s %q was answered by verified query %s with a result other than the gold's (%s)\n  gold: %s\n  sql:  %s",
				r.ID, r.Question, r.Verified, r.Outcome, r.Gold, r.SQL)
		}
		if e, ok := want[r.ID]; ok {
			if r.Verified == e {
				recalled++
			} else {
				wrongEntry++
			}
		}
	}
	byOthers := answered - recalled - wrongEntry
	t.Logf("verified queries (%d entries): %d/%d held-out paraphrases answered by their entry (recall %.2f), %d by another entry; %d of %d other sql-eval questions answered by an entry; %d/%d entry answers right (precision %.2f)",
		len(es), recalled, len(paras), float64(recalled)/float64(len(paras)), wrongEntry, byOthers, others, right, answered, float64(right)/float64(max(answered, 1)))
	if recalled == 0 {
		t.Error("no paraphrase was answered by its entry")
	}
}
