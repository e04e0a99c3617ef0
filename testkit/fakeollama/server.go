// Package fakeollama is a test double for the Ollama HTTP API: the same
// routes and JSON field names as a real Ollama server (/api/chat,
// /api/generate, /api/embed, /api/embeddings, /api/tags, /api/show,
// /api/version, /api/ps), streaming and non-streaming, with answers scripted
// by rules matched on the request. It records every request for assertions.
// It stands in for a model we cannot run in tests; its answers say nothing
// about accuracy.
//
// It needs no *testing.T: benchmarks' main programs call Start; tests may
// call New, which registers Close as a cleanup.
package fakeollama

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ollama/ollama/api"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// Version is what /api/version reports unless Options.Version is set.
const Version = "0.17.4"

// Options configure a Server.
type Options struct {
	// Models listed by /api/tags. When non-empty, requests for any other
	// model get Ollama's 404 "not found, try pulling it first".
	Models []string
	// Rules, tried in order; the first match answers.
	Rules []Rule
	// Default answers chat/generate requests no rule matched. When nil an
	// unmatched request gets a 500 naming the prompt, so tests fail loudly.
	Default *Rule
	// Templates are the chat templates /api/show reports, per model (":latest"
	// implied); a model not listed has ChatMLTemplate. NoTemplate is the
	// template-less base model's.
	Templates map[string]string
	// ParameterSizes are the details.parameter_size /api/show reports, per
	// model; a model not listed is "7.6B".
	ParameterSizes map[string]string
	// EmbedDim is the length of the deterministic embeddings (default 64).
	EmbedDim int
	Version  string
	// Slots, when > 0, is how many chat and generate answers are written at
	// once (Ollama's OLLAMA_NUM_PARALLEL); the others wait for a slot. As in
	// Ollama v0.17.4, a client that goes away while its answer is still
	// streaming leaks the slot for good (Ollama's handler blocks on the
	// next token), so after Slots such closes every request waits until its
	// client gives up.
	Slots int
	// Addr to listen on (default "127.0.0.1:0").
	Addr string
}

// Recorded is one request the server received.
type Recorded struct {
	Time        time.Time
	Method      string
	Route       string
	Model       string
	System      string
	Messages    []Message
	Prompt      string // generate's prompt
	Input       []string
	Format      json.RawMessage
	Options     map[string]any
	NumCtx      int      // options.num_ctx, 0 when absent
	Temperature *float64 // options.temperature, nil when absent
	Stream      bool     // as Ollama reads it: absent means true
	KeepAlive   string   // raw keep_alive JSON, "" when absent
	Think       string   // raw think JSON, "" when absent
	Rule        string   // name of the rule that answered, "" if none
	Status      int      // HTTP status answered
}

// Server is a running fake Ollama.
type Server struct {
	opts    Options
	ln      net.Listener
	srv     *http.Server
	baseCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu        sync.Mutex
	rules     []*ruleState
	def       *ruleState
	models    []string
	requests  []Recorded
	closed    bool
	slots     chan struct{} // nil without Options.Slots
	leaked    int           // slots kept by answers whose client went away
	answering int           // chat and generate answers being written
}

type ruleState struct {
	Rule
	hits int
}

// TB is the part of testing.TB that New uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// New starts a server and closes it when the test ends.
func New(t TB, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("fakeollama: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start starts a server on a loopback port.
func Start(opts Options) (*Server, error) {
	if opts.EmbedDim <= 0 {
		opts.EmbedDim = 64
	}
	if opts.Version == "" {
		opts.Version = Version
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeollama: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{opts: opts, ln: ln, baseCtx: ctx, cancel: cancel}
	if opts.Slots > 0 {
		s.slots = make(chan struct{}, opts.Slots)
	}
	s.SetRules(opts.Rules...)
	s.SetDefault(opts.Default)
	s.SetModels(opts.Models...)
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the base URL, e.g. http://127.0.0.1:40123.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is host:port, the form OLLAMA_HOST accepts.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, aborting requests in flight (their delays end), and
// waits for handlers to return. It is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	_ = s.srv.Close()
	s.wg.Wait()
}

// SetRules replaces the rules (and their hit counts).
func (s *Server) SetRules(rules ...Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = s.rules[:0:0]
	for _, r := range rules {
		s.rules = append(s.rules, &ruleState{Rule: r})
	}
}

// AddRule appends a rule after the existing ones.
func (s *Server) AddRule(r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, &ruleState{Rule: r})
}

// SetDefault sets the rule for unmatched chat/generate requests; nil restores
// the loud 500.
func (s *Server) SetDefault(r *Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = nil
	if r != nil {
		s.def = &ruleState{Rule: *r}
	}
}

// SetModels replaces the installed models; none means any model is accepted.
func (s *Server) SetModels(models ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]string(nil), models...)
}

// Requests returns a copy of every request received, oldest first.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// RequestsTo returns the recorded requests for one route.
func (s *Server) RequestsTo(route string) []Recorded {
	var out []Recorded
	for _, r := range s.Requests() {
		if r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

// Hits reports how often the named rule answered.
func (s *Server) Hits(rule string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rules {
		if r.Name == rule {
			n += r.hits
		}
	}
	if s.def != nil && s.def.Name == rule {
		n += s.def.hits
	}
	return n
}

// Reset forgets recorded requests and rule hit counts.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
	for _, r := range s.rules {
		r.hits = 0
	}
	if s.def != nil {
		s.def.hits = 0
	}
}

// Leaked is how many slots (Options.Slots) answers whose client went away
// mid-stream have kept.
func (s *Server) Leaked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaked
}

// Answering is how many chat and generate answers are being written or are
// waiting for a slot.
func (s *Server) Answering() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answering
}

// slot is one answer's hold on a model slot (Options.Slots).
type slot struct {
	s    *Server
	held bool
}

// takeSlot waits for a free slot; false means the client or the server
// went away first.
func (s *Server) takeSlot(ctx context.Context) (*slot, bool) {
	s.mu.Lock()
	s.answering++
	s.mu.Unlock()
	sl := &slot{s: s}
	if s.slots == nil {
		return sl, true
	}
	select {
	case s.slots <- struct{}{}:
		sl.held = true
		return sl, true
	case <-ctx.Done():
	case <-s.baseCtx.Done():
	}
	sl.end(false)
	return nil, false
}

// end gives the slot back, unless the answer's client went away
// mid-stream (cut): Ollama's handler then never returns, and its slot is
// lost until the server restarts.
func (sl *slot) end(cut bool) {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	sl.s.answering--
	if !sl.held {
		return
	}
	if cut && sl.s.baseCtx.Err() == nil {
		sl.s.leaked++
		return
	}
	<-sl.s.slots
}

// ServeHTTP routes like Ollama's server.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Add under the lock so it never races with Close's Wait.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "fakeollama: closed", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	switch {
	case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.record(Recorded{Method: r.Method, Route: "/", Status: http.StatusOK})
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "Ollama is running")
	case r.URL.Path == RouteVersion && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.record(Recorded{Method: r.Method, Route: RouteVersion, Status: http.StatusOK})
		writeJSON(w, http.StatusOK, map[string]string{"version": s.opts.Version})
	case r.URL.Path == RouteTags && r.Method == http.MethodGet:
		s.handleTags(w, r)
	case r.URL.Path == RoutePS && r.Method == http.MethodGet:
		s.record(Recorded{Method: r.Method, Route: RoutePS, Status: http.StatusOK})
		writeJSON(w, http.StatusOK, api.ProcessResponse{Models: []api.ProcessModelResponse{}})
	case r.URL.Path == RouteShow && r.Method == http.MethodPost:
		s.handleShow(w, r)
	case r.URL.Path == RouteChat && r.Method == http.MethodPost:
		s.handleChat(w, r)
	case r.URL.Path == RouteGenerate && r.Method == http.MethodPost:
		s.handleGenerate(w, r)
	case r.URL.Path == RouteEmbed && r.Method == http.MethodPost:
		s.handleEmbed(w, r)
	case r.URL.Path == RouteEmbeddings && r.Method == http.MethodPost:
		s.handleEmbeddings(w, r)
	default:
		s.record(Recorded{Method: r.Method, Route: r.URL.Path, Status: http.StatusNotFound})
		http.NotFound(w, r)
	}
}

func (s *Server) record(rec Recorded) {
	rec.Time = time.Now()
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// modelInstalled reports whether m is installed (always, when no models are
// configured).
func (s *Server) modelInstalled(m string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.models) == 0 {
		return true
	}
	for _, x := range s.models {
		if llm.NormalizeModel(x) == llm.NormalizeModel(m) {
			return true
		}
	}
	return false
}

func (s *Server) handleTags(w http.ResponseWriter, r *http.Request) {
	s.record(Recorded{Method: r.Method, Route: RouteTags, Status: http.StatusOK})
	s.mu.Lock()
	models := append([]string(nil), s.models...)
	s.mu.Unlock()
	resp := api.ListResponse{Models: []api.ListModelResponse{}}
	for _, m := range models {
		n := llm.NormalizeModel(m)
		resp.Models = append(resp.Models, api.ListModelResponse{
			Name:       n,
			Model:      n,
			ModifiedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
			Size:       int64(1 << 30),
			Digest:     fmt.Sprintf("%064x", fnv64(n)),
			Details:    s.details(n),
		})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) details(model string) api.ModelDetails {
	family := "qwen2"
	if isEmbedModel(model) {
		family = "nomic-bert"
	}
	size := "7.6B"
	for m, p := range s.opts.ParameterSizes {
		if llm.NormalizeModel(m) == llm.NormalizeModel(model) {
			size = p
		}
	}
	return api.ModelDetails{Format: "gguf", Family: family, Families: []string{family}, ParameterSize: size, QuantizationLevel: "Q4_K_M"}
}

func isEmbedModel(m string) bool { return strings.Contains(strings.ToLower(m), "embed") }

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	var req api.ShowRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.record(Recorded{Method: r.Method, Route: RouteShow, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	m := req.Model
	if m == "" {
		m = req.Name
	}
	if m == "" || !s.modelInstalled(m) {
		s.record(Recorded{Method: r.Method, Route: RouteShow, Model: m, Status: http.StatusNotFound})
		writeError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", m))
		return
	}
	s.record(Recorded{Method: r.Method, Route: RouteShow, Model: m, Status: http.StatusOK})
	d := s.details(m)
	caps := []string{"completion"}
	if isEmbedModel(m) {
		caps = []string{"embedding"}
	}
	// Built as a map: api.ShowResponse's Capabilities type lives in another
	// ollama package and the JSON is what matters.
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":    "FROM " + m,
		"parameters":   "num_ctx 2048",
		"template":     s.template(m),
		"details":      d,
		"model_info":   map[string]any{"general.architecture": d.Family, d.Family + ".context_length": 32768},
		"capabilities": caps,
		"modified_at":  time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	})
}

// ChatMLTemplate is the template /api/show reports by default: ChatML, as
// SmolLM2 and Qwen use it, with system messages.
const ChatMLTemplate = `{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
`

// NoTemplate is a base model's template: the prompt alone, so a chat's
// system messages never reach the model.
const NoTemplate = "{{ .Prompt }}"

func (s *Server) template(model string) string {
	for m, t := range s.opts.Templates {
		if llm.NormalizeModel(m) == llm.NormalizeModel(model) {
			return t
		}
	}
	return ChatMLTemplate
}

// pick returns the rule answering v, or nil. It counts the hit.
func (s *Server) pick(v ChatView) *Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rules {
		if r.Times > 0 && r.hits >= r.Times {
			continue
		}
		if r.matches(v) {
			r.hits++
			cp := r.Rule
			return &cp
		}
	}
	if s.def != nil && (v.Route == RouteChat || v.Route == RouteGenerate) {
		s.def.hits++
		cp := s.def.Rule
		return &cp
	}
	return nil
}

func optionsView(opts map[string]any) (numCtx int, temp *float64) {
	if v, ok := opts["num_ctx"].(float64); ok {
		numCtx = int(v)
	}
	if v, ok := opts["temperature"].(float64); ok {
		temp = &v
	}
	return numCtx, temp
}

// decodeBody decodes a request body twice: into the api type and into a raw
// map, so options keep JSON numbers and keep_alive stays raw.
func decodeBody(r *http.Request, v any) (raw map[string]json.RawMessage, err error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func rawOptions(raw map[string]json.RawMessage) map[string]any {
	var opts map[string]any
	if b, ok := raw["options"]; ok {
		_ = json.Unmarshal(b, &opts)
	}
	return opts
}

func rawString(raw map[string]json.RawMessage, key string) string {
	if b, ok := raw[key]; ok {
		return string(b)
	}
	return ""
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	raw, err := decodeBody(r, &req)
	if err != nil {
		s.record(Recorded{Method: r.Method, Route: RouteChat, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	v := ChatView{Route: RouteChat, Model: req.Model, Format: req.Format, Options: rawOptions(raw), Stream: req.Stream == nil || *req.Stream}
	var sys, all []string
	for _, m := range req.Messages {
		v.Messages = append(v.Messages, Message{Role: m.Role, Content: m.Content})
		if m.Role == "system" {
			sys = append(sys, m.Content)
		}
		all = append(all, m.Content)
	}
	v.System = strings.Join(sys, "\n")
	v.Prompt = strings.Join(all, "\n")
	s.answer(w, r, v, rawString(raw, "keep_alive"), rawString(raw, "think"))
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	var req api.GenerateRequest
	raw, err := decodeBody(r, &req)
	if err != nil {
		s.record(Recorded{Method: r.Method, Route: RouteGenerate, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	v := ChatView{Route: RouteGenerate, Model: req.Model, System: req.System, Format: req.Format, Options: rawOptions(raw), Stream: req.Stream == nil || *req.Stream}
	var all []string
	if req.System != "" {
		v.Messages = append(v.Messages, Message{Role: "system", Content: req.System})
		all = append(all, req.System)
	}
	v.Messages = append(v.Messages, Message{Role: "user", Content: req.Prompt})
	all = append(all, req.Prompt)
	v.Prompt = strings.Join(all, "\n")
	s.answer(w, r, v, rawString(raw, "keep_alive"), rawString(raw, "think"))
}

// answer runs the chat/generate rule machinery and writes Ollama's response.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, v ChatView, keepAlive, think string) {
	rec := Recorded{Method: r.Method, Route: v.Route, Model: v.Model, System: v.System, Messages: v.Messages,
		Format: v.Format, Options: v.Options, Stream: v.Stream, KeepAlive: keepAlive, Think: think}
	rec.NumCtx, rec.Temperature = optionsView(v.Options)
	if v.Route == RouteGenerate {
		rec.Prompt = v.LastUser()
	}
	if v.Model == "" {
		rec.Status = http.StatusBadRequest
		s.record(rec)
		writeError(w, http.StatusBadRequest, "model is required")
		return
	}
	if !s.modelInstalled(v.Model) {
		rec.Status = http.StatusNotFound
		s.record(rec)
		writeError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", v.Model))
		return
	}
	rule := s.pick(v)
	if rule == nil {
		rec.Status = http.StatusInternalServerError
		s.record(rec)
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("fakeollama: no rule matched %s model=%s; prompt head: %q", v.Route, v.Model, head(v.Prompt, 300)))
		return
	}
	rec.Rule = rule.Name
	rec.Status = http.StatusOK
	if rule.Status != 0 && rule.Status != http.StatusOK {
		rec.Status = rule.Status
	}
	s.record(rec)
	sl, ok := s.takeSlot(r.Context())
	if !ok {
		return
	}
	// streaming until the answer's end is written: a client that goes away
	// meanwhile costs the slot.
	streaming := false
	defer func() { sl.end(streaming && r.Context().Err() != nil) }()
	if !s.sleep(r.Context(), rule.Delay) {
		return
	}
	if rec.Status != http.StatusOK {
		msg := rule.Error
		if msg == "" {
			msg = http.StatusText(rule.Status)
		}
		writeError(w, rule.Status, msg)
		return
	}
	if rule.Fault == FaultGarbage {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, "<html>502 bad gateway</html>\n")
		return
	}
	content := cutAtStop(rule.reply(v), v.Options)
	promptTokens := rule.PromptTokens
	if promptTokens == 0 {
		promptTokens = approxTokens(v.Prompt)
	}
	evalTokens := rule.EvalTokens
	if evalTokens == 0 {
		evalTokens = approxTokens(content)
	}
	doneReason := rule.DoneReason
	if doneReason == "" {
		doneReason = "stop"
	}
	promptDur, evalDur := rule.PromptEvalDuration, rule.EvalDuration
	if promptDur <= 0 {
		promptDur = 200 * time.Microsecond
	}
	if evalDur <= 0 {
		evalDur = 500 * time.Microsecond
	}
	metrics := api.Metrics{
		TotalDuration:      rule.Delay + 100*time.Microsecond + promptDur + evalDur,
		LoadDuration:       100 * time.Microsecond,
		PromptEvalCount:    promptTokens,
		PromptEvalDuration: promptDur,
		EvalCount:          evalTokens,
		EvalDuration:       evalDur,
	}
	mk := func(piece string, done bool) any {
		now := time.Now().UTC()
		if v.Route == RouteGenerate {
			g := api.GenerateResponse{Model: v.Model, CreatedAt: now, Response: piece, Done: done}
			if done {
				g.DoneReason, g.Metrics, g.Context = doneReason, metrics, []int{1, 2, 3}
			}
			return g
		}
		c := api.ChatResponse{Model: v.Model, CreatedAt: now, Message: api.Message{Role: "assistant", Content: piece}, Done: done}
		if done {
			c.DoneReason, c.Metrics = doneReason, metrics
		}
		return c
	}
	streaming = v.Stream || rule.Fault == FaultEndless || rule.Fault == FaultEndlessVaried
	if rule.Fault == FaultEndlessVaried {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		for i := 1; r.Context().Err() == nil; i++ {
			if err := enc.Encode(mk(fmt.Sprintf("%s step %d considers %x. ", content, i, fnv64(fmt.Sprint(i))), false)); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		return
	}
	if rule.Fault == FaultEndless {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		piece := content
		if piece == "" {
			piece = "SELECT "
		}
		// In chunks of ChunkSize runes, as a model streams tokens.
		parts := chunks(piece, rule.ChunkSize)
		for i := 0; r.Context().Err() == nil; i++ {
			if err := enc.Encode(mk(parts[i%len(parts)], false)); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		return
	}
	if !v.Stream {
		if rule.Fault == FaultDrop {
			dropAfter(w, `{"model":"`+v.Model+`","message":{"role":"assistant","content":"`)
		}
		writeJSON(w, http.StatusOK, mk(content, rule.Fault != FaultAbortRepetition))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	for i, piece := range chunks(content, rule.ChunkSize) {
		if i > 0 && !s.sleep(r.Context(), rule.ChunkDelay) {
			return
		}
		_ = enc.Encode(mk(piece, false))
		if flusher != nil {
			flusher.Flush()
		}
		if rule.Fault == FaultDrop {
			// Abort mid-stream: net/http closes the connection without
			// finishing the chunked body, so the client sees an unexpected EOF.
			panic(http.ErrAbortHandler)
		}
	}
	if rule.Fault == FaultDrop { // empty content: drop before any chunk
		panic(http.ErrAbortHandler)
	}
	if rule.Fault == FaultAbortRepetition {
		// Ollama's repeat guard ends the stream cleanly without done:true
		// and without counts.
		streaming = false
		return
	}
	_ = enc.Encode(mk("", true))
	streaming = false
}

// cutAtStop ends an answer where Ollama would: at the first of the
// request's stop sequences (options.stop), which is left out of the text.
func cutAtStop(content string, opts map[string]any) string {
	stops, _ := opts["stop"].([]any)
	cut := len(content)
	for _, x := range stops {
		if s, ok := x.(string); ok && s != "" {
			if i := strings.Index(content, s); i >= 0 && i < cut {
				cut = i
			}
		}
	}
	return content[:cut]
}

// dropAfter writes a partial body, flushes it and closes the connection.
func dropAfter(w http.ResponseWriter, partial string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, partial)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	panic(http.ErrAbortHandler)
}

// sleep waits d, or until the request or the server ends; false means ended.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.baseCtx.Done():
		return false
	}
}

func (s *Server) handleEmbed(w http.ResponseWriter, r *http.Request) {
	var req api.EmbedRequest
	raw, err := decodeBody(r, &req)
	if err != nil {
		s.record(Recorded{Method: r.Method, Route: RouteEmbed, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var inputs []string
	switch in := req.Input.(type) {
	case string:
		inputs = []string{in}
	case []any:
		for _, x := range in {
			str, ok := x.(string)
			if !ok {
				s.record(Recorded{Method: r.Method, Route: RouteEmbed, Model: req.Model, Status: http.StatusBadRequest})
				writeError(w, http.StatusBadRequest, "invalid input type")
				return
			}
			inputs = append(inputs, str)
		}
	case nil:
	default:
		s.record(Recorded{Method: r.Method, Route: RouteEmbed, Model: req.Model, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, "invalid input type")
		return
	}
	if !s.embedPrelude(w, r, RouteEmbed, req.Model, inputs, rawOptions(raw), rawString(raw, "keep_alive")) {
		return
	}
	resp := api.EmbedResponse{Model: req.Model, Embeddings: make([][]float32, 0, len(inputs))}
	n := 0
	for _, in := range inputs {
		resp.Embeddings = append(resp.Embeddings, Embedding(in, s.opts.EmbedDim))
		n += approxTokens(in)
	}
	resp.TotalDuration, resp.LoadDuration, resp.PromptEvalCount = time.Millisecond, 100*time.Microsecond, n
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req api.EmbeddingRequest
	raw, err := decodeBody(r, &req)
	if err != nil {
		s.record(Recorded{Method: r.Method, Route: RouteEmbeddings, Status: http.StatusBadRequest})
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.embedPrelude(w, r, RouteEmbeddings, req.Model, []string{req.Prompt}, rawOptions(raw), rawString(raw, "keep_alive")) {
		return
	}
	vec := Embedding(req.Prompt, s.opts.EmbedDim)
	out := make([]float64, len(vec))
	for i, x := range vec {
		out[i] = float64(x)
	}
	writeJSON(w, http.StatusOK, api.EmbeddingResponse{Embedding: out})
}

// embedPrelude records an embedding request and applies model checks and any
// rule scripted for the route (status, delay, garbage, drop). It reports
// whether the normal answer should follow.
func (s *Server) embedPrelude(w http.ResponseWriter, r *http.Request, route, model string, inputs []string, opts map[string]any, keepAlive string) bool {
	rec := Recorded{Method: r.Method, Route: route, Model: model, Input: inputs, Options: opts, KeepAlive: keepAlive, Status: http.StatusOK}
	rec.NumCtx, rec.Temperature = optionsView(opts)
	if model == "" {
		rec.Status = http.StatusBadRequest
		s.record(rec)
		writeError(w, http.StatusBadRequest, "model is required")
		return false
	}
	if !s.modelInstalled(model) {
		rec.Status = http.StatusNotFound
		s.record(rec)
		writeError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", model))
		return false
	}
	rule := s.pick(ChatView{Route: route, Model: model, Input: inputs, Prompt: strings.Join(inputs, "\n"), Options: opts})
	if rule == nil {
		s.record(rec)
		return true
	}
	rec.Rule = rule.Name
	if rule.Status != 0 && rule.Status != http.StatusOK {
		rec.Status = rule.Status
	}
	s.record(rec)
	if !s.sleep(r.Context(), rule.Delay) {
		return false
	}
	switch {
	case rec.Status != http.StatusOK:
		msg := rule.Error
		if msg == "" {
			msg = http.StatusText(rule.Status)
		}
		writeError(w, rule.Status, msg)
		return false
	case rule.Fault == FaultGarbage:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, "not json at all")
		return false
	case rule.Fault == FaultDrop:
		dropAfter(w, `{"model":"`+model+`","embeddings":[[0.1,`)
	}
	return true
}

// Embedding is the deterministic vector the server returns for text: a
// hashed bag of lower-cased words and character trigrams, L2-normalized, so
// texts sharing words are close in cosine similarity.
func Embedding(text string, dim int) []float32 {
	if dim <= 0 {
		dim = 64
	}
	vec := make([]float64, dim)
	add := func(feature string, weight float64) {
		h := fnv64(feature)
		sign := 1.0
		if h&(1<<63) != 0 {
			sign = -1
		}
		vec[h%uint64(dim)] += sign * weight
	}
	lower := strings.ToLower(text)
	words := strings.FieldsFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		add("w:"+w, 1)
		padded := " " + w + " "
		for i := 0; i+3 <= len(padded); i++ {
			add("t:"+padded[i:i+3], 0.25)
		}
	}
	add("bias", 0.01) // keeps the empty text from being the zero vector
	var norm float64
	for _, x := range vec {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dim)
	for i, x := range vec {
		out[i] = float32(x / norm)
	}
	return out
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// approxTokens estimates tokens the way people do for English: ~4 bytes each.
func approxTokens(s string) int { return len(s)/4 + 1 }

// chunks splits s into pieces of n runes (default 8) for streaming.
func chunks(s string, n int) []string {
	if n <= 0 {
		n = 8
	}
	if s == "" {
		return nil
	}
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
