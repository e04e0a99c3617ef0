package evalsim_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/report"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/testkit/evalsim"
)

const seed = 20261123

// questions: every sixth answerable question (32 of 190, every database and
// category) and every tenth unanswerable one (11 of 105) for CI;
// EVALSIM_FULL=1 asks all 295.
func questions(t *testing.T) *dataset.Dataset {
	ds, err := dataset.OpenSQLEval(datasetDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("EVALSIM_FULL") == "" {
		var keep []dataset.Question
		ans, idk := 0, 0
		for _, q := range ds.Questions {
			switch {
			case !q.Unanswerable && ans%6 == 0, q.Unanswerable && idk%10 == 0:
				keep = append(keep, q)
			}
			if q.Unanswerable {
				idk++
			} else {
				ans++
			}
		}
		ds.Questions = keep
	}
	return ds
}

// outDir is where results and reports go: EVALSIM_OUT, else the test's temp dir.
func outDir(t *testing.T) string {
	if d := os.Getenv("EVALSIM_OUT"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func parallel() int {
	if n, err := strconv.Atoi(os.Getenv("EVALSIM_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return 4
}

// simulate runs ds through a fresh proxy with a simulated model and returns
// the results and the simulation's stats.
func simulate(t *testing.T, f *fixture, opts evalsim.Options, profile, name string) ([]runner.Result, evalsim.Stats, *evalsim.Sim) {
	t.Helper()
	return simulateLearning(t, f, opts, profile, name, false)
}

// simulateLearning is simulate with, when learn is set, the engine
// learning from the simulation's workload (evalsim.Sim.Workload).
func simulateLearning(t *testing.T, f *fixture, opts evalsim.Options, profile, name string, learn bool) ([]runner.Result, evalsim.Stats, *evalsim.Sim) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if f.sim == nil {
		// Prepared once: every gold query and wrong variant run and judged.
		sim, _, err := evalsim.New(ctx, f.ds, f.direct, evalsim.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		f.sim = sim
	}
	sim, st := f.sim.With(opts)
	var w engine.Workload
	if learn {
		var err error
		if w, err = sim.Workload(f.prefix); err != nil {
			t.Fatal(err)
		}
	}
	connect := f.proxyFor(t, sim, w)
	out := filepath.Join(outDir(t), name+".jsonl")
	_ = os.Remove(out)
	start := time.Now()
	res, err := runner.Run(ctx, f.ds, runner.Options{
		Connect: connect, Profile: profile, Run: "simulated " + name, Parallel: parallel(),
		Timeout: 3 * time.Minute, Results: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (simulated, profile %q): %s; planted rate %.3f (%d/%d unplantable); variants %v; calls %v; %d questions in %s",
		name, profile, summarize(res), st.PlantedRate(), st.Unplantable, st.Questions, st.Variants, sim.Counts(), len(res), time.Since(start).Round(time.Millisecond))
	if u := sim.Unknown(); len(u) > 0 {
		t.Errorf("the simulated model got %d calls it does not recognise (a new kind of call, or a question it does not know); first: %q", len(u), u[0])
	}
	if len(res) != len(f.ds.Questions) {
		t.Fatalf("%d results for %d questions", len(res), len(f.ds.Questions))
	}
	return res, st, sim
}

func summarize(res []runner.Result) string {
	n := map[string]int{}
	right := 0
	for _, r := range res {
		n[r.Outcome]++
		if r.Right() {
			right++
		}
	}
	return fmt.Sprintf("%d/%d right (%.1f%%): correct %d, subset %d, wrong %d, error %d, abstained %d",
		right, len(res), 100*float64(right)/float64(max(len(res), 1)), n[runner.Correct], n[runner.Subset], n[runner.Wrong], n[runner.Error], n[runner.Abstained])
}

func rightCount(res []runner.Result) int {
	n := 0
	for _, r := range res {
		if r.Right() {
			n++
		}
	}
	return n
}

// profiles are the engine's built-in profiles, asked by name in the marker.
var profiles = []string{"fast", "balanced", "max"}

// TestSimulatedEvaluation checks the harness and the pipeline end to end
// with the simulated model, for every profile: with P = 1 every question
// must come out right (any loss is a harness or pipeline bug), with P = 0
// exactly the planted rate (the questions no wrong variant exists for).
func TestSimulatedEvaluation(t *testing.T) {
	ds := questions(t)
	f := newFixture(t, ds)
	for _, profile := range profiles {
		t.Run(profile+"/p=1", func(t *testing.T) {
			res, _, _ := simulate(t, f, evalsim.Options{P: 1, Q: 1, Seed: seed}, profile, profile+"-p1")
			f.all = append(f.all, res...)
			// The model wrote the gold SQL: a literal correction that
			// changes its result surprises the user.
			rewrites, answers, changed := 0, 0, 0
			for _, r := range res {
				if len(r.Rewrites) == 0 {
					continue
				}
				rewrites += len(r.Rewrites)
				answers++
				if r.Outcome != runner.Correct && r.Outcome != runner.Abstained {
					changed++
					t.Errorf("%s: literal correction changed the gold's result (%s): %+v\n  gold: %s\n  sql:  %s", r.ID, r.Outcome, r.Rewrites, r.Gold, r.SQL)
				}
			}
			t.Logf("%s p=1: %d literal rewrites in %d of %d answers, %d changed a result", profile, rewrites, answers, len(res), changed)
			for _, r := range res {
				if !r.Right() {
					t.Errorf("%s: %s (%s %s)\n  question: %s\n  gold: %s\n  sql:  %s\n  gold rows %d %v\n  gen rows  %d %v",
						r.ID, r.Outcome, r.SQLState, r.Error, r.Question, r.Gold, r.SQL, r.GoldRows, head(r.GoldHead), r.GenRows, head(r.GenHead))
				}
				if r.Profile != profile {
					t.Errorf("%s: profile %q recorded, asked %q", r.ID, r.Profile, profile)
				}
			}
		})
		t.Run(profile+"/p=0", func(t *testing.T) {
			// Literal-case variants are left out here: the engine's literal
			// correction repairs them (that is its job), which would make
			// the expected figure depend on the value index.
			kinds := slices.DeleteFunc(slices.Clone(evalsim.AllKinds), func(k string) bool { return k == evalsim.KindLiteral })
			res, st, _ := simulate(t, f, evalsim.Options{P: 0, Q: 0, Seed: seed, Kinds: kinds}, profile, profile+"-p0")
			if got, want := rightCount(res), st.Unplantable; got != want {
				for _, r := range res {
					if r.Right() {
						t.Logf("right at p=0: %s %s\n  sql: %s", r.ID, r.Outcome, r.SQL)
					}
				}
				t.Errorf("p=0: %d right, want the planted %d of %d", got, want, len(res))
			}
			if st.Unplantable*2 > st.Questions {
				t.Errorf("only %d of %d questions have a wrong variant", st.Questions-st.Unplantable, st.Questions)
			}
		})
	}
	t.Run("fast/literal-case", func(t *testing.T) { literalCase(t, f) })
	t.Run("max-beats-fast", func(t *testing.T) { maxBeatsFast(t, f) })
	t.Run("fast/workload-examples", func(t *testing.T) { workloadExamples(t, f) })
	t.Run("max/model-data", func(t *testing.T) { modelDataRuns(t, f) })
	t.Run("conversations", func(t *testing.T) { conversationRuns(t, f) })
	t.Run("verified", func(t *testing.T) { verifiedRuns(t, f) })

	// The report of every run, for people (go test -artifacts keeps it;
	// EVALSIM_OUT names a directory).
	dir := os.Getenv("EVALSIM_OUT")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	var b bytes.Buffer
	if err := report.WriteTable(&b, f.all); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary (simulated model, not accuracy):\n%s", b.String())
	page, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	if err := report.WriteHTML(page, f.all, report.HTMLOptions{Title: "nlproxy eval — simulated model",
		Note: "Simulated model (testkit/evalsim): these figures test the harness and the pipeline's mechanics; they are not accuracy."}); err != nil {
		t.Fatal(err)
	}
}

// literalCase: the model writes, wherever it can, the gold with a string
// literal in the wrong letter case (P = 0, literal-case variants only).
// Literal correction changes such a literal, which no row matches, to the
// stored value: every rewrite it makes is a letter-case one, and answers it
// rewrote come out right unless another literal stayed wrong. The counts
// are logged.
func literalCase(t *testing.T, f *fixture) {
	res, st, _ := simulate(t, f, evalsim.Options{P: 0, Q: 0, Seed: seed, Kinds: []string{evalsim.KindLiteral}}, "fast", "fast-literal-case")
	rewrites, answers, right := 0, 0, 0
	for _, r := range res {
		if len(r.Rewrites) == 0 {
			continue
		}
		rewrites += len(r.Rewrites)
		answers++
		if r.Right() {
			right++
		}
		for _, rw := range r.Rewrites {
			if rw.Kind != memory.RewriteCase {
				t.Errorf("%s: rewrite %+v is not of letter case\n  sql: %s", r.ID, rw, r.SQL)
			}
		}
	}
	t.Logf("literal-case variants (%d planted): %d literal rewrites in %d answers, %d of them right; %d/%d right overall",
		st.Variants[evalsim.KindLiteral], rewrites, answers, right, rightCount(res), len(res))
	if st.Variants[evalsim.KindLiteral] > 0 && answers == 0 {
		t.Errorf("%d literal-case variants planted, none corrected", st.Variants[evalsim.KindLiteral])
	}
}

// maxBeatsFast: with P = 0.5 and Q = 0.8, max (several generators and
// a pairwise selector) must answer more questions right than fast (one
// generator): the mechanics of generation and selection, end to end on
// real execution. The margin is logged.
func maxBeatsFast(t *testing.T, f *fixture) {
	opts := evalsim.Options{P: 0.5, Q: 0.8, Seed: seed}
	fast, _, _ := simulate(t, f, opts, "fast", "fast-p05")
	if os.Getenv("EVALSIM_FULL") != "" {
		bal, _, _ := simulate(t, f, opts, "balanced", "balanced-p05")
		f.all = append(f.all, bal...)
	}
	maxRes, _, _ := simulate(t, f, opts, "max", "max-p05")
	f.all = append(f.all, fast...)
	f.all = append(f.all, maxRes...)
	nf, nm := rightCount(fast), rightCount(maxRes)
	t.Logf("p=0.5 q=0.8 (simulated): fast %d/%d, max %d/%d, margin %+d questions (%+.1f points)",
		nf, len(fast), nm, len(maxRes), nm-nf, 100*float64(nm-nf)/float64(len(fast)))
	if nm <= nf {
		t.Errorf("max %d right, fast %d: max should beat fast when generators are right half the time and the selector 80%%", nm, nf)
	}
}

// workloadExamples: with P = 0.5 and ExampleLift = 0.5, the fast profile
// runs without and with the workload learnt (every gold SQL, its own
// discounted by the simulated model). Some SQL prompts must hold an
// example over the gold's tables, and the workload must not cost right
// answers (the draws are the same; an example only raises the chance, see
// evalsim.Options.ExampleLift). The figures are simulated, not accuracy;
// the margin is logged.
func workloadExamples(t *testing.T, f *fixture) {
	opts := evalsim.Options{P: 0.5, Q: 0.8, Seed: seed, ExampleLift: 0.5}
	off, _, _ := simulateLearning(t, f, opts, "fast", "fast-p05-noworkload", false)
	on, _, sim := simulateLearning(t, f, opts, "fast", "fast-p05-workload", true)
	f.all = append(f.all, off...)
	f.all = append(f.all, on...)
	n0, n1 := rightCount(off), rightCount(on)
	t.Logf("p=0.5 lift=0.5 (simulated): fast without workload %d/%d, with %d/%d, margin %+d questions (%+.1f points); %d SQL calls held an example over the gold's tables",
		n0, len(off), n1, len(on), n1-n0, 100*float64(n1-n0)/float64(len(off)), sim.Lifted())
	if sim.Lifted() == 0 {
		t.Fatal("no prompt held a workload example over the gold's tables")
	}
	if n1 < n0 {
		t.Errorf("with the workload %d right, without %d: examples over the gold's tables must not hurt", n1, n0)
	}
}

func head(t *compare.Table) string { return t.String() }
