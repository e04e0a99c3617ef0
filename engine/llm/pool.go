package llm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/metrics"
)

// Pool is a Client over several model servers (Ollama or OpenAI-compatible,
// Config.API) with the same models. Each
// call goes to the server with the least outstanding work (estimated
// tokens of the calls in flight there); a server that fails with transport
// trouble, a timeout, a 5xx or a missing model is skipped for a while
// (1s, doubling up to 30s) and then tried again, and the call moves on to
// the next server. With one server the pool only adds metrics.
type Pool struct {
	cfg     Config // effective configuration of the members
	members []*member
	metrics *metrics.Metrics
	log     *zap.Logger
	retries int // extra attempts once every server was tried (multi-server pools)
	backoff time.Duration

	now func() time.Time // time.Now; tests move it

	mu   sync.Mutex
	next int // rotates ties between equally loaded servers
}

type member struct {
	c    Backend
	name string // base URL, the metrics label
	// under Pool.mu:
	work      int64 // estimated tokens in flight
	calls     int
	fails     int       // consecutive failures
	downUntil time.Time // skipped until then
	lastErr   error
}

var _ Client = (*Pool)(nil)

// Pool health backoff bounds.
const (
	poolDownMin = time.Second
	poolDownMax = 30 * time.Second
)

// NewPool makes a client per host ("" means $OLLAMA_HOST or the default)
// with cfg; m, when set, receives per-server and per-model metrics.
func NewPool(cfg Config, hosts []string, m *metrics.Metrics) (*Pool, error) {
	if len(hosts) == 0 {
		hosts = []string{cfg.Host}
	}
	p := &Pool{metrics: m, now: time.Now}
	maxRetries := cfg.MaxRetries
	if len(hosts) > 1 {
		// The pool retries on other servers; a member retrying on its own
		// would hold the call on a server that is failing.
		cfg.MaxRetries = -1
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		c := cfg
		c.Host = h
		mc, err := NewBackend(c)
		if err != nil {
			return nil, fmt.Errorf("model server %q: %w", DisplayHost(h), err)
		}
		name := mc.BaseURL()
		if seen[name] {
			return nil, fmt.Errorf("model server %s given twice", name)
		}
		seen[name] = true
		p.members = append(p.members, &member{c: mc, name: name})
		m.LLMServerUp(name, true)
	}
	p.cfg = p.members[0].c.Config()
	p.log = p.cfg.Logger.Named("llm")
	p.backoff = p.cfg.RetryBackoff
	if len(hosts) > 1 {
		switch {
		case maxRetries == 0:
			p.retries = DefaultMaxRetries
		case maxRetries > 0:
			p.retries = maxRetries
		}
	}
	return p, nil
}

// Observe sends the pool's metrics to m; call it before the first call.
func (p *Pool) Observe(m *metrics.Metrics) {
	p.metrics = m
	for _, mb := range p.members {
		m.LLMServerUp(mb.name, true)
	}
}

// Config is the members' effective configuration (Host is the first's).
func (p *Pool) Config() Config { return p.members[0].c.Config() }

// ModelFor returns the model configured for role, or "".
func (p *Pool) ModelFor(role Role) string { return p.members[0].c.ModelFor(role) }

// BaseURL lists the servers, comma-separated.
func (p *Pool) BaseURL() string {
	names := make([]string, len(p.members))
	for i, m := range p.members {
		names[i] = m.name
	}
	return strings.Join(names, ",")
}

// ServerStatus is one server as the pool sees it.
type ServerStatus struct {
	URL         string
	Up          bool // not being skipped
	Outstanding int  // calls in flight
	Work        int64
	Err         error // the latest failure while down
}

// Servers describes every server.
func (p *Pool) Servers() []ServerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make([]ServerStatus, len(p.members))
	for i, m := range p.members {
		up := !now.Before(m.downUntil)
		out[i] = ServerStatus{URL: m.name, Up: up, Outstanding: m.calls, Work: m.work}
		if !up {
			out[i].Err = m.lastErr
		}
	}
	return out
}

// Members returns the per-server clients (start-up checks).
func (p *Pool) Members() []Backend {
	out := make([]Backend, len(p.members))
	for i, m := range p.members {
		out[i] = m.c
	}
	return out
}

// pick chooses the server for a call of the given work: among servers not
// being skipped and not yet tried by this call, the least loaded; when all
// are skipped, the one that comes back soonest. It books the work.
func (p *Pool) pick(work int64, tried []bool) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var best *member
	n := len(p.members)
	for k := range n {
		i := (p.next + k) % n
		m := p.members[i]
		if tried[i] || now.Before(m.downUntil) {
			continue
		}
		if best == nil || m.work < best.work || m.work == best.work && m.calls < best.calls {
			best = m
		}
	}
	if best == nil {
		// Every server is skipped or was tried: the one back soonest,
		// preferring one this call has not tried.
		for i, m := range p.members {
			if best == nil {
				best = m
				continue
			}
			bt := tried[indexOf(p.members, best)]
			if bt && !tried[i] || bt == tried[i] && m.downUntil.Before(best.downUntil) {
				best = m
			}
		}
	}
	p.next = (p.next + 1) % n
	best.work += work
	best.calls++
	p.metrics.LLMOutstanding(best.name, 1)
	return best
}

func indexOf(ms []*member, m *member) int {
	for i, x := range ms {
		if x == m {
			return i
		}
	}
	return -1
}

// done releases a call's work and records the server's health.
func (p *Pool) done(m *member, work int64, err error, callerGone bool) {
	p.mu.Lock()
	m.work -= work
	m.calls--
	wasDown := m.fails > 0
	down := false
	switch {
	case err == nil:
		m.fails, m.lastErr = 0, nil
	case callerGone:
		// The asker cancelled: says nothing about the server.
	case serverFault(err):
		m.fails++
		d := min(poolDownMin<<min(m.fails-1, 10), poolDownMax)
		m.downUntil = p.now().Add(d)
		m.lastErr = err
		down = true
	}
	fails := m.fails
	p.mu.Unlock()
	p.metrics.LLMOutstanding(m.name, -1)
	if down {
		p.metrics.LLMServerUp(m.name, false)
		if len(p.members) > 1 {
			p.log.Warn("ollama server skipped after a failure", zap.String("server", m.name), zap.Int("failures", fails), zap.Error(err))
		}
	} else if err == nil && wasDown {
		p.metrics.LLMServerUp(m.name, true)
		p.log.Info("ollama server answers again", zap.String("server", m.name))
	}
}

// serverFault: failures that say the server (not the request) is in
// trouble, so another server should take the call.
func serverFault(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch {
	case errors.Is(e.Kind, ErrUnreachable), errors.Is(e.Kind, ErrTimeout), errors.Is(e.Kind, ErrModelMissing):
		return true
	case errors.Is(e.Kind, ErrServer):
		return e.StatusCode == 0 || e.StatusCode >= 500
	}
	return false
}

// do runs fn on servers until one succeeds, the failure is the request's
// own, or the attempts are spent.
// observe, when set, records each attempt (metrics).
func (p *Pool) do(ctx context.Context, work int64, fn func(Backend) error, observe func(server string, d time.Duration, err error)) (*member, error) {
	tried := make([]bool, len(p.members))
	attempts := len(p.members) + p.retries
	backoff := p.backoff
	var err error
	for a := 1; ; a++ {
		m := p.pick(work, tried)
		tried[indexOf(p.members, m)] = true
		start := time.Now()
		err = fn(m.c)
		if observe != nil {
			observe(m.name, time.Since(start), err)
		}
		gone := ctx.Err() != nil
		p.done(m, work, err, gone)
		if err == nil || gone || !serverFault(err) || a >= attempts || len(p.members) == 1 {
			return m, err
		}
		if allTrue(tried) {
			// Every server failed this call: wait before going round again.
			clear(tried)
			wait := backoff + rand.N(backoff/2+1)
			backoff *= 2
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return m, err
			case <-t.C:
			}
		}
	}
}

func allTrue(b []bool) bool {
	for _, x := range b {
		if !x {
			return false
		}
	}
	return true
}

// chatWork estimates a chat call's tokens: prompt (about 4 bytes a token)
// plus the completion it may produce.
func (p *Pool) chatWork(req ChatRequest) int64 {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Content)
	}
	out := req.MaxTokens
	if out <= 0 {
		out = p.cfg.MaxTokens
	}
	return int64(n/4 + out + 1)
}

// Chat implements Client.
func (p *Pool) Chat(ctx context.Context, req ChatRequest) (ChatResponse, error) {
	model := req.Model
	if model == "" {
		if model = p.ModelFor(req.Role); model == "" {
			model = p.ModelFor(RoleGenerator)
		}
	}
	var resp ChatResponse
	_, err := p.do(ctx, p.chatWork(req), func(c Backend) error {
		var err error
		resp, err = c.Chat(ctx, req)
		return err
	}, func(server string, d time.Duration, err error) {
		p.metrics.LLMCall(model, server, d, resp.PromptTokens, resp.CompletionTokens, err)
	})
	return resp, err
}

// Embed implements Client.
func (p *Pool) Embed(ctx context.Context, model string, texts []string) ([][]float32, error) {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	label := model
	if label == "" {
		label = p.ModelFor(RoleEmbedding)
	}
	var out [][]float32
	_, err := p.do(ctx, int64(n/4+1), func(c Backend) error {
		var err error
		out, err = c.Embed(ctx, model, texts)
		return err
	}, func(server string, d time.Duration, err error) {
		p.metrics.LLMCall(label, server, d, n/4, 0, err)
	})
	return out, err
}

// ListModels implements Client: the models of the first server that answers.
func (p *Pool) ListModels(ctx context.Context) ([]string, error) {
	var out []string
	_, err := p.do(ctx, 0, func(c Backend) error {
		var err error
		out, err = c.ListModels(ctx)
		return err
	}, nil)
	return out, err
}

// Check asks every server for its models and records which answer; it
// fails only when none does (readiness: some server can take asks).
func (p *Pool) Check(ctx context.Context) error {
	errs := make([]error, len(p.members))
	var wg sync.WaitGroup
	for i, m := range p.members {
		wg.Go(func() {
			p.mu.Lock()
			m.calls++
			p.mu.Unlock()
			p.metrics.LLMOutstanding(m.name, 1)
			_, err := m.c.ListModels(ctx)
			p.done(m, 0, err, ctx.Err() != nil)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.name, err)
			}
		})
	}
	wg.Wait()
	up := 0
	for _, e := range errs {
		if e == nil {
			up++
		}
	}
	if up == 0 {
		return errors.Join(errs...)
	}
	return nil
}

// Describe asks every server about the model (each keeps its own answer,
// as each sends its own calls) and returns the first answer.
func (p *Pool) Describe(ctx context.Context, model string) (ModelInfo, error) {
	var first ModelInfo
	var errs []error
	for _, m := range p.members {
		i, err := m.c.Describe(ctx, model)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			continue
		}
		if !first.Known {
			first = i
		}
	}
	if first.Known {
		return first, nil
	}
	return ModelInfo{Model: model}, errors.Join(errs...)
}

// Notes lists, once each, what the servers' clients do about their models.
func (p *Pool) Notes() []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range p.members {
		for _, n := range m.c.Notes() {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Info is what the first server said about model, asked once and kept.
func (p *Pool) Info(ctx context.Context, model string) ModelInfo {
	return p.members[0].c.Info(ctx, model)
}
