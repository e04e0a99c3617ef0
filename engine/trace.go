package engine

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/nlproxy/nlproxy/internal/redact"
)

// Trace records what each stage of one translation did and cost.
type Trace struct {
	mu       sync.Mutex
	Stages   []StageTrace
	CacheHit bool
	Total    time.Duration
	// Ends counts how the ask's model answers ended.
	Ends Ends
}

// StageTrace is one stage's record.
type StageTrace struct {
	Name             string
	Duration         time.Duration
	LLMCalls         int
	PromptTokens     int
	CompletionTokens int
	Note             string // what it chose and why, briefly
}

// stageTimer is a stage being recorded.
type stageTimer struct {
	StageTrace
	start time.Time
	mu    sync.Mutex // add may be called from a stage's parallel calls
}

// add records model calls and tokens on the stage.
func (s *stageTimer) add(calls, prompt, completion int) {
	s.mu.Lock()
	s.LLMCalls += calls
	s.PromptTokens += prompt
	s.CompletionTokens += completion
	s.mu.Unlock()
}

func (t *Trace) begin(name string) *stageTimer {
	return &stageTimer{StageTrace: StageTrace{Name: name}, start: time.Now()}
}

func (t *Trace) end(s *stageTimer) {
	s.mu.Lock()
	s.Duration = time.Since(s.start)
	rec := s.StageTrace
	s.mu.Unlock()
	t.mu.Lock()
	t.Stages = append(t.Stages, rec)
	t.mu.Unlock()
}

// Snapshot returns a copy of the stages recorded so far.
func (t *Trace) Snapshot() []StageTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]StageTrace(nil), t.Stages...)
}

// LLMCalls, PromptTokens and CompletionTokens sum over the stages.
func (t *Trace) LLMCalls() (calls, prompt, completion int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.Stages {
		calls += s.LLMCalls
		prompt += s.PromptTokens
		completion += s.CompletionTokens
	}
	return calls, prompt, completion
}

// MarshalLogObject lets the trace be logged as one structured field.
func (t *Trace) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	return logTrace{t, redact.Policy{}}.MarshalLogObject(enc)
}

// logTrace is a trace as the engine's log shows it: notes (which can hold
// keywords and literals of the question) redacted and bounded by p.
type logTrace struct {
	t *Trace
	p redact.Policy
}

func (lt logTrace) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	t := lt.t
	calls, prompt, completion := t.LLMCalls()
	enc.AddBool("cache_hit", t.CacheHit)
	enc.AddDuration("total", t.Total)
	enc.AddInt("llm_calls", calls)
	enc.AddInt("prompt_tokens", prompt)
	enc.AddInt("completion_tokens", completion)
	if e := t.Ends; e != (Ends{}) {
		enc.AddString("answers_ended", fmt.Sprintf("finished=%d complete=%d repetition=%d capped=%d failed=%d skipped=%d timecut=%d",
			e.Finished, e.Complete, e.Repetition, e.Capped, e.Failed, e.Skipped, e.TimeCut))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return enc.AddArray("stages", zapcore.ArrayMarshalerFunc(func(arr zapcore.ArrayEncoder) error {
		for _, s := range t.Stages {
			s := s
			if err := arr.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
				o.AddString("name", s.Name)
				o.AddDuration("took", s.Duration)
				if s.LLMCalls > 0 {
					o.AddInt("llm_calls", s.LLMCalls)
					o.AddInt("prompt_tokens", s.PromptTokens)
					o.AddInt("completion_tokens", s.CompletionTokens)
				}
				if s.Note != "" {
					o.AddString("note", lt.p.Note(s.Note))
				}
				return nil
			})); err != nil {
				return err
			}
		}
		return nil
	}))
}

// String is a compact one-line summary for ask-sql results.
func (t *Trace) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := make([]string, 0, len(t.Stages))
	for _, s := range t.Stages {
		parts = append(parts, s.Name+"="+s.Duration.Round(time.Microsecond).String())
	}
	return strings.Join(parts, " ")
}

var (
	_ zapcore.ObjectMarshaler = (*Trace)(nil)
	_ zapcore.ObjectMarshaler = logTrace{}
)
