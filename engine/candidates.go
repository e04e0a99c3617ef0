package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// serialExecutor lets the parallel stages of one ask share the asking
// session, which runs one statement at a time.
type serialExecutor struct {
	mu    sync.Mutex
	inner sealed.Executor
}

func (s *serialExecutor) Trial(ctx context.Context, stmt sealed.Statement, lim pg.Limits) (*pg.Rows, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.inner.Trial(ctx, stmt, lim)
}

// runner is the Runner generators use: guard, then a trial run.
type runner struct {
	e *Engine
	a *ask
}

func (r runner) Run(ctx context.Context, sql string) (*pg.Rows, error) {
	stmt, err := guard.Seal(sql, r.e.guardOptions(r.a))
	if err != nil {
		return nil, err
	}
	return r.a.exec.Trial(ctx, stmt, pg.Limits{Timeout: r.e.TrialTimeout, MaxRows: r.e.TrialRows, MaxBytes: r.e.TrialMaxBytes})
}

// candidates runs the profile's generators (at most Parallel at once), fixes
// each candidate, clusters them by result, selects and scores the answer.
func (e *Engine) candidates(ctx context.Context, a *ask) (*Result, error) {
	gens := a.profile.Generators
	cands := make([]*Candidate, 0, len(gens))
	var mu sync.Mutex
	var fatal error
	sem := make(chan struct{}, e.Parallel)
	var wg sync.WaitGroup
	slots := make([][]*Candidate, len(gens))
	for i, g := range gens {
		wg.Add(1)
		go func(i int, g Generator) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a.progress("generating candidate %d/%d", i+1, len(gens))
			out, err := e.runGenerator(ctx, a, g)
			if err != nil {
				mu.Lock()
				if fatal == nil {
					fatal = err
				}
				mu.Unlock()
			}
			slots[i] = out
		}(i, g)
	}
	wg.Wait()
	for _, s := range slots {
		cands = append(cands, s...)
	}
	a.cands = cands
	if len(cands) == 0 || !anyUsable(cands) && !anyUnanswerable(cands) {
		if fatal != nil {
			return nil, fatal
		}
		return nil, noUsableSQL(a.profile.FixRounds, cands, a.req.ShowAttempt)
	}
	return e.choose(ctx, a, cands)
}

// runGenerator makes one generator's candidates and settles each. Errors
// that end only this generator (bad output, budget) are recorded on it; the
// returned error is for failures of the ask itself (model server, session).
func (e *Engine) runGenerator(ctx context.Context, a *ask, g Generator) ([]*Candidate, error) {
	st := a.trace.begin("generate")
	m := e.model(a, st, llm.RoleGenerator)
	if ad, ok := g.(adaptiveGenerator); ok {
		g = ad.pick(ctx, m) // the candidate is named after the one that ran
	}
	st.Note = g.Name()
	sqls, err := g.Generate(ctx, &a.in, m, runner{e, a})
	a.trace.end(st)
	var reason string
	switch {
	case errors.Is(err, llm.ErrUnanswerable):
		var le *llm.Error
		if errors.As(err, &le) && le.Err != nil {
			reason = le.Err.Error()
		}
		return []*Candidate{{Generator: g.Name(), Unanswerable: true, Problem: reason, Cluster: -1}}, nil
	case errors.Is(err, llm.ErrBadOutput), errors.Is(err, ErrBudget):
		return []*Candidate{{Generator: g.Name(), Problem: err.Error(), Cluster: -1}}, nil
	case err != nil:
		return nil, err
	}
	var out []*Candidate
	for _, sql := range sqls {
		c := &Candidate{SQL: sql, Generator: g.Name(), Cluster: -1}
		if err := e.settle(ctx, a, c, a.profile.Fixer, a.profile.FixRounds); err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// choose picks the answer among settled candidates and judges confidence.
func (e *Engine) choose(ctx context.Context, a *ask, cands []*Candidate) (*Result, error) {
	st := a.trace.begin("select")
	defer a.trace.end(st)
	usable, unanswerable := 0, 0
	for _, c := range cands {
		switch {
		case c.Usable:
			usable++
		case c.Unanswerable:
			unanswerable++
		}
	}
	// "The data cannot answer" is one reading among the answer clusters; it
	// wins when no answer has more support, so a tie does not invent one.
	clusters := clusterCandidates(cands)
	if unanswerable > 0 && (len(clusters) == 0 || unanswerable >= len(clusters[0].Candidates)) {
		st.Note = fmt.Sprintf("%d of %d candidates: unanswerable", unanswerable, len(cands))
		return nil, abstainUnanswerable(cands)
	}
	winner := 0
	var choice *Choice
	if len(clusters) > 1 && a.profile.Selector != nil {
		a.progress("choosing among %d readings", len(clusters))
		sst := a.trace.begin("selector")
		ch, err := a.profile.Selector.Select(ctx, &a.in, e.model(a, sst, llm.RoleGenerator), clusters)
		sst.Note = a.profile.Selector.Name() + ": " + ch.Note
		a.trace.end(sst)
		switch {
		case err == nil:
			choice = &ch
			winner = ch.Cluster
		case errors.Is(err, llm.ErrBadOutput) || errors.Is(err, ErrBudget):
			// The largest cluster stands.
		default:
			return nil, err
		}
	}
	conf := confidence(cands, clusters, winner, choice)
	res := &Result{Candidates: cands, Confidence: conf}
	chosen := clusters[winner].Candidates[0]
	for i, c := range cands {
		if c == chosen {
			res.Chosen = i
		}
	}
	res.Statement = chosen.Statement
	for i, cl := range clusters {
		if i != winner {
			res.Alternatives = append(res.Alternatives, cl.Candidates[0])
		}
	}
	st.Note = fmt.Sprintf("%d candidates, %d usable, %d clusters %s; chose %s (confidence %s)",
		len(cands), usable, len(clusters), clusterSizes(clusters), chosen.Generator, FormatConfidence(conf))
	if conf >= 0 && conf < a.profile.AbstainBelow {
		return nil, abstainDisagreement(conf, chosen, res.Alternatives, a.req.ShowAttempt)
	}
	if conf < 0 || conf >= a.profile.AlternativesBelow {
		res.Alternatives = nil
	}
	return res, nil
}

// optimize runs the profile's optimizer on the chosen statement; a failure
// keeps the statement as chosen.
func (e *Engine) optimize(ctx context.Context, a *ask, res *Result) {
	a.progress("optimizing the chosen query")
	st := a.trace.begin("optimize")
	defer a.trace.end(st)
	if !a.view.data.Values() && len(res.Rewrites()) > 0 {
		// Its SQL and plans would carry the stored values literal
		// correction chose.
		st.Note = "kept the chosen SQL: it holds corrected literals and the model may not see stored values"
		return
	}
	stmt, note, err := a.profile.Optimizer.Optimize(ctx, &a.in, e.model(a, st, llm.RoleGenerator), a.exec, res.Statement)
	if err != nil || stmt.IsZero() {
		st.Note = "kept the chosen SQL"
		if err != nil {
			st.Note += ": " + err.Error()
		}
		return
	}
	res.Statement = stmt
	res.Optimized = note
	st.Note = note
}

// FormatConfidence shows a confidence as two decimals, "n/a" when unknown.
func FormatConfidence(c float64) string {
	if c < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", c)
}

func clusterSizes(cs []Cluster) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprint(len(c.Candidates))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func anyUsable(cs []*Candidate) bool {
	for _, c := range cs {
		if c.Usable {
			return true
		}
	}
	return false
}

func anyUnanswerable(cs []*Candidate) bool {
	for _, c := range cs {
		if c.Unanswerable {
			return true
		}
	}
	return false
}

// noUsableSQL is the error when every candidate failed.
func noUsableSQL(rounds int, cands []*Candidate, showAttempt string) error {
	last := "was not produced"
	guardOnly, deniedOnly, tooMuch := len(cands) > 0, len(cands) > 0, len(cands) > 0
	for _, c := range cands {
		if c.Code != pg.CodeProgramLimitExceeded {
			tooMuch = false
		}
		if c.Problem != "" {
			last = c.Problem
		}
		if !strings.HasPrefix(c.Problem, "rejected by the guard") {
			guardOnly = false
		}
		if c.Code != pg.CodeInsufficientPrivilege {
			deniedOnly = false
		}
	}
	code, hint := pg.CodeNoUsableSQL, "Rephrase the question, or name the tables or columns you mean."
	if showAttempt != "" {
		hint = "Rephrase the question, name the tables or columns you mean, or use " + showAttempt + " to see the attempt."
	}
	switch {
	case tooMuch:
		code = pg.CodeProgramLimitExceeded
		hint = "Every attempt asked more of the server than nlproxy allows (nesting, subqueries, CTEs or sizes). Ask for less at once, or narrow the question."
	case guardOnly:
		code = pg.CodeInsufficientPrivilege
		hint = "nlproxy only runs read-only SELECT statements it can verify. " + hint
	case deniedOnly:
		// Every attempt read something the asking role may not: that, not
		// the wording, is what stands in the way.
		code = pg.CodeInsufficientPrivilege
		hint = "The question needs data your role may not read; ask its owner for SELECT, or ask about tables you can read."
	}
	msg := fmt.Sprintf("nlproxy: no usable SQL after %d fixes; the last attempt %s", rounds, last)
	if len(cands) > 1 {
		msg = fmt.Sprintf("nlproxy: no usable SQL from %d candidates (up to %d fixes each); the last attempt %s", len(cands), rounds, last)
	}
	return &pg.Error{Code: code, Message: msg, Hint: hint, Err: ErrNoUsableSQL}
}

func abstainUnanswerable(cands []*Candidate) error {
	var reasons []string
	seen := map[string]bool{}
	for _, c := range cands {
		if c.Unanswerable && c.Problem != "" && !seen[c.Problem] {
			seen[c.Problem] = true
			reasons = append(reasons, c.Problem)
		}
	}
	msg := "nlproxy: the data does not seem to answer this question"
	detail := ""
	if len(reasons) > 0 {
		detail = "Missing: " + strings.Join(reasons, "; ")
	}
	return &pg.Error{Code: pg.CodeAbstained, Message: msg, Detail: detail,
		Hint: "Ask about what the tables hold (SELECT * FROM information_schema.tables shows them), or name the table or column you mean."}
}

func abstainDisagreement(conf float64, chosen *Candidate, alts []*Candidate, showAttempt string) error {
	var b strings.Builder
	b.WriteString("Readings considered:")
	for i, c := range append([]*Candidate{chosen}, alts...) {
		fmt.Fprintf(&b, "\n%d. %s", i+1, oneLine(c.SQL))
	}
	return &pg.Error{Code: pg.CodeAbstained, Message: fmt.Sprintf("nlproxy: the question has several readings and none is clearly right (confidence %.2f)", conf),
		Detail: b.String(),
		Hint:   "Say which reading you mean: name the columns to return, the filters and the time range" + runReading(showAttempt)}
}

// runReading ends the disagreement hint with how this client runs one
// reading, where it has a way.
func runReading(showAttempt string) string {
	if showAttempt == "" {
		return "."
	}
	return "; or run one of the readings with " + showAttempt + "."
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
