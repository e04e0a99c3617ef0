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
type budgetClient struct {
	llm.Client
	b *budget
}

func (c budgetClient) Chat(ctx context.Context, req llm.ChatRequest) (llm.ChatResponse, error) {
	if err := c.b.take(); err != nil {
		return llm.ChatResponse{}, err
	}
	resp, err := c.Client.Chat(ctx, req)
	c.b.spend(resp.PromptTokens + resp.CompletionTokens)
	return resp, err
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
	sql, resp, err := llm.ChatSQL(ctx, m.a.client, m.e.chat(m.role, m.st.Name, p, temperature))
	m.record(resp, err)
	return sql, err
}

func (m stageModel) JSON(ctx context.Context, p prompts.Prompt, temperature float64, out any) error {
	resp, err := llm.ChatJSON(ctx, m.a.client, m.e.chat(m.role, m.st.Name, p, temperature), out)
	m.record(resp, err)
	return err
}
