// Package optimize rewrites a read-only query into a faster equivalent one
// by guided cost descent (LaPuda): a local model proposes rewrites under a
// few abstract policies, a supervisor keeps it on course — the planner's
// EXPLAIN cost is the cost model, an error monitor rejects what does not
// parse, fails the guard, changes the output or returns other rows — and
// the best valid plan wins only when measured runs confirm it is faster.
// It never returns a query that is slower or not shown equivalent: the
// original comes back then, with the reason.
//
// Every statement runs through the caller's Executor (sealed.Executor
// satisfies it) as a guard-sealed Statement: read-only, bounded, on the
// asking client's own session.
package optimize

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// Model is how the optimizer talks to the model; the engine's stage Model
// satisfies it (calls then count against the ask's profile budget). An
// answer without SQL is an error the optimizer reads as a rejected
// proposal.
type Model interface {
	SQL(ctx context.Context, p prompts.Prompt, temperature float64) (string, error)
	JSON(ctx context.Context, p prompts.Prompt, temperature float64, out any) error
}

// Defaults for the Optimizer's zero fields.
const (
	DefaultTolerance   = 3
	DefaultMaxCalls    = 16
	DefaultTimingRuns  = 5
	DefaultMinGain     = 0.1
	DefaultCostSlack   = 0.25
	DefaultMaxConfirm  = 3
	DefaultTimeout     = 10 * time.Second
	DefaultCompareRows = 1000
	DefaultTemperature = 0.7 // the paper's sampling temperature for k > 1 runs
	// DefaultMinSaving: below a millisecond, a measured difference is mostly
	// the noise of a round trip, not a gain.
	DefaultMinSaving = time.Millisecond
)

// Optimizer runs guided cost descent. Configure it by its fields; zero
// values take the defaults above. Safe for concurrent use.
type Optimizer struct {
	// LLM is used when a Request brings no Model: one chat call per step,
	// no corrective re-asks.
	LLM llm.Client
	// Guard checks the user's SQL and every proposal (Optimize; Run takes
	// the options per request, e.g. with each database's function catalog).
	Guard guard.Options
	// Tolerance ends a run after this many consecutive proposals that were
	// invalid or did not lower the cost.
	Tolerance int
	// MaxCalls bounds the LLM calls of one optimization, all runs together
	// (each step is two: instruction and rewrite).
	MaxCalls int
	// Runs is the number of independent descents aggregated (the paper's
	// k); their valid plans are pooled and the cheapest confirmed one wins.
	Runs int
	// Temperature of the model; 0 for one run, DefaultTemperature otherwise
	// when left zero.
	Temperature *float64
	// TimingRuns is the number of measured runs of each statement (median).
	TimingRuns int
	// MinGain is the least measured gain that counts as faster (0.1: the
	// rewrite's median time is at most 90% of the original's).
	MinGain float64
	// MinSaving is the least time per run a rewrite must save (by the
	// medians) to count as faster, whatever the ratio; negative: none.
	MinSaving time.Duration
	// MaxConfirm bounds the valid plans measured at the end, cheapest
	// first.
	MaxConfirm int
	// CostSlack admits to the measurement valid plans whose planner cost
	// is up to this fraction above the original's (default 0.25; negative:
	// only cheaper plans): the estimate misjudges some rewrites (EXISTS
	// against DISTINCT over a join), measurement decides.
	CostSlack float64
	// Timeout is the statement_timeout of every run.
	Timeout time.Duration
	// CompareRows is how many leading rows are compared in order when the
	// original has a top-level ORDER BY.
	CompareRows int
	NumCtx      int
	// MinCost skips the optimization (no model call) when the original's
	// planner cost is below it: cheap queries are not worth the calls.
	MinCost float64
	// Policies offered to the model; default prompts.DefaultPolicies().
	Policies []prompts.Policy
}

// Request is one optimization.
type Request struct {
	Exec      sealed.Executor
	Statement sealed.Statement // the user's SQL, sealed
	Question  string           // what the query answers, when known
	Guard     guard.Options
	// Model, when set, is used instead of the Optimizer's LLM.
	Model Model
}

// Verdict is what the supervisor made of one proposal.
type Verdict string

// Verdicts. The first two are valid plans; the others are the error
// monitor's rejections and the final measurement's.
const (
	VerdictImproved  Verdict = "improved"       // valid, cheaper than the latest valid plan
	VerdictNoGain    Verdict = "no-improvement" // valid, not cheaper
	VerdictNoSQL     Verdict = "no-sql"         // no SQL in the answer
	VerdictSyntax    Verdict = "syntax"         // does not parse
	VerdictGuard     Verdict = "guard"          // not a read-only SELECT the guard accepts
	VerdictTables    Verdict = "tables"         // reads a relation the original does not
	VerdictPlan      Verdict = "plan-error"     // the server cannot plan it
	VerdictRunError  Verdict = "run-error"      // it failed or timed out when run
	VerdictShape     Verdict = "shape"          // other columns, names or types
	VerdictResult    Verdict = "result"         // other rows (multiset)
	VerdictOrder     Verdict = "order"          // same rows, other order under ORDER BY
	VerdictUnstable  Verdict = "unstable"       // its result changed between runs
	VerdictDuplicate Verdict = "duplicate"      // same statement as an earlier one
	VerdictSlower    Verdict = "not-faster"     // valid, not faster when measured
	VerdictChosen    Verdict = "chosen"         // the returned rewrite
)

// Valid reports whether the proposal passed the error monitor.
func (v Verdict) Valid() bool {
	return v == VerdictImproved || v == VerdictNoGain || v == VerdictSlower || v == VerdictChosen
}

// Step is one proposal and what became of it.
type Step struct {
	Run, N      int // run (1-based) and step within it (1-based)
	Policy      string
	Instruction string
	SQL         string // as the model wrote it ("" when none)
	Verdict     Verdict
	Reason      string
	Cost        float64       // planner cost; 0 when it was not planned
	Time        time.Duration // median measured time; 0 when not measured
	stmt        sealed.Statement
}

// Outcome is the result of an optimization.
type Outcome struct {
	Original sealed.Statement
	// Result is what to run: the chosen rewrite, or Original.
	Result   sealed.Statement
	Improved bool
	// Reason says why Result is what it is, for people.
	Reason                     string
	OriginalCost, ResultCost   float64
	OriginalTime, ResultTime   time.Duration // medians; 0 when not measured
	Steps                      []Step
	LLMCalls                   int
	PromptTokens, OutputTokens int
}

// Speedup is OriginalTime / ResultTime (1 when not measured).
func (o Outcome) Speedup() float64 {
	if o.OriginalTime <= 0 || o.ResultTime <= 0 {
		return 1
	}
	return float64(o.OriginalTime) / float64(o.ResultTime)
}

// Summary is a one-line account of the outcome, for a NOTICE or a trace.
func (o Outcome) Summary() string {
	var b strings.Builder
	if o.Improved {
		fmt.Fprintf(&b, "%.1fx faster (planner cost %.2f -> %.2f, %s -> %s)", o.Speedup(),
			o.OriginalCost, o.ResultCost, msText(o.OriginalTime), msText(o.ResultTime))
	} else {
		b.WriteString(o.Reason)
	}
	fmt.Fprintf(&b, "; %d proposals, %d LLM calls", len(o.Steps), o.LLMCalls)
	if rej := o.Rejected(); len(rej) > 0 {
		var parts []string
		n := 0
		for v, c := range rej {
			parts = append(parts, fmt.Sprintf("%s %d", v, c))
			n += c
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "; %d rejected (%s)", n, strings.Join(parts, ", "))
	}
	return b.String()
}

func msText(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// Rejected counts the proposals the error monitor rejected, by verdict.
func (o Outcome) Rejected() map[Verdict]int {
	out := map[Verdict]int{}
	for _, s := range o.Steps {
		if !s.Verdict.Valid() && s.Verdict != VerdictDuplicate {
			out[s.Verdict]++
		}
	}
	return out
}

// Optimize optimizes stmt with the Optimizer's guard options: the method
// the engine's optimizer slot wraps.
func (o *Optimizer) Optimize(ctx context.Context, exec sealed.Executor, stmt sealed.Statement, question string) (Outcome, error) {
	return o.Run(ctx, Request{Exec: exec, Statement: stmt, Question: question, Guard: o.Guard})
}

// ErrNotSelect: only a sealed SELECT can be optimized.
var ErrNotSelect = errors.New("optimize: only a sealed SELECT can be optimized")

// Run optimizes one statement. An error means the original itself could
// not be planned or run (a *pg.Error from the server, the guard's
// *guard.RejectError, a context error); every other way it ends is an
// Outcome, whose Result is the original unless a rewrite was confirmed.
func (o *Optimizer) Run(ctx context.Context, req Request) (Outcome, error) {
	if req.Statement.IsZero() || guard.CheckedOf(req.Statement).Kind != guard.KindSelect || req.Exec == nil {
		return Outcome{}, ErrNotSelect
	}
	s := &search{o: o, req: req, out: Outcome{Original: req.Statement, Result: req.Statement}, seen: map[string]int{}}
	if err := s.prepare(ctx); err != nil {
		var keep *keepOriginal
		if errors.As(err, &keep) {
			s.out.Reason = keep.reason
			return s.out, nil
		}
		return Outcome{}, err
	}
	for run := 1; run <= o.runs() && s.stopped == ""; run++ {
		if err := s.descend(ctx, run); err != nil {
			return Outcome{}, err
		}
	}
	if err := s.confirm(ctx); err != nil {
		return Outcome{}, err
	}
	if s.stopped != "" {
		s.out.Reason += " (the descent stopped early: " + s.stopped + ")"
	}
	return s.out, nil
}

// keepOriginal ends an optimization early with the original and a reason.
type keepOriginal struct{ reason string }

func (k *keepOriginal) Error() string { return k.reason }

func (o *Optimizer) tolerance() int   { return positive(o.Tolerance, DefaultTolerance) }
func (o *Optimizer) maxCalls() int    { return positive(o.MaxCalls, DefaultMaxCalls) }
func (o *Optimizer) runs() int        { return positive(o.Runs, 1) }
func (o *Optimizer) timingRuns() int  { return positive(o.TimingRuns, DefaultTimingRuns) }
func (o *Optimizer) maxConfirm() int  { return positive(o.MaxConfirm, DefaultMaxConfirm) }
func (o *Optimizer) compareRows() int { return positive(o.CompareRows, DefaultCompareRows) }
func (o *Optimizer) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}
func (o *Optimizer) costSlack() float64 {
	switch {
	case o.CostSlack < 0:
		return 0
	case o.CostSlack == 0:
		return DefaultCostSlack
	}
	return o.CostSlack
}
func (o *Optimizer) minGain() float64 {
	if o.MinGain > 0 && o.MinGain < 1 {
		return o.MinGain
	}
	return DefaultMinGain
}
func (o *Optimizer) minSaving() time.Duration {
	switch {
	case o.MinSaving < 0:
		return 0
	case o.MinSaving == 0:
		return DefaultMinSaving
	}
	return o.MinSaving
}

// faster: a rewrite measured at cand (median) against the original's orig
// counts as faster when both the medians and the median of the per-round
// ratios show at least minGain, and the medians differ by at least minSaving.
func faster(orig, cand time.Duration, pairedRatio, minGain float64, minSaving time.Duration) bool {
	return float64(cand) <= float64(orig)*(1-minGain) && pairedRatio <= 1-minGain && orig-cand >= minSaving
}

func (o *Optimizer) temperature() float64 {
	if o.Temperature != nil {
		return *o.Temperature
	}
	if o.runs() > 1 {
		return DefaultTemperature
	}
	return 0
}
func (o *Optimizer) policies() []prompts.Policy {
	if len(o.Policies) > 0 {
		return o.Policies
	}
	return prompts.DefaultPolicies()
}

func positive(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// search is the state of one optimization.
type search struct {
	o   *Optimizer
	req Request
	out Outcome

	ref    reference // the original's result, what every proposal must match
	schema string    // the tables' description for the prompt
	plan0  string
	tables map[string]bool
	// tableOIDs: what the original's tables resolve to (lazily; newTable).
	tableOIDs map[string]bool
	pool      []int          // indexes into out.Steps of valid plans cheaper than the original
	seen      map[string]int // sealed SQL → index of the step that proposed it
	fallback  string         // why the original is kept when nothing was confirmed
	stopped   string         // why the descent stopped early (model failure, budget)
}

// prepare measures the original: its cost, its result fingerprint (twice:
// a result that changes between runs cannot be compared), the ordered
// prefix under ORDER BY, and the tables' description.
func (s *search) prepare(ctx context.Context) error {
	st := s.req.Statement
	cost, plan, err := s.explain(ctx, st)
	if err != nil {
		return err
	}
	s.out.OriginalCost, s.out.ResultCost, s.plan0 = cost, cost, plan
	if cost < s.o.MinCost {
		return &keepOriginal{fmt.Sprintf("planner cost %.2f is below the optimizer's threshold %.2f", cost, s.o.MinCost)}
	}
	ref, err := s.reference(ctx, st)
	if err != nil {
		var se *pg.Error
		if errors.As(err, &se) && se.Code == pg.CodeQueryCanceled && ctx.Err() == nil {
			return &keepOriginal{fmt.Sprintf("the original did not finish within %v, so no rewrite could be shown equivalent", s.o.timeout())}
		}
		if errors.Is(err, pg.ErrResultTooLarge) {
			return &keepOriginal{"the original's leading rows exceed the byte limit, so their order cannot be compared"}
		}
		return err
	}
	again, err := s.fingerprint(ctx, st)
	if err != nil {
		return err
	}
	if again != ref.fp {
		return &keepOriginal{"the original's result changed between two runs (volatile functions, or LIMIT without a total order), so no rewrite can be shown equivalent"}
	}
	s.ref = ref
	s.tables = tableSet(st)
	s.schema = s.describe(ctx)
	s.fallback = fmt.Sprintf("no proposal was equivalent and cheaper by the planner (or within %.0f%% of the original's cost)", 100*s.o.costSlack())
	return nil
}

// descend is one run of Algorithm 1: propose, check, cost, feed back,
// until the tolerance of consecutive non-improving steps or the call
// budget is reached.
func (s *search) descend(ctx context.Context, run int) error {
	latest, latestCost := s.req.Statement.Display(), s.out.OriginalCost
	plan := s.plan0
	feedback := ""
	var history []prompts.OptimizeStep
	wrong := 0
	for n := 1; wrong < s.o.tolerance() && s.out.LLMCalls+2 <= s.o.maxCalls(); n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := prompts.OptimizeParams{
			Original: s.req.Statement.Display(), OriginalCost: s.out.OriginalCost,
			Current: latest, CurrentCost: latestCost, Plan: plan, Schema: s.schema,
			Question: s.req.Question, History: history, Feedback: feedback, Policies: s.o.policies(),
		}
		step := Step{Run: run, N: n}
		err := s.instruct(ctx, &p, &step)
		if err == nil {
			err = s.rewrite(ctx, p, &step)
		}
		if err != nil {
			// Before any proposal a failing model is the answer's error;
			// later the descent stops and what was found is confirmed.
			if ctx.Err() != nil || len(s.out.Steps) == 0 {
				return err
			}
			s.stopped = modelFailure(err)
			return nil
		}
		if step.Verdict == "" {
			if err := s.check(ctx, &step); err != nil {
				return err
			}
		}
		switch {
		case step.Verdict == VerdictDuplicate:
			wrong++
			feedback = "No improvement: this query was already proposed (" + step.Reason + "). Try a different change."
		case step.stmt.IsZero():
			wrong++
			feedback = "No valid rewrite: " + step.Reason + ". It was discarded; start again from the current query and avoid this mistake."
		case step.Cost >= latestCost:
			wrong++
			step.Verdict = VerdictNoGain
			step.Reason = fmt.Sprintf("planner cost %.2f, not below %.2f", step.Cost, latestCost)
			feedback = "No improvement: the rewrite is valid but its planner cost is " + fmtCost(step.Cost) + ", not below " + fmtCost(latestCost) + "."
		default:
			wrong = 0
			step.Verdict = VerdictImproved
			step.Reason = fmt.Sprintf("planner cost %.2f, down from %.2f", step.Cost, latestCost)
			feedback = "Improved: the rewrite is valid and its planner cost is " + fmtCost(step.Cost) + ", down from " + fmtCost(latestCost) + "."
		}
		if !step.stmt.IsZero() {
			// As in the paper, the latest valid plan is the next starting
			// point even when it did not improve; the best is kept apart.
			latest, latestCost = step.SQL, step.Cost
			if _, pl, err := s.explain(ctx, step.stmt); err == nil {
				plan = pl
			}
			history = append(history, prompts.OptimizeStep{Policy: step.Policy, SQL: step.SQL, Cost: step.Cost})
			if step.Cost < s.out.OriginalCost || s.o.CostSlack >= 0 && step.Cost <= s.out.OriginalCost*(1+s.o.costSlack()) {
				s.pool = append(s.pool, len(s.out.Steps))
			}
		}
		s.out.Steps = append(s.out.Steps, step)
	}
	return nil
}

// instruct is the instruction step: which policy, and what to change. An
// instruction that cannot be read does not end the step: the rewrite step
// is asked to apply whichever policy helps most.
func (s *search) instruct(ctx context.Context, p *prompts.OptimizeParams, step *Step) error {
	pr, err := prompts.OptimizeInstruction(*p)
	if err != nil {
		return err
	}
	var ir prompts.InstructionResult
	s.out.LLMCalls++
	if err := s.model().JSON(ctx, pr, s.o.temperature(), &ir); err != nil && !errors.Is(err, llm.ErrBadOutput) {
		return fmt.Errorf("optimize: instruction step: %w", err)
	}
	if strings.TrimSpace(ir.Instruction) == "" {
		ir = prompts.InstructionResult{Instruction: "Apply the policy that reduces the cost most."}
	}
	if !knownPolicy(s.o.policies(), ir.Policy) {
		ir.Policy = "any"
	}
	p.Policy, p.Instruction = ir.Policy, strings.TrimSpace(ir.Instruction)
	step.Policy, step.Instruction = p.Policy, p.Instruction
	return nil
}

// rewrite is the rewrite step; it sets the verdict only when the answer
// holds no SQL.
func (s *search) rewrite(ctx context.Context, p prompts.OptimizeParams, step *Step) error {
	pr, err := prompts.OptimizeRewrite(p)
	if err != nil {
		return err
	}
	s.out.LLMCalls++
	sql, err := s.model().SQL(ctx, pr, s.o.temperature())
	switch {
	case errors.Is(err, llm.ErrBadOutput) || errors.Is(err, llm.ErrUnanswerable):
		step.Verdict, step.Reason = VerdictNoSQL, "the answer holds no SQL query"
		return nil
	case err != nil:
		return fmt.Errorf("optimize: rewrite step: %w", err)
	}
	step.SQL = sql
	return nil
}

func (s *search) model() Model {
	if s.req.Model != nil {
		return s.req.Model
	}
	return clientModel{s}
}

// clientModel is the Optimizer's own LLM client as a Model: one call per
// step, tokens counted on the outcome.
type clientModel struct{ s *search }

func (m clientModel) chat(ctx context.Context, pr prompts.Prompt, temperature float64) (string, error) {
	if m.s.o.LLM == nil {
		return "", errors.New("optimize: no model configured")
	}
	resp, err := m.s.o.LLM.Chat(ctx, llm.ChatRequest{
		Role:        llm.RoleGenerator,
		System:      pr.System,
		Messages:    []llm.Message{{Role: llm.SpeakerUser, Content: pr.User}},
		Temperature: temperature,
		JSONSchema:  pr.JSONSchema,
		NumCtx:      m.s.o.NumCtx,
		Step:        "optimize",
	})
	m.s.out.PromptTokens += resp.PromptTokens
	m.s.out.OutputTokens += resp.CompletionTokens
	return resp.Content, err
}

func (m clientModel) SQL(ctx context.Context, pr prompts.Prompt, temperature float64) (string, error) {
	content, err := m.chat(ctx, pr, temperature)
	if err != nil {
		return "", err
	}
	return llm.ExtractSQL(content)
}

func (m clientModel) JSON(ctx context.Context, pr prompts.Prompt, temperature float64, out any) error {
	content, err := m.chat(ctx, pr, temperature)
	if err != nil {
		return err
	}
	return llm.ExtractJSON(content, out)
}

// confirm measures the cheapest valid plans against the original,
// interleaved, and returns the fastest one that beats it by MinGain.
func (s *search) confirm(ctx context.Context) error {
	// Cheapest first; plans the planner did not find cheaper (but within
	// CostSlack of the original) are measured too, since its estimate is a
	// guide, not the verdict — but only when room is left.
	cands := append([]int(nil), s.pool...)
	sort.SliceStable(cands, func(i, j int) bool { return s.out.Steps[cands[i]].Cost < s.out.Steps[cands[j]].Cost })
	if len(cands) > s.o.maxConfirm() {
		cands = cands[:s.o.maxConfirm()]
	}
	if len(cands) == 0 {
		// Nothing to compare; the original is still measured for the report.
		orig := make([]time.Duration, 0, s.o.timingRuns())
		for r := 0; r < s.o.timingRuns(); r++ {
			d, _, err := s.timed(ctx, s.req.Statement)
			if err != nil {
				return err
			}
			orig = append(orig, d)
		}
		s.out.OriginalTime, s.out.ResultTime = median(orig), median(orig)
		s.out.Reason = "kept the original: " + s.fallback
		return nil
	}
	orig := make([]time.Duration, 0, s.o.timingRuns())
	times := make([][]time.Duration, len(cands))
	ratios := make([][]float64, len(cands)) // per round: candidate / original
	failed := make([]string, len(cands))
	for r := 0; r < s.o.timingRuns(); r++ {
		d, fp, err := s.timed(ctx, s.req.Statement)
		if err != nil {
			return err
		}
		if fp != s.ref.fp {
			s.out.Reason = "kept the original: its result changed while it was measured, so no rewrite can be shown equivalent"
			return nil
		}
		orig = append(orig, d)
		for i, c := range cands {
			if failed[i] != "" {
				continue
			}
			d, fp, err := s.timed(ctx, s.out.Steps[c].stmt)
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				failed[i] = "failed when measured: " + errText(err)
			case fp != s.ref.fp:
				failed[i] = "its result changed between runs"
			default:
				times[i] = append(times[i], d)
				ratios[i] = append(ratios[i], float64(d)/float64(max(orig[len(orig)-1], 1)))
			}
		}
	}
	s.out.OriginalTime = median(orig)
	best := -1
	for i, c := range cands {
		st := &s.out.Steps[c]
		if failed[i] != "" {
			st.Verdict, st.Reason = VerdictUnstable, failed[i]
			continue
		}
		st.Time = median(times[i])
		// Faster by the medians and by the median of the paired ratios of
		// each round: load that drifts during the measurement hits both.
		if !faster(s.out.OriginalTime, st.Time, medianF(ratios[i]), s.o.minGain(), s.o.minSaving()) {
			st.Verdict = VerdictSlower
			st.Reason = fmt.Sprintf("planner cost %.2f (original %.2f), but measured %v vs the original's %v", st.Cost, s.out.OriginalCost, round(st.Time), round(s.out.OriginalTime))
			if st.Time < s.out.OriginalTime && s.out.OriginalTime-st.Time < s.o.minSaving() {
				st.Reason += fmt.Sprintf(": it saves less than %v a run, within measurement noise", s.o.minSaving())
			}
			continue
		}
		if best < 0 || st.Time < s.out.Steps[cands[best]].Time {
			best = i
		}
	}
	if best < 0 {
		s.out.ResultTime = s.out.OriginalTime
		s.out.Reason = "kept the original: no equivalent rewrite was measured faster (by at least " + fmt.Sprintf("%.0f%%", 100*s.o.minGain()) + ")"
		return nil
	}
	st := &s.out.Steps[cands[best]]
	st.Verdict = VerdictChosen
	s.out.Result, s.out.Improved = st.stmt, true
	s.out.ResultCost, s.out.ResultTime = st.Cost, st.Time
	s.out.Reason = fmt.Sprintf("%.1fx faster measured (medians of %d paired runs), planner cost %.2f -> %.2f, step %d.%d (%s)",
		s.out.Speedup(), s.o.timingRuns(), s.out.OriginalCost, st.Cost, st.Run, st.N, st.Policy)
	return nil
}

// modelFailure says why the model stopped, for people: the model
// client's errors can name the model server, which clients must not see.
func modelFailure(err error) string {
	var le *llm.Error
	switch {
	case errors.Is(err, llm.ErrTimeout):
		return "the model timed out"
	case errors.Is(err, llm.ErrUnreachable):
		return "the model server is unreachable"
	case errors.As(err, &le):
		return "the model server failed"
	}
	return err.Error() // the engine's budget: no address in it
}

func knownPolicy(ps []prompts.Policy, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return math.Inf(1)
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func fmtCost(c float64) string { return fmt.Sprintf("%.2f", c) }

func errText(err error) string {
	var se *pg.Error
	if errors.As(err, &se) {
		return se.Message + " (SQLSTATE " + se.Code + ")"
	}
	var re *guard.RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	return err.Error()
}
