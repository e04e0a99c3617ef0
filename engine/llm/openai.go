package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/redact"
)

// OpenAIClient is a Client for an OpenAI-compatible server (llama.cpp's
// llama-server, vLLM, LM Studio, LocalAI, Ollama's /v1): chat completions
// streamed with usage counts, JSON schemas as response_format, embeddings
// and the model list. Caps and retries are the OllamaClient's.
type OpenAIClient struct {
	caller
	// noSchema is set once the server rejected response_format: later calls
	// leave it out and rely on ChatJSON's parsing and repair.
	noSchema atomic.Bool
}

var _ Client = (*OpenAIClient)(nil)

// NewOpenAI validates cfg, fills defaults and returns a client; it does not
// contact the server.
func NewOpenAI(cfg Config) (*OpenAIClient, error) {
	cl, err := newCaller(cfg, APIOpenAI)
	if err != nil {
		return nil, err
	}
	if cl.base.Path == "" || cl.base.Path == "/" {
		cl.base.Path = "/v1"
	}
	cl.base.Path = strings.TrimRight(cl.base.Path, "/")
	cl.missingHint = func(model string) string {
		return fmt.Sprintf("the server at %s does not serve model %q; load it there or fix --model", cl.base, model)
	}
	return &OpenAIClient{caller: cl}, nil
}

// Backend is one model server as the Pool uses it.
type Backend interface {
	Client
	BaseURL() string
	Config() Config
	ModelFor(Role) string
	// Describe asks the server what the model is (chat template, size).
	Describe(ctx context.Context, model string) (ModelInfo, error)
	// Info is Describe's answer, asked once and kept.
	Info(ctx context.Context, model string) ModelInfo
	// Notes says what the client does about the models it described.
	Notes() []string
}

// NewBackend returns the client cfg.API names.
func NewBackend(cfg Config) (Backend, error) {
	switch strings.ToLower(strings.TrimSpace(cfg.API)) {
	case "", APIOllama:
		return New(cfg)
	case APIOpenAI:
		return NewOpenAI(cfg)
	}
	return nil, fmt.Errorf("llm: unknown model server API %q (want %s or %s)", cfg.API, APIOllama, APIOpenAI)
}

type oaMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type oaChatRequest struct {
	Model          string          `json:"model"`
	Messages       []oaMessage     `json:"messages"`
	Temperature    float64         `json:"temperature"`
	MaxTokens      int             `json:"max_tokens,omitempty"`
	Stream         bool            `json:"stream"`
	StreamOptions  *oaStreamOpts   `json:"stream_options,omitempty"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	Stop           []string        `json:"stop,omitempty"`
}

type oaStreamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// oaChunk is a streamed chunk or, with Message instead of Delta, a whole
// non-streamed completion.
type oaChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Delta        oaMessage `json:"delta"`
		Message      oaMessage `json:"message"`
		FinishReason *string   `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaUsage        `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// responseFormat turns a ChatRequest's JSONSchema into response_format:
// "json" is JSON mode, an object a strict JSON schema.
func responseFormat(schema json.RawMessage) json.RawMessage {
	s := bytes.TrimSpace(schema)
	if len(s) == 0 {
		return nil
	}
	if s[0] == '"' {
		return json.RawMessage(`{"type":"json_object"}`)
	}
	b, _ := json.Marshal(map[string]any{
		"type":        "json_schema",
		"json_schema": map[string]any{"name": "answer", "schema": json.RawMessage(s), "strict": true},
	})
	return b
}

// Chat implements Client. The answer is streamed so that the size cap ends
// reading at once and a cancelled ask closes the connection mid-answer,
// which makes the server stop generating.
func (c *OpenAIClient) Chat(ctx context.Context, req ChatRequest) (ChatResponse, error) {
	model, err := c.cfg.model(req.Role, req.Model)
	if err != nil {
		return ChatResponse{}, &Error{Op: "chat", Step: req.Step, Kind: ErrNoModel, Err: err}
	}
	info := c.describeOnce(ctx, model, c.describe)
	system, messages := req.System, req.Messages
	if system != "" && info.FoldsSystem() {
		system, messages = "", foldSystem(req.System, req.Messages)
	}
	msgs := make([]oaMessage, 0, len(messages)+1)
	if system != "" {
		msgs = append(msgs, oaMessage{Role: SpeakerSystem, Content: system})
	}
	for _, m := range messages {
		msgs = append(msgs, oaMessage{Role: m.Role, Content: m.Content})
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = c.cfg.MaxTokens
	}
	oreq := oaChatRequest{
		Model: model, Messages: msgs, Temperature: req.Temperature, MaxTokens: maxTokens,
		Stream: true, StreamOptions: &oaStreamOpts{IncludeUsage: true}, Stop: req.Stop,
	}
	format := responseFormat(req.JSONSchema)

	start := time.Now()
	var out ChatResponse
	vary := false
	attempts, err := c.retry(ctx, "chat", model, req.Step, func(ctx context.Context) error {
		if vary {
			// No identical retry (see variedRetry).
			oreq.MaxTokens, oreq.Temperature = variedRetry(oreq.MaxTokens, oreq.Temperature)
		}
		out = ChatResponse{Model: model, Folded: system != req.System}
		oreq.ResponseFormat = nil
		if !c.noSchema.Load() {
			oreq.ResponseFormat = format
		}
		w := newWatcher(req.Complete, c.cfg.MaxAnswerBytes)
		err := c.chatOnce(ctx, &oreq, &out, w)
		defer func() {
			w.timings(&out)
			if out.PromptTokens == 0 && out.CompletionTokens == 0 {
				// Ended before the usage chunk: count what arrived.
				out.PromptTokens, out.CompletionTokens = estimateTokens(system, messages), w.chunks
			}
		}()
		if errors.Is(err, errStopEarly) {
			out.Content, out.DoneReason = w.text.String(), w.cut
			return nil
		}
		vary = ctx.Err() != nil || errors.Is(err, errIncomplete)
		var se api.StatusError
		if oreq.ResponseFormat != nil && errors.As(err, &se) && se.StatusCode == http.StatusBadRequest &&
			strings.Contains(strings.ToLower(se.ErrorMessage), "response_format") {
			// The server has no structured output: ask again without it.
			c.noSchema.Store(true)
			c.log.Info("server rejects response_format; JSON answers are parsed without a schema",
				zap.String("server", c.base.String()), zap.String("error", se.ErrorMessage))
			oreq.ResponseFormat = nil
			out = ChatResponse{Model: model}
			w = newWatcher(req.Complete, c.cfg.MaxAnswerBytes)
			err = c.chatOnce(ctx, &oreq, &out, w)
			if errors.Is(err, errStopEarly) {
				out.Content, out.DoneReason = w.text.String(), w.cut
				return nil
			}
		}
		return err
	})
	out.Content = restoreStop(out.Content, out.DoneReason, req.Stop)
	out, err = settleChat(c.log, req.Step, model, out, attempts, start, err)
	if err != nil {
		return out, err
	}
	return out, nil
}

// streamOverhead bounds the raw stream against the answer cap: each chunk
// wraps a token or two in about 150 bytes of JSON.
const streamOverhead = 64

// chatOnce makes one request and reads the answer into out.
func (c *OpenAIClient) chatOnce(ctx context.Context, oreq *oaChatRequest, out *ChatResponse, w *watcher) error {
	resp, err := c.post(ctx, "/chat/completions", oreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rawCap := int64(c.cfg.MaxAnswerBytes)*streamOverhead + 1<<20
	body := &capReader{r: resp.Body, left: rawCap}
	var first time.Time
	add := func(ch *oaChunk) error {
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return api.StatusError{StatusCode: http.StatusInternalServerError, ErrorMessage: redact.Credentials(errorMessage(ch.Error), c.cfg.APIKey)}
		}
		if ch.Model != "" {
			out.Model = ch.Model
		}
		if ch.Usage != nil {
			out.PromptTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
		for _, choice := range ch.Choices {
			text := choice.Delta.Content + choice.Message.Content
			if text != "" && first.IsZero() {
				first = time.Now()
			}
			if choice.FinishReason != nil && *choice.FinishReason != "" {
				out.DoneReason = *choice.FinishReason
				// No server timing in the API: first to last token.
				out.EvalDuration = time.Since(first)
			}
			if err := w.add(text); err != nil {
				return err
			}
		}
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "text/event-stream" {
		// A server that does not stream answers with one completion.
		var ch oaChunk
		if err := json.NewDecoder(body).Decode(&ch); err != nil {
			return body.wrap(err)
		}
		if err := add(&ch); err != nil {
			return err
		}
		if out.DoneReason == "" {
			return errIncomplete
		}
		out.Content = w.text.String()
		return nil
	}
	// Server-sent events: "data: {chunk}" lines, ending with "data: [DONE]".
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), c.cfg.MaxAnswerBytes+1<<20)
	done := false
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event names, keep-alives
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var ch oaChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return err
		}
		if err := add(&ch); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return errAnswerTooLong
		}
		return body.wrap(err)
	}
	if !done && out.DoneReason == "" {
		return errIncomplete
	}
	out.Content = w.text.String()
	return nil
}

type oaEmbedResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

// Embed implements Client.
func (c *OpenAIClient) Embed(ctx context.Context, model string, texts []string) ([][]float32, error) {
	model, err := c.cfg.model(RoleEmbedding, model)
	if err != nil {
		return nil, &Error{Op: "embed", Kind: ErrNoModel, Err: err}
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += c.cfg.EmbedBatch {
		batch := texts[start:min(start+c.cfg.EmbedBatch, len(texts))]
		vecs, err := embedFitting(ctx, batch, func(ctx context.Context, batch []string) ([][]float32, error) {
			return c.embedBatch(ctx, model, batch)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// embedBatch sends one /embeddings request.
func (c *OpenAIClient) embedBatch(ctx context.Context, model string, batch []string) ([][]float32, error) {
	req := map[string]any{"model": model, "input": batch, "encoding_format": "float"}
	var vecs [][]float32
	attempts, err := c.retry(ctx, "embed", model, "", func(ctx context.Context) error {
		var r oaEmbedResponse
		if err := c.getJSON(ctx, "/embeddings", req, &r); err != nil {
			return err
		}
		vecs = nil
		sort.SliceStable(r.Data, func(i, j int) bool { return r.Data[i].Index < r.Data[j].Index })
		for i, d := range r.Data {
			if d.Index != i {
				break // reported below as a count mismatch
			}
			vecs = append(vecs, d.Embedding)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(vecs) != len(batch) {
		return nil, &Error{Op: "embed", Model: model, Attempts: attempts, Kind: ErrBadOutput,
			Err: fmt.Errorf("got %d embeddings (indexed 0..n-1) for %d inputs", len(vecs), len(batch))}
	}
	return vecs, nil
}

// ListModels implements Client (GET /models).
func (c *OpenAIClient) ListModels(ctx context.Context) ([]string, error) {
	var names []string
	_, err := c.retry(ctx, "list", "", "", func(ctx context.Context) error {
		var r struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := c.getJSON(ctx, "/models", nil, &r); err != nil {
			return err
		}
		names = names[:0]
		for _, m := range r.Data {
			names = append(names, m.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// getJSON GETs path (body nil) or POSTs body to it and decodes a bounded
// JSON answer into v.
func (c *OpenAIClient) getJSON(ctx context.Context, path string, body, v any) error {
	var resp *http.Response
	var err error
	if body == nil {
		resp, err = c.do(ctx, http.MethodGet, path, nil)
	} else {
		resp, err = c.post(ctx, path, body)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Embeddings are about 20 bytes a dimension as JSON text.
	r := &capReader{r: resp.Body, left: int64(c.cfg.EmbedBatch)*(64<<10)*20 + 1<<20}
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return r.wrap(err)
	}
	return nil
}

func (c *OpenAIClient) post(ctx context.Context, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPost, path, b)
}

// do sends one request; an error status becomes api.StatusError so that
// classify treats both backends alike.
func (c *OpenAIClient) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
		return nil, api.StatusError{StatusCode: resp.StatusCode, Status: resp.Status, ErrorMessage: redact.Credentials(errorMessage(msg), c.cfg.APIKey)}
	}
	return resp, nil
}

// errorMessage pulls the message out of an OpenAI-style error body
// ({"error":{"message":…}} or {"error":"…"}), else the text itself.
func errorMessage(b []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(b, &v) == nil {
		var s string
		var o struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Error, &o) == nil && o.Message != "":
			return o.Message
		case v.Message != "":
			return v.Message
		}
	}
	var s string
	if json.Unmarshal(b, &s) == nil && s != "" {
		return s
	}
	return strings.TrimSpace(string(b))
}

// capReader fails once more than left bytes were read: a server that
// never stops sending is cut off.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.over = true
		return 0, errAnswerTooLong
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// wrap reports a decode failure caused by the cap as the cap.
func (c *capReader) wrap(err error) error {
	if c.over || errors.Is(err, errAnswerTooLong) {
		return errAnswerTooLong
	}
	return err
}

// settleChat finishes a chat call of either backend: attempts and duration
// recorded, a failure returned without a partial answer, a success logged.
func settleChat(log *zap.Logger, step, model string, out ChatResponse, attempts int, start time.Time, err error) (ChatResponse, error) {
	out.Attempts = attempts
	out.Duration = time.Since(start)
	if err != nil {
		// Tokens of a call that failed or was cut still count (trace, metrics).
		return ChatResponse{Model: model, Attempts: attempts, Duration: out.Duration,
			PromptTokens: out.PromptTokens, CompletionTokens: out.CompletionTokens, DoneReason: out.DoneReason,
			FirstChunk: out.FirstChunk, Streaming: out.Streaming}, err
	}
	log.Debug("chat",
		zap.String("step", step), zap.String("model", out.Model),
		zap.Duration("duration", out.Duration), zap.Int("attempts", attempts),
		zap.Int("prompt_tokens", out.PromptTokens), zap.Int("completion_tokens", out.CompletionTokens),
		zap.String("done_reason", out.DoneReason))
	return out, nil
}
