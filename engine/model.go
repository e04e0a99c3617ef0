package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/prompts"
)

// ErrBudget: the profile's cap on model calls or tokens is reached; the
// stage that met it stops and the ask settles with what it has.
var ErrBudget = errors.New("engine: the profile's model budget is spent")

// budget counts one ask's model calls and tokens against its profile.
type budget struct {
	maxCalls, maxTokens int

	mu     sync.Mutex
	calls  int
	tokens int
	ends   Ends
}

// Ends counts how one ask's model answers ended.
type Ends struct {
	Finished   int // the model stopped by itself
	Complete   int // the client stopped reading: the answer was complete
	Repetition int // the client stopped reading: the model repeated itself
	Capped     int // the output cap cut it (done_reason length)
	Failed     int // timed out, aborted, or the server failed
	// Skipped: not started, the time left could not fit it; TimeCut: cut
	// where the ask's time for model calls ended. Either way the stage
	// settled with what it had.
	Skipped int
	TimeCut int
}

func (b *budget) end(resp llm.ChatResponse, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case errors.Is(err, errTimeLeft):
		b.ends.TimeCut++
	case err != nil:
		b.ends.Failed++
	case resp.DoneReason == llm.DoneComplete:
		b.ends.Complete++
	case resp.DoneReason == llm.DoneRepetition:
		b.ends.Repetition++
	case resp.DoneReason == llm.DoneLength:
		b.ends.Capped++
	default:
		b.ends.Finished++
	}
}

// first: no call of this ask has been made yet.
func (b *budget) first() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls == 0
}

func (b *budget) skip() {
	b.mu.Lock()
	b.ends.Skipped++
	b.mu.Unlock()
}

// outOfTime: the ask's time stopped one of its model calls (not started,
// or cut).
func (b *budget) outOfTime() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ends.Skipped+b.ends.TimeCut > 0
}

// take reserves one call, or fails with ErrBudget.
func (b *budget) take() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxCalls > 0 && b.calls >= b.maxCalls {
		return fmt.Errorf("%w: %d model calls", ErrBudget, b.maxCalls)
	}
	if b.maxTokens > 0 && b.tokens >= b.maxTokens {
		return fmt.Errorf("%w: %d tokens", ErrBudget, b.maxTokens)
	}
	b.calls++
	return nil
}

func (b *budget) spend(tokens int) {
	b.mu.Lock()
	b.tokens += tokens
	b.mu.Unlock()
}

// budgetClient is the model client every stage of one ask uses: each request
// (a corrective re-ask included) takes one call from the budget first, so
// the profile's caps are hard.
//
// It also shares out the ask's time: every call runs in a window that ends
// reserve before the ask's deadline (an optional stage's call, one with a
// fallback, at most optional after it starts), its output cap fits that
// window at the model's measured speeds, reading the prompt included, and
// a call that cannot write minUsefulTokens in it is not started. A call
// cut at the window's end, or not started, fails with errTimeLeft: the
// stage settles with what it has, and the ask ends before its deadline
// with its best candidate, or a clean error, instead of being cut there.
type budgetClient struct {
	llm.Client
	b        *budget
	speeds   *speeds
	reserve  time.Duration
	optional time.Duration
}

// TimeShared is client with the time of whatever it is called under shared
// out as one ask's steps share theirs (see budgetClient), for model calls
// made outside an engine ask (ask(all)'s context switch, plan, return type
// and answer): each call ends a reserve before its context's deadline, its
// output cap fits the time left at the model's measured speeds, and one
// that cannot write anything useful is not started. timeout is the whole
// time the calls share, which sizes the reserve and an optional step's
// share; there is no call cap. Use one per question.
func (e *Engine) TimeShared(client llm.Client, timeout time.Duration) llm.Client {
	return budgetClient{Client: client, b: &budget{}, speeds: &e.speeds,
		reserve: reserveFor(timeout), optional: time.Duration(float64(timeout) * optionalShare)}
}

// modelNamer is a client that says which model plays a role (llm's clients
// and pool).
type modelNamer interface {
	ModelFor(llm.Role) string
}

// modelOf is the model client will answer req with, "" when it cannot say.
func modelOf(client llm.Client, req llm.ChatRequest) string {
	if req.Model != "" {
		return req.Model
	}
	mn, ok := client.(modelNamer)
	if !ok {
		return ""
	}
	if m := mn.ModelFor(req.Role); m != "" {
		return m
	}
	return mn.ModelFor(llm.RoleGenerator) // the pool's fallback, too
}

// window is when the call must end (zero: no deadline).
func (c budgetClient) window(ctx context.Context, step string, now time.Time) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	end := deadline.Add(-c.reserve)
	if c.optional > 0 && optionalStage(step) {
		end = minTime(end, now.Add(c.optional))
	}
	return end
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (c budgetClient) Chat(ctx context.Context, req llm.ChatRequest) (llm.ChatResponse, error) {
	role := req.Role
	if role == "" {
		role = llm.RoleGenerator
	}
	t := time.Now()
	end := c.window(ctx, req.Step, t)
	if req.MaxTokens > 0 || !end.IsZero() {
		sp := c.speeds.of(modelOf(c.Client, req), role)
		if c.b.first() && !optionalStage(req.Step) {
			// An ask's first essential call runs on its window alone:
			// speeds measured in an earlier ask (a loaded spell since
			// gone) do not refuse it, and it measures them again for the
			// calls after. An optional call (keywords) has a fallback, so
			// recent speeds may refuse it: a slow model then spends the
			// ask's time on the generator.
			sp = speed{}
		}
		n, err := fitCap(t, end, sp, promptTokens(req), max(req.MaxTokens, 0))
		if err != nil {
			c.b.skip()
			return llm.ChatResponse{}, fmt.Errorf("step %s not started: %w", req.Step, err)
		}
		if req.MaxTokens > 0 {
			req.MaxTokens = n
		}
	}
	if err := c.b.take(); err != nil {
		return llm.ChatResponse{}, err
	}
	callCtx := ctx
	if !end.IsZero() {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	resp, err := c.Client.Chat(callCtx, req)
	if err != nil && ctx.Err() == nil && callCtx.Err() != nil {
		// The window ended, the ask has its reserve left: settle.
		err = fmt.Errorf("step %s cut after %s: %w (%w)", req.Step, resp.Duration.Round(time.Millisecond), errTimeLeft, err)
	}
	c.b.spend(resp.PromptTokens + resp.CompletionTokens)
	c.b.end(resp, err)
	c.speeds.observe(role, resp)
	return resp, err
}

func promptTokens(req llm.ChatRequest) int {
	n := prompts.EstimateTokens(req.System)
	for _, m := range req.Messages {
		n += prompts.EstimateTokens(m.Content)
	}
	return n
}

// Model is how a stage talks to the model. Every call is recorded on the
// stage's trace (calls, tokens) and counted against the ask's budget.
type Model interface {
	// SQL asks for one SQL statement (extracted from a ```sql block). The
	// model may answer that the data cannot answer the question
	// (llm.ErrUnanswerable).
	SQL(ctx context.Context, p prompts.Prompt, temperature float64) (string, error)
	// JSON asks for a JSON answer decoded into out.
	JSON(ctx context.Context, p prompts.Prompt, temperature float64, out any) error
}

// stageModel records calls on one stage. One helper for every stage: this is
// the only place a stage's calls and tokens are counted.
type stageModel struct {
	e    *Engine
	a    *ask
	st   *stageTimer
	role llm.Role
}

// model returns the Model for a stage, speaking to the model of role.
func (e *Engine) model(a *ask, st *stageTimer, role llm.Role) Model {
	return stageModel{e: e, a: a, st: st, role: role}
}

func (m stageModel) record(resp llm.ChatResponse, err error) {
	calls := resp.Attempts
	if calls == 0 && !errors.Is(err, ErrBudget) {
		calls = 1
	}
	m.st.add(calls, resp.PromptTokens, resp.CompletionTokens)
}

func (m stageModel) SQL(ctx context.Context, p prompts.Prompt, temperature float64) (string, error) {
	req := m.e.chat(m.role, m.st.Name, p, temperature)
	req.Complete = sqlComplete
	sql, resp, err := llm.ChatSQL(ctx, m.a.client, req)
	m.record(resp, err)
	return sql, err
}

func (m stageModel) JSON(ctx context.Context, p prompts.Prompt, temperature float64, out any) error {
	req := m.e.chat(m.role, m.st.Name, p, temperature)
	req.Complete = jsonComplete
	resp, err := llm.ChatJSON(ctx, m.a.client, req, out)
	m.record(resp, err)
	return err
}

// modelDescriber is a Model that can say whether its model is small or
// slow (the adaptive generator's choice).
type modelDescriber interface {
	smallOrSlow(ctx context.Context) bool
}

// modelInfoer is a client that knows its models (llm.Pool).
type modelInfoer interface {
	ModelFor(llm.Role) string
	Info(ctx context.Context, model string) llm.ModelInfo
}

// smallOrSlow: the stage's model has fewer than smallModelParams
// parameters, as its server says, or writes fewer than
// slowTokensPerSecond tokens a second, as measured.
func (m stageModel) smallOrSlow(ctx context.Context) bool {
	if sp := m.e.speeds.of(modelOf(m.e.LLM, llm.ChatRequest{Role: m.role}), m.role); sp.gen > 0 && sp.gen < slowTokensPerSecond {
		return true
	}
	mi, ok := m.e.LLM.(modelInfoer)
	if !ok {
		return false
	}
	name := mi.ModelFor(m.role)
	if name == "" {
		return false
	}
	p := mi.Info(ctx, name).Params()
	return p > 0 && p < smallModelParams
}
