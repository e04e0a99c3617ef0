package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// speeds keeps each model's measured speed (the servers' eval_count over
// eval_duration, and the same for reading the prompt), averaged over the
// latest calls, so a call's output cap fits the time the ask has left.
// Speeds are kept per model, not per role: the keyword call's speed is the
// generator's when one model plays both.
type speeds struct {
	mu     sync.Mutex
	models map[string]*speed
	roles  map[llm.Role]string // the model that answered a role last
}

type speed struct {
	gen, read float64   // tokens per second; 0 unknown
	at        time.Time // the latest observation
	// warm: a call of the model was measured since its speeds were last
	// unknown, so the server had it loaded.
	warm bool
}

// staleSpeed: a speed measured longer ago than this is not trusted to
// refuse a call. A loaded machine recovers; without it one slow spell
// would refuse every call after it, and no call would measure again.
const staleSpeed = time.Minute

// observe records one answer's speeds. The server's counts and durations
// come first. An answer the client ended (complete, repetition) or the
// ask's time cut has none; then the client's own clock stands in: the
// time to the first piece for reading the prompt (any wait included, so
// it errs slow), the pieces after it over the time they took for writing.
func (s *speeds) observe(role llm.Role, resp llm.ChatResponse) {
	if s == nil || resp.Model == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.models == nil {
		s.models, s.roles = map[string]*speed{}, map[llm.Role]string{}
	}
	m := s.models[resp.Model]
	if m == nil {
		m = &speed{}
		s.models[resp.Model] = m
	}
	if time.Since(m.at) > staleSpeed {
		// Start over rather than average with a stale spell; the server
		// may have unloaded the model meanwhile.
		m.gen, m.read, m.warm = 0, 0, false
	}
	before := *m
	switch {
	case resp.EvalDuration > 0 && resp.CompletionTokens > 0:
		m.gen = ewma(m.gen, float64(resp.CompletionTokens)/resp.EvalDuration.Seconds())
		if resp.PromptDuration > 0 && resp.PromptTokens > 0 {
			m.read = ewma(m.read, float64(resp.PromptTokens)/resp.PromptDuration.Seconds())
		}
	case resp.Attempts > 1:
		// The client's clock over several requests says nothing of one.
	case resp.FirstChunk > 0:
		// The time to the first piece also holds loading the model when
		// the server had not: seconds for a small model, tens for a 7B
		// one. Taken as reading, it would refuse the ask's next calls, so
		// a cold model's first such measure is left out.
		if resp.PromptTokens > 0 && m.warm {
			m.read = ewma(m.read, float64(resp.PromptTokens)/resp.FirstChunk.Seconds())
		}
		if resp.CompletionTokens > 1 && resp.Streaming > 0 {
			m.gen = ewma(m.gen, float64(resp.CompletionTokens-1)/resp.Streaming.Seconds())
		}
	}
	// A call cut before its first piece says nothing sure: the model may
	// have been loading (seconds, once), not reading.
	if resp.FirstChunk > 0 || resp.EvalDuration > 0 {
		m.warm = true
	}
	if *m != before {
		m.at = time.Now()
		s.roles[role] = resp.Model
	}
}

func ewma(old, x float64) float64 {
	if old == 0 {
		return x
	}
	return 0.7*old + 0.3*x
}

// of returns the speeds of model, or, when it is not known (no resolver),
// of the model that last answered role; stale ones are unknown.
func (s *speeds) of(model string, role llm.Role) speed {
	if s == nil {
		return speed{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if model == "" {
		model = s.roles[role]
	}
	if m := s.models[model]; m != nil && time.Since(m.at) <= staleSpeed {
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

// errTimeLeft: the ask's time for model calls cannot fit the next call, or
// ran out during one. It is an ErrBudget, so the stage settles with what it
// has, as at the profile's call cap.
var errTimeLeft = fmt.Errorf("%w: the ask's time for model calls", ErrBudget)

// fitCap bounds a call's output cap by what the time until deadline allows
// at the model's measured speed, after reading the prompt at its measured
// reading speed; it fails with errTimeLeft when not even minUsefulTokens
// fit, or the deadline has passed. Unknown speeds or no deadline leave the
// cap.
func fitCap(now, deadline time.Time, sp speed, promptTokens, maxTokens int) (int, error) {
	if deadline.IsZero() {
		return maxTokens, nil
	}
	left := deadline.Sub(now).Seconds()
	if left <= 0 {
		return 0, fmt.Errorf("%w: no time left", errTimeLeft)
	}
	reading := 0.0
	if sp.read > 0 {
		reading = float64(promptTokens) / sp.read
	}
	if reading >= left {
		return 0, fmt.Errorf("%w: %.1f s left, %.1f s to read the prompt (~%d tokens) at %.1f tokens/s", errTimeLeft, left, reading, promptTokens, sp.read)
	}
	if sp.gen <= 0 {
		return maxTokens, nil
	}
	// 0.8: room for the speed's own variation.
	fits := int((left - reading) * 0.8 * sp.gen)
	if fits < min(minUsefulTokens, maxTokens) {
		return 0, fmt.Errorf("%w: %.1f s left, %.1f s to read the prompt (~%d tokens) at %.1f tokens/s and too little to write at %.1f tokens/s",
			errTimeLeft, left, reading, promptTokens, sp.read, sp.gen)
	}
	return min(maxTokens, fits), nil
}

// The ask's time, shared out among its model calls (budgetClient.window).
const (
	// reserveShare of the ask's time is kept after the last model call for
	// settling: trial runs, choosing, returning what the ask has.
	reserveShare = 0.05
	minReserve   = 300 * time.Millisecond
	maxReserve   = 5 * time.Second
	// optionalShare of the ask's time is the most one call of an optional
	// stage (one with a fallback without the model: keywords, follow-up
	// rewrite, table selection, workload examples, literal choice) may
	// take, so a slow model leaves the generator its time.
	optionalShare = 0.25
)

// reserveFor is the settling time kept of an ask of timeout.
func reserveFor(timeout time.Duration) time.Duration {
	return min(max(time.Duration(float64(timeout)*reserveShare), minReserve), maxReserve)
}

// optionalStage: the stage's model calls have a fallback that needs no
// model (lexical keywords, the question as asked, the budgeted schema, no
// example, the literal as written).
func optionalStage(stage string) bool {
	switch stage {
	case "keywords", "followup", "schema-model", "workload examples", "literals":
		return true
	}
	return false
}
