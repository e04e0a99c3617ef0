package evalsim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/testkit/evalsim"
)

// conversationRuns asks the conversations of datasets/followups (turns
// with gold SQL over the sql-eval databases) the way `nlproxy eval run
// --conversations` does: each conversation's turns in order in one
// session. The oracle (P = 1, Q = 1: every call right, the follow-up
// rewrite included) must get every turn right and read every follow-up as
// the dataset does; the simulated model (P = 0.5, Q = 0.8, the rewrite
// right with probability P, else the previous question) is logged per
// profile. Simulated figures: mechanics, not accuracy.
func conversationRuns(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs, err := dataset.ReadConversations(filepath.Join(repoRoot(t), "datasets", "followups", "sql-eval.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The questions as the engine reads them (a follow-up as its
	// standalone reading) are those the simulated model knows.
	read := &dataset.Dataset{Name: f.ds.Name, Dir: f.ds.Dir}
	followups := map[string]evalsim.Followup{}
	for _, c := range cs {
		prev := ""
		for i, turn := range c.Turns {
			q := turn.Question
			if turn.Standalone != "" {
				if _, dup := followups[turn.Question]; dup {
					t.Fatalf("follow-up %q twice in the dataset: the simulated model tells them apart by text", turn.Question)
				}
				followups[turn.Question] = evalsim.Followup{Standalone: turn.Standalone, Previous: prev}
				q = turn.Standalone
			}
			read.Questions = append(read.Questions, dataset.Question{ID: fmt.Sprintf("%s/%d", c.ID, i+1), DB: c.DB, Question: q, Gold: turn.Gold})
			prev = q
		}
	}
	base, st, err := evalsim.New(ctx, read, f.direct, evalsim.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	ds := &dataset.Dataset{Name: f.ds.Name, Dir: f.ds.Dir, Questions: dataset.Questions(cs)}
	t.Logf("%d conversations, %d turns, %d follow-ups; %d turns with a wrong variant", len(cs), len(ds.Questions), len(followups), st.Questions-st.Unplantable)
	for _, run := range []struct {
		name, profile string
		p, q          float64
	}{
		{"oracle-fast", "fast", 1, 1},
		{"simulated-fast", "fast", 0.5, 0.8},
		{"simulated-max", "max", 0.5, 0.8},
	} {
		sim, _ := base.With(evalsim.Options{P: run.p, Q: run.q, Seed: seed, Followups: followups})
		connect := f.proxyFor(t, sim, nil)
		out := filepath.Join(outDir(t), "conversations-"+run.name+".jsonl")
		_ = os.Remove(out)
		res, err := runner.Run(ctx, ds, runner.Options{Connect: connect, Profile: run.profile, Run: "simulated conversations " + run.name,
			Parallel: parallel(), Timeout: 3 * time.Minute, Results: out})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(ds.Questions) {
			t.Fatalf("%s: %d results for %d turns", run.name, len(res), len(ds.Questions))
		}
		right, fuRight, fuRead, fus := 0, 0, 0, 0
		for _, r := range res {
			if r.Right() {
				right++
			}
			if r.Standalone == "" {
				if r.Understood != "" {
					t.Errorf("%s %s: a first turn was read as %q", run.name, r.ID, r.Understood)
				}
				continue
			}
			fus++
			if r.Right() {
				fuRight++
			}
			if r.Understood == r.Standalone {
				fuRead++
			}
			if run.p == 1 && (r.Understood != r.Standalone || !r.Right()) {
				t.Errorf("%s %s: %s, read as %q (want %q)\n  sql: %s", run.name, r.ID, r.Outcome, r.Understood, r.Standalone, r.SQL)
			}
		}
		t.Logf("%s (simulated model, profile %s, P=%.1f Q=%.1f): %d/%d turns right; follow-ups %d/%d right, %d/%d read as the dataset reads them; calls %v",
			run.name, run.profile, run.p, run.q, right, len(res), fuRight, fus, fuRead, fus, sim.Counts())
		if u := sim.Unknown(); len(u) > 0 {
			t.Errorf("%s: the simulated model got %d calls it does not recognise; first: %q", run.name, len(u), u[0])
		}
		f.all = append(f.all, res...)
	}
}
