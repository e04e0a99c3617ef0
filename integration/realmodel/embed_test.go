package realmodel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// TestRealEmbedTooLongForContext: text longer than the embedding model's
// context, with non-ASCII punctuation, which the real Ollama refuses (400
// "the input length exceeds the context length") instead of truncating,
// still gets a vector each, through both APIs; a short text beside it is
// embedded unchanged.
func TestRealEmbedTooLongForContext(t *testing.T) {
	host, _, embed, _ := env(t)
	if embed == "" {
		needs.Missing(t, "no real embedding model (NLPROXY_REAL_EMBED_MODEL unset: its import failed)")
	}
	long := strings.Repeat("Mark’s Bistro — café; crème brûlée, ", 120) // far past 512 tokens
	short := "restaurants in San Francisco"
	for _, api := range []string{llm.APIOllama, llm.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			c, err := llm.NewPool(llm.Config{Host: host, API: api, Models: map[llm.Role]string{llm.RoleEmbedding: embed},
				CallTimeout: 5 * time.Minute, MaxRetries: -1, Logger: zap.NewNop()}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			vecs, err := c.Embed(ctx, "", []string{long, short})
			if err != nil {
				t.Fatalf("embed: %v", err)
			}
			alone, err := c.Embed(ctx, "", []string{short})
			if err != nil {
				t.Fatalf("embed: %v", err)
			}
			if len(vecs) != 2 || len(vecs[0]) == 0 || len(vecs[1]) != len(alone[0]) {
				t.Fatalf("vectors: %d, dims %d/%d", len(vecs), len(vecs[0]), len(vecs[1]))
			}
			// The short text was sent as it was: the same vector as alone
			// (to float rounding of a batched pass).
			for i := range alone[0] {
				if d := vecs[1][i] - alone[0][i]; d > 1e-3 || d < -1e-3 {
					t.Fatalf("short text's vector differs at %d: %v vs %v", i, vecs[1][i], alone[0][i])
				}
			}
		})
	}
}
