package realmodel_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// TestRealModelTemplates: the setup's chat model has a chat template that
// places system messages, and the same weights imported with no template
// (a base model) are folded: the system text reaches the model either way,
// as the server's own prompt token counts show.
func TestRealModelTemplates(t *testing.T) {
	host, model, _, _ := env(t)
	base := os.Getenv("NLPROXY_REAL_BASE_MODEL")
	if base == "" {
		needs.Missing(t, "NLPROXY_REAL_BASE_MODEL unset: the setup imported no template-less model")
	}
	c, err := llm.New(llm.Config{Host: host, NumCtx: numCtx, CallTimeout: 2 * time.Minute, MaxRetries: -1, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	const system = "You write PostgreSQL queries. Use only the tables given. Answer with one SELECT statement in a sql code block."
	user := []llm.Message{{Role: llm.SpeakerUser, Content: "How many customers?"}}
	for _, tc := range []struct {
		model string
		fold  bool
	}{{model, false}, {base, true}} {
		t.Run(tc.model, func(t *testing.T) {
			info, err := c.Describe(t.Context(), tc.model)
			if err != nil {
				t.Fatal(err)
			}
			if info.FoldsSystem() != tc.fold {
				t.Fatalf("%s: %+v, want folds=%v", tc.model, info, tc.fold)
			}
			alone, err := c.Chat(t.Context(), llm.ChatRequest{Model: tc.model, Messages: user, MaxTokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			both, err := c.Chat(t.Context(), llm.ChatRequest{Model: tc.model, System: system, Messages: user, MaxTokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			if both.Folded != tc.fold {
				t.Errorf("folded = %v, want %v", both.Folded, tc.fold)
			}
			// The system text is ~25 tokens: it must show in the count.
			if both.PromptTokens < alone.PromptTokens+15 {
				t.Errorf("prompt tokens with the system text %d, without %d: the system text did not reach the model", both.PromptTokens, alone.PromptTokens)
			}
		})
	}
}
