package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"
	"go.uber.org/zap"
)

// ModelInfo is what the server says about a model, asked once per model at
// start-up or first use: whether it has a chat template and whether that
// template places system messages. A base model imported with
// `TEMPLATE {{ .Prompt }}` has neither: Ollama then drops every system
// message without a word, so the client folds the system text into the user
// message instead.
type ModelInfo struct {
	Model string
	// Known: the server answered; the other fields mean something.
	Known bool
	// HasTemplate: the model has a chat template (or the server applies
	// its own, as OpenAI-compatible servers do).
	HasTemplate bool
	// UsesSystem: the template places system messages.
	UsesSystem bool
	// ParameterSize as the server reports it ("135M", "7.6B"); "" unknown.
	ParameterSize string
}

// FoldsSystem: system text must travel inside the user message.
func (i ModelInfo) FoldsSystem() bool { return i.Known && (!i.HasTemplate || !i.UsesSystem) }

// Params is ParameterSize as a number of parameters, 0 when unknown.
func (i ModelInfo) Params() float64 {
	s := strings.TrimSpace(strings.ToUpper(i.ParameterSize))
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "B"):
		mult, s = 1e9, strings.TrimSuffix(s, "B")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "K"):
		mult, s = 1e3, strings.TrimSuffix(s, "K")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return f * mult
}

// Note says, for the log and /readyz, what the client does about the model;
// "" when nothing needs saying.
func (i ModelInfo) Note() string {
	switch {
	case !i.FoldsSystem():
		return ""
	case !i.HasTemplate:
		return fmt.Sprintf("model %s has no chat template: the system prompt is folded into the user message", i.Model)
	default:
		return fmt.Sprintf("model %s's chat template ignores system messages: the system prompt is folded into the user message", i.Model)
	}
}

// templateInfo reads an Ollama template: "{{ .Prompt }}" alone (or nothing)
// is no chat template; a template that names neither .System nor .Messages
// never shows a system message.
func templateInfo(t string) (has, system bool) {
	s := strings.Join(strings.Fields(t), "")
	has = s != "" && s != "{{.Prompt}}" && s != "{{-.Prompt-}}" && s != "{{.Prompt-}}" && s != "{{-.Prompt}}"
	system = strings.Contains(s, ".System") || strings.Contains(s, ".Messages")
	return has, system
}

// modelInfos caches ModelInfo per model for one client, and remembers which
// notes were logged, so each is said once.
type modelInfos struct {
	mu     sync.Mutex
	m      map[string]ModelInfo
	logged map[string]bool
	failed map[string]time.Time // when the server last could not say
}

// describeRetry: after the server could not describe a model, calls go
// without asking again for this long (a server without /api/show would
// otherwise cost every call an extra request).
const describeRetry = time.Minute

// describeTimeout bounds one description request.
const describeTimeout = 10 * time.Second

func (c *caller) cachedInfo(model string) (ModelInfo, bool) {
	c.infos.mu.Lock()
	defer c.infos.mu.Unlock()
	i, ok := c.infos.m[model]
	return i, ok
}

// remember stores what the server said and logs the model's note once.
func (c *caller) remember(i ModelInfo) {
	c.infos.mu.Lock()
	if c.infos.m == nil {
		c.infos.m, c.infos.logged = map[string]ModelInfo{}, map[string]bool{}
	}
	c.infos.m[i.Model] = i
	first := !c.infos.logged[i.Model]
	c.infos.logged[i.Model] = true
	c.infos.mu.Unlock()
	if n := i.Note(); n != "" && first {
		c.log.Warn(n, zap.String("server", c.base.String()), zap.String("model", i.Model))
	}
}

// Notes lists what the client does about the models it has described
// (folded system prompts), for /readyz.
func (c *caller) Notes() []string {
	c.infos.mu.Lock()
	defer c.infos.mu.Unlock()
	var out []string
	for _, i := range c.infos.m {
		if n := i.Note(); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// describeOnce returns the model's info, asking the server on first use. A
// server that cannot say is asked again next time; meanwhile messages go
// as they are.
func (c *caller) describeOnce(ctx context.Context, model string, ask func(context.Context, string) (ModelInfo, error)) ModelInfo {
	if i, ok := c.cachedInfo(model); ok {
		return i
	}
	c.infos.mu.Lock()
	recent := time.Since(c.infos.failed[model]) < describeRetry
	c.infos.mu.Unlock()
	if recent {
		return ModelInfo{Model: model}
	}
	dctx, cancel := context.WithTimeout(ctx, min(describeTimeout, c.cfg.CallTimeout))
	defer cancel()
	i, err := ask(dctx, model)
	if err != nil {
		c.log.Debug("model description unavailable", zap.String("model", model), zap.Error(err))
		c.infos.mu.Lock()
		if c.infos.failed == nil {
			c.infos.failed = map[string]time.Time{}
		}
		c.infos.failed[model] = time.Now()
		c.infos.mu.Unlock()
		return ModelInfo{Model: model}
	}
	c.remember(i)
	return i
}

// Describe implements Backend: Ollama's /api/show.
func (c *OllamaClient) Describe(ctx context.Context, model string) (ModelInfo, error) {
	i, err := c.show(ctx, model)
	if err == nil {
		c.remember(i)
	}
	return i, err
}

func (c *OllamaClient) show(ctx context.Context, model string) (ModelInfo, error) {
	// One request, no retries: a model that cannot be described is used
	// as it is, and asked about again later (describeRetry).
	resp, err := c.api.Show(ctx, &api.ShowRequest{Model: model})
	if err != nil {
		e := classify(scrub(err, c.cfg.APIKey), errors.Is(ctx.Err(), context.DeadlineExceeded))
		e.Op, e.Model = "show", model
		return ModelInfo{Model: model}, e
	}
	i := ModelInfo{Model: model, Known: true, ParameterSize: resp.Details.ParameterSize}
	i.HasTemplate, i.UsesSystem = templateInfo(resp.Template)
	if resp.Renderer != "" {
		// A built-in renderer formats the messages, system included.
		i.HasTemplate, i.UsesSystem = true, true
	}
	return i, nil
}

// Describe implements Backend: the model listing (/v1/models) says whether
// the server has the model; llama.cpp's server also says at /props whether
// it has a chat template. Other servers apply their own template, so the
// model is taken to have one.
func (c *OpenAIClient) Describe(ctx context.Context, model string) (ModelInfo, error) {
	i, err := c.describe(ctx, model)
	if err == nil {
		c.remember(i)
	}
	return i, err
}

func (c *OpenAIClient) describe(ctx context.Context, model string) (ModelInfo, error) {
	names, err := c.ListModels(ctx)
	if err != nil {
		return ModelInfo{Model: model}, err
	}
	i := ModelInfo{Model: model, Known: true, HasTemplate: true, UsesSystem: true}
	found := false
	for _, n := range names {
		found = found || n == model
	}
	if !found {
		return ModelInfo{Model: model}, &Error{Op: "describe", Model: model, Kind: ErrModelMissing,
			Err: fmt.Errorf("not in the server's model list"), Hint: c.missingHint(model)}
	}
	// llama.cpp: GET /props at the server's root holds "chat_template".
	root := *c.base
	root.Path = strings.TrimSuffix(root.Path, "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, root.JoinPath("props").String(), nil)
	if err != nil {
		return i, nil
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return i, nil
	}
	defer resp.Body.Close()
	var props struct {
		ChatTemplate *string `json:"chat_template"`
	}
	if resp.StatusCode == http.StatusOK && json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&props) == nil &&
		props.ChatTemplate != nil && strings.TrimSpace(*props.ChatTemplate) == "" {
		i.HasTemplate, i.UsesSystem = false, false
	}
	return i, nil
}

// foldSystem puts the system text at the head of the first user message,
// for a model whose template would drop it.
func foldSystem(system string, msgs []Message) []Message {
	out := append([]Message(nil), msgs...)
	for k, m := range out {
		if m.Role == SpeakerUser {
			out[k].Content = system + "\n\n" + m.Content
			return out
		}
	}
	return append([]Message{{Role: SpeakerUser, Content: system}}, out...)
}

// Info is what the server said about model, asking it on first use.
func (c *OllamaClient) Info(ctx context.Context, model string) ModelInfo {
	return c.describeOnce(ctx, model, c.show)
}

// Info is what the server said about model, asking it on first use.
func (c *OpenAIClient) Info(ctx context.Context, model string) ModelInfo {
	return c.describeOnce(ctx, model, c.describe)
}
