package realmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// TestRealOpenAIEndpoint drives the OpenAI-compatible client against the
// real Ollama's own /v1 API: model list, a streamed completion with usage
// counts, JSON mode, embeddings, and a missing model.
func TestRealOpenAIEndpoint(t *testing.T) {
	host, model, embed, _ := env(t)
	c, err := llm.NewOpenAI(llm.Config{
		Host:        host,
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleEmbedding: embed},
		MaxTokens:   8,
		CallTimeout: 5 * time.Minute,
		MaxRetries:  -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	models, err := c.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(models, llm.NormalizeModel(model)) && !slices.Contains(models, model) {
		t.Fatalf("models %v lack %s", models, model)
	}
	if err := llm.CheckModels(ctx, c, c.Config()); err != nil {
		t.Fatalf("CheckModels: %v", err)
	}

	resp, err := c.Chat(ctx, llm.ChatRequest{Messages: []llm.Message{{Role: llm.SpeakerUser, Content: "Write SQL counting rows of table t."}}})
	if err != nil {
		t.Fatal(err)
	}
	// Usage comes from the server's final stream chunk; the answer is cut
	// at max_tokens or ends on its own.
	if resp.PromptTokens <= 0 || resp.CompletionTokens <= 0 || resp.CompletionTokens > 8 ||
		(resp.DoneReason != "stop" && resp.DoneReason != "length") {
		t.Fatalf("chat = %+v", resp)
	}
	t.Logf("real /v1 answer (%d+%d tokens, %s): %q", resp.PromptTokens, resp.CompletionTokens, resp.DoneReason, resp.Content)

	// JSON mode through response_format.
	var v any
	jr, err := c.Chat(ctx, llm.ChatRequest{JSONSchema: json.RawMessage(`"json"`), MaxTokens: 12,
		Messages: []llm.Message{{Role: llm.SpeakerUser, Content: `Answer in JSON with key "n": how many legs has a cat?`}}})
	if err != nil {
		t.Fatal(err)
	}
	if jr.DoneReason == "stop" {
		if err := json.Unmarshal([]byte(jr.Content), &v); err != nil {
			t.Fatalf("JSON mode answer is not JSON: %q", jr.Content)
		}
	}
	t.Logf("JSON mode answer (%s): %q", jr.DoneReason, jr.Content)

	if embed != "" {
		vecs, err := c.Embed(ctx, "", []string{"customers", "clients", "weather"})
		if err != nil {
			t.Fatal(err)
		}
		if len(vecs) != 3 || len(vecs[0]) != 384 {
			t.Fatalf("got %d vectors of %d dims, want 3 of 384", len(vecs), len(vecs[0]))
		}
		// Sanity of order, not quality: identical input, identical vector.
		again, err := c.Embed(ctx, "", []string{"weather"})
		if err != nil {
			t.Fatal(err)
		}
		if cos(vecs[2], again[0]) < 0.999 {
			t.Fatalf("the same text embedded twice differs (cos %.4f): order mixed up?", cos(vecs[2], again[0]))
		}
	}

	_, err = c.Chat(ctx, llm.ChatRequest{Model: "nlproxy-no-such-model", Messages: []llm.Message{{Role: llm.SpeakerUser, Content: "hi"}}})
	if !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("missing model: %v, want ErrModelMissing", err)
	}
}

func cos(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}
