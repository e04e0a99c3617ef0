package router

import (
	"context"
	"errors"
	"testing"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// TestAskAllNotConfigured: ask(all): without a multi-database asker is a
// clear 0A000, not the single-database engine with an unknown profile.
func TestAskAllNotConfigured(t *testing.T) {
	for _, kind := range []proxy.MarkerKind{proxy.MarkerAsk, proxy.MarkerAskSQL} {
		_, err := Translator{}.Translate(context.Background(), proxy.TranslateRequest{Marker: proxy.Marker{Kind: kind, Question: "q", Profile: ProfileAll}})
		var pe *pg.Error
		if !errors.As(err, &pe) || pe.Code != "0A000" {
			t.Errorf("%v: %v, want 0A000", kind, err)
		}
	}
}
