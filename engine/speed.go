package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// speeds keeps each model's measured speed (the servers' eval_count over
// eval_duration, and the same for reading the prompt), averaged over the
// latest calls, so a call's output cap fits the time the ask has left.
type speeds struct {
	mu     sync.Mutex
	models map[string]*speed
	roles  map[llm.Role]string // the model that answered a role last
}

type speed struct {
	gen, read float64 // tokens per second; 0 unknown
}

// observe records one answer's speeds.
func (s *speeds) observe(role llm.Role, resp llm.ChatResponse) {
	if s == nil || resp.Model == "" || resp.EvalDuration <= 0 || resp.CompletionTokens <= 0 {
		return
	}
	gen := float64(resp.CompletionTokens) / resp.EvalDuration.Seconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.models == nil {
		s.models, s.roles = map[string]*speed{}, map[llm.Role]string{}
	}
	s.roles[role] = resp.Model
	m := s.models[resp.Model]
	if m == nil {
		m = &speed{}
		s.models[resp.Model] = m
	}
	m.gen = ewma(m.gen, gen)
	if resp.PromptDuration > 0 && resp.PromptTokens > 0 {
		m.read = ewma(m.read, float64(resp.PromptTokens)/resp.PromptDuration.Seconds())
	}
}

func ewma(old, x float64) float64 {
	if old == 0 {
		return x
	}
	return 0.7*old + 0.3*x
}

// of returns the speeds of the model that last answered role.
func (s *speeds) of(role llm.Role) speed {
	if s == nil {
		return speed{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.models[s.roles[role]]; m != nil {
		return *m
	}
	return speed{}
}

// Generation speed below which a model counts as slow (tokens per second):
// a chain of thought of a few hundred tokens then takes most of a minute.
const slowTokensPerSecond = 15

// minUsefulTokens: a call that could write fewer than this many tokens
// before the ask's deadline is not started.
const minUsefulTokens = 24

// fitCap bounds a call's output cap by what the time left allows at the
// model's measured speed; it fails with ErrBudget when not even
// minUsefulTokens fit. Unknown speeds or no deadline leave the cap.
func fitCap(ctx context.Context, sp speed, promptTokens, maxTokens int) (int, error) {
	deadline, ok := ctx.Deadline()
	if !ok || sp.gen <= 0 {
		return maxTokens, nil
	}
	left := time.Until(deadline).Seconds()
	if sp.read > 0 {
		left -= float64(promptTokens) / sp.read
	}
	// 0.8: room for the trial runs and the speed's own variation.
	fits := int(left * 0.8 * sp.gen)
	if fits < min(minUsefulTokens, maxTokens) {
		return 0, fmt.Errorf("%w: %.0f s left is too little for the model's answer at %.1f tokens/s", ErrBudget, max(left, 0), sp.gen)
	}
	return min(maxTokens, fits), nil
}
