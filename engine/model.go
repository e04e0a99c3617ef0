package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
}

func (b *budget) end(resp llm.ChatResponse, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
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
// It also fits each call's output cap to the time the ask has left at the
// model's measured speed, and does not start a call that cannot finish.
type budgetClient struct {
	llm.Client
	b      *budget
	speeds *speeds
}

func (c budgetClient) Chat(ctx context.Context, req llm.ChatRequest) (llm.ChatResponse, error) {
	role := req.Role
	if role == "" {
		role = llm.RoleGenerator
	}
	if req.MaxTokens > 0 {
		n, err := fitCap(ctx, c.speeds.of(role), promptTokens(req), req.MaxTokens)
		if err != nil {
			return llm.ChatResponse{}, err
		}
		req.MaxTokens = n
	}
	if err := c.b.take(); err != nil {
		return llm.ChatResponse{}, err
	}
	resp, err := c.Client.Chat(ctx, req)
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
	if sp := m.e.speeds.of(m.role); sp.gen > 0 && sp.gen < slowTokensPerSecond {
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
