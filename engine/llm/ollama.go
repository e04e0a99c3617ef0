package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"
)

// OllamaClient is a Client for an Ollama server.
type OllamaClient struct {
	caller
	api *api.Client
	// drainFor bounds a drain (streamChat); drainLimit unless a test
	// sets it.
	drainFor time.Duration
}

// caller is what both backends share: the effective configuration and the
// retry loop with its error classification.
type caller struct {
	cfg  Config
	base *url.URL
	log  *zap.Logger
	// missingHint tells the operator how to install a missing model.
	missingHint func(model string) string
	infos       *modelInfos
}

var _ Client = (*OllamaClient)(nil)

// New validates cfg, fills defaults and returns a client. It does not
// contact the server; call CheckModels for that.
func New(cfg Config) (*OllamaClient, error) {
	cl, err := newCaller(cfg, "ollama")
	if err != nil {
		return nil, err
	}
	cl.missingHint = pullHint
	return &OllamaClient{caller: cl, api: api.NewClient(cl.base, cl.cfg.HTTPClient), drainFor: drainLimit}, nil
}

// newCaller fills cfg's defaults and parses its host.
func newCaller(cfg Config, api string) (caller, error) {
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Host == "" {
		cfg.Host = cfg.Getenv("OLLAMA_HOST")
	}
	base, err := ParseHost(cfg.Host)
	if err != nil {
		return caller{}, err
	}
	cfg.API = api
	if cfg.NumCtx <= 0 {
		cfg.NumCtx = DefaultNumCtx
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.EmbedBatch <= 0 {
		cfg.EmbedBatch = 64
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if cfg.HTTPClient == nil {
		// Own transport: no shared state with http.DefaultClient; no client
		// timeout because every call carries its own deadline.
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	models := make(map[Role]string, len(cfg.Models))
	for r, m := range cfg.Models {
		models[r] = strings.TrimSpace(m)
	}
	cfg.Models = models
	return caller{cfg: cfg, base: base, log: cfg.Logger.Named("llm"), infos: &modelInfos{}}, nil
}

// BaseURL is the server address the client talks to.
func (c *caller) BaseURL() string { return c.base.String() }

// Config returns the effective configuration (defaults filled in).
func (c *caller) Config() Config {
	cfg := c.cfg
	cfg.Models = make(map[Role]string, len(c.cfg.Models))
	for r, m := range c.cfg.Models {
		cfg.Models[r] = m
	}
	return cfg
}

// ModelFor returns the model configured for role, or "".
func (c *caller) ModelFor(role Role) string { return c.cfg.Models[role] }

func (c *OllamaClient) keepAlive() *api.Duration {
	if c.cfg.KeepAlive == 0 {
		return nil
	}
	return &api.Duration{Duration: c.cfg.KeepAlive}
}

// Chat implements Client. The answer is always streamed: a request with
// Complete ends as soon as the answer holds what was asked, and any answer
// ends when it starts repeating itself (the rest is drained, see
// streamChat). A model whose template drops system messages gets the
// system text folded into the user message.
func (c *OllamaClient) Chat(ctx context.Context, req ChatRequest) (ChatResponse, error) {
	model, err := c.cfg.model(req.Role, req.Model)
	if err != nil {
		return ChatResponse{}, &Error{Op: "chat", Step: req.Step, Kind: ErrNoModel, Err: err}
	}
	numCtx := req.NumCtx
	if numCtx <= 0 {
		numCtx = c.cfg.NumCtx
	}
	info := c.describeOnce(ctx, model, c.show)
	system, messages := req.System, req.Messages
	if system != "" && info.FoldsSystem() {
		system, messages = "", foldSystem(req.System, req.Messages)
	}
	msgs := make([]api.Message, 0, len(messages)+1)
	if system != "" {
		msgs = append(msgs, api.Message{Role: SpeakerSystem, Content: system})
	}
	for _, m := range messages {
		msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
	}
	// num_predict makes the model stop; the byte cap below protects
	// against a server that does not.
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = c.cfg.MaxTokens
	}
	temperature := req.Temperature
	stream := true
	areq := &api.ChatRequest{
		Model:     model,
		Messages:  msgs,
		Stream:    &stream,
		Format:    req.JSONSchema,
		KeepAlive: c.keepAlive(),
	}
	if c.cfg.Think != nil {
		areq.Think = &api.ThinkValue{Value: *c.cfg.Think}
	}

	start := time.Now()
	var out ChatResponse
	vary := false
	attempts, err := c.retry(ctx, "chat", model, req.Step, func(ctx context.Context) error {
		if vary {
			// No identical retry: the same deterministic request would
			// time out or loop the same way again.
			maxTokens, temperature = variedRetry(maxTokens, temperature)
		}
		opts := map[string]any{"num_ctx": numCtx, "temperature": temperature, "num_predict": maxTokens}
		if len(req.Stop) > 0 {
			opts["stop"] = req.Stop
		}
		areq.Options = opts
		out = ChatResponse{Model: model, Folded: system != req.System}
		w := newWatcher(req.Complete, c.cfg.MaxAnswerBytes)
		final, done, err := c.streamChat(ctx, areq, w, maxTokens)
		if done {
			out.PromptTokens = final.PromptEvalCount
			out.CompletionTokens = final.EvalCount
			out.EvalDuration = final.EvalDuration
			out.PromptDuration = final.PromptEvalDuration
			out.DoneReason = final.DoneReason
			if final.Model != "" {
				out.Model = final.Model
			}
		}
		out.Content = w.text.String()
		w.timings(&out)
		if !done {
			// Ended by the client or cut off: count what arrived.
			out.PromptTokens = estimateTokens(system, messages)
			out.CompletionTokens = w.chunks
			out.EvalDuration, out.PromptDuration = 0, 0
		}
		if errors.Is(err, errStopEarly) {
			out.DoneReason = w.cut
			return nil
		}
		if err != nil {
			vary = ctx.Err() != nil
			return err
		}
		if !done {
			// Ollama ends a stream without done when it aborts a model
			// that repeats itself: not worth the same request again.
			vary = true
			return errIncomplete
		}
		return nil
	})
	out.Content = restoreStop(out.Content, out.DoneReason, req.Stop)
	out, err = settleChat(c.log, req.Step, model, out, attempts, start, err)
	if err != nil {
		return out, err
	}
	if out.PromptTokens >= numCtx {
		// Ollama truncates silently; the count reaching num_ctx is the only sign.
		c.log.Warn("prompt filled the context window and was probably truncated",
			zap.String("step", req.Step), zap.String("model", out.Model),
			zap.Int("prompt_tokens", out.PromptTokens), zap.Int("num_ctx", numCtx))
	}
	return out, nil
}

// drainLimit bounds how long a stream the client no longer needs is read on
// in the background (streamChat): at 3 tokens/s, a loaded CPU's pace for a
// small model, it covers a few hundred tokens.
const drainLimit = 2 * time.Minute

// streamChat sends areq and feeds the answer to w until w has seen enough,
// the server ends it, or ctx ends; done reports that the server ended it,
// with final its last message.
//
// Once tokens flow, a stream the client no longer needs is not closed but
// read to its end in the background and dropped. Ollama (v0.17.4 at least)
// blocks the handler of a stream whose client went away on its next token,
// holding one of the model's parallel slots for good: after
// OLLAMA_NUM_PARALLEL such closes the model answers nothing until the server
// restarts (docs/real-models.md). The drain is bounded by the output cap
// (num_predict stops the server there; one that ignores it is closed a
// little past it) and by drainLimit. A call given up before its first token
// is closed at once: the server was queueing it or reading the prompt, which
// it abandons cleanly.
func (c *OllamaClient) streamChat(ctx context.Context, areq *api.ChatRequest, w *watcher, maxTokens int) (final api.ChatResponse, done bool, err error) {
	type result struct {
		final api.ChatResponse
		done  bool
		err   error
	}
	sent := *areq // the goroutine may outlive this attempt; the next changes areq
	results := make(chan result, 1)
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu       sync.Mutex
		released bool // the caller has gone on; what arrives now is drained
		flowing  bool // a chunk arrived: the model is generating
		drained  int
		limit    *time.Timer
	)
	// letGo ends the caller's interest, under mu.
	letGo := func() {
		released = true
		if flowing {
			limit = time.AfterFunc(c.drainFor, stop)
		} else {
			stop()
		}
	}
	go func() {
		defer stop()
		var last api.ChatResponse
		finished := false
		err := c.api.Chat(sctx, &sent, func(r api.ChatResponse) error {
			mu.Lock()
			defer mu.Unlock()
			flowing = true
			if released {
				if drained++; drained > maxTokens+maxTokens/4+16 {
					return errDrainCap
				}
				return nil
			}
			if err := w.add(r.Message.Content); err != nil {
				if !errors.Is(err, errStopEarly) {
					return err // past the byte cap: a server that ignores num_predict
				}
				results <- result{err: errStopEarly}
				letGo()
				return nil
			}
			if r.Done {
				last, finished = r, true
			}
			return nil
		})
		mu.Lock()
		defer mu.Unlock()
		if limit != nil {
			limit.Stop()
		}
		if !released {
			released = true
			results <- result{final: last, done: finished, err: err}
		}
	}()
	select {
	case r := <-results:
		return r.final, r.done, r.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		if released { // the answer came in as ctx ended
			r := <-results
			return r.final, r.done, r.err
		}
		letGo()
		return api.ChatResponse{}, false, ctx.Err()
	}
}

// variedRetry is what a retry after a timeout or an aborted answer changes:
// half the output cap and a warmer temperature, so the model takes another
// path and stops sooner.
func variedRetry(maxTokens int, temperature float64) (int, float64) {
	return max(maxTokens/2, 16), min(temperature+0.3, 1)
}

// Embed implements Client.
func (c *OllamaClient) Embed(ctx context.Context, model string, texts []string) ([][]float32, error) {
	model, err := c.cfg.model(RoleEmbedding, model)
	if err != nil {
		return nil, &Error{Op: "embed", Kind: ErrNoModel, Err: err}
	}
	if len(texts) == 0 {
		return nil, nil
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += c.cfg.EmbedBatch {
		batch := texts[start:min(start+c.cfg.EmbedBatch, len(texts))]
		vecs, err := embedFitting(ctx, batch, func(ctx context.Context, batch []string) ([][]float32, error) {
			req := &api.EmbedRequest{Model: model, Input: batch, KeepAlive: c.keepAlive()}
			var resp *api.EmbedResponse
			attempts, err := c.retry(ctx, "embed", model, "", func(ctx context.Context) error {
				var err error
				resp, err = c.api.Embed(ctx, req)
				return err
			})
			if err != nil {
				return nil, err
			}
			if len(resp.Embeddings) != len(batch) {
				return nil, &Error{Op: "embed", Model: model, Attempts: attempts, Kind: ErrBadOutput,
					Err: fmt.Errorf("got %d embeddings for %d inputs", len(resp.Embeddings), len(batch))}
			}
			return resp.Embeddings, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// ListModels implements Client.
func (c *OllamaClient) ListModels(ctx context.Context) ([]string, error) {
	var resp *api.ListResponse
	_, err := c.retry(ctx, "list", "", "", func(ctx context.Context) error {
		var err error
		resp, err = c.api.List(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.Models))
	for _, m := range resp.Models {
		n := m.Name
		if n == "" {
			n = m.Model
		}
		names = append(names, n)
	}
	return names, nil
}

func (c *caller) unreachableHint() string {
	if c.cfg.API == APIOpenAI {
		return "is the model server running at " + c.base.String() + "?"
	}
	return "is Ollama running at " + c.base.String() + "? start it with `ollama serve`"
}

var errIncomplete = errors.New("response ended before done")

// errAnswerTooLong: the answer passed Config.MaxAnswerBytes; reading stops.
var errAnswerTooLong = errors.New("model answer exceeds the size limit")

// errDrainCap closes a drained stream that ran past the output cap.
var errDrainCap = errors.New("drained answer ran past the output cap")

// retry runs fn with a per-call timeout, retrying retryable failures with
// exponential backoff. It returns the number of attempts made.
func (c *caller) retry(ctx context.Context, op, model, step string, fn func(context.Context) error) (int, error) {
	backoff := c.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		err := fn(callCtx)
		timedOut := errors.Is(callCtx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			return attempt, nil
		}
		if ctx.Err() != nil {
			// The caller gave up: never retry, and say so plainly.
			return attempt, fmt.Errorf("llm %s %s: %w", op, model, context.Cause(ctx))
		}
		e := classify(scrub(err, c.cfg.APIKey), timedOut)
		e.Op, e.Model, e.Step, e.Attempts = op, model, step, attempt
		if errors.Is(e.Kind, ErrModelMissing) {
			e.Hint = c.missingHint(model)
		}
		if errors.Is(e.Kind, ErrTimeout) {
			e.Limit = c.cfg.CallTimeout
			e.Hint = fmt.Sprintf("each call is limited to %s (CallTimeout)", c.cfg.CallTimeout)
		}
		if errors.Is(e.Kind, ErrUnreachable) {
			e.Hint = c.unreachableHint()
		}
		if !retryable(e) || attempt > c.cfg.MaxRetries {
			return attempt, e
		}
		wait := backoff + rand.N(backoff/2+1)
		backoff *= 2
		logf := c.log.Warn
		if op != "chat" && op != "embed" {
			// Start-up checks report their own failure once.
			logf = c.log.Debug
		}
		logf("llm call failed, retrying", zap.String("op", op), zap.String("model", model),
			zap.String("step", step), zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(e))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, fmt.Errorf("llm %s %s: %w", op, model, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// classify maps a failed request onto an error kind.
func classify(err error, timedOut bool) *Error {
	e := &Error{Kind: ErrServer, Err: err}
	var se api.StatusError
	var ae api.AuthorizationError
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var syn *json.SyntaxError
	var ute *json.UnmarshalTypeError
	switch {
	case timedOut:
		e.Kind = ErrTimeout
	case errors.Is(err, errAnswerTooLong):
		e.Kind = ErrBadOutput
	case errors.As(err, &se):
		e.StatusCode = se.StatusCode
		if se.StatusCode == http.StatusNotFound && strings.Contains(strings.ToLower(se.ErrorMessage), "not found") {
			e.Kind = ErrModelMissing
		}
	case errors.As(err, &ae):
		e.StatusCode = ae.StatusCode
	case errors.As(err, &dnsErr), errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &opErr) && opErr.Op == "dial":
		e.Kind = ErrUnreachable
	case errors.As(err, &syn), errors.As(err, &ute):
		e.Kind = ErrBadOutput
	}
	return e
}

// retryable: transport trouble, timeouts, 5xx and broken bodies are worth
// another try; a 4xx (missing model, bad request) is not.
func retryable(e *Error) bool {
	if errors.Is(e.Kind, ErrModelMissing) || errors.Is(e.Err, errAnswerTooLong) {
		return false
	}
	return e.StatusCode < 400 || e.StatusCode >= 500
}
