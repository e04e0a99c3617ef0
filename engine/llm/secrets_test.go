package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// TestErrorBodiesAreScrubbed: a model server (or a proxy before it) that
// echoes the request's Authorization header in its error body puts the API
// key neither into the log nor into the error the caller gets.
func TestErrorBodiesAreScrubbed(t *testing.T) {
	const key = "sk-local-9d8c7b6a5f4e"
	for _, api := range []string{llm.APIOpenAI, llm.APIOllama} {
		for _, status := range []int{http.StatusUnauthorized, http.StatusBadGateway} {
			t.Run(api+"/"+http.StatusText(status), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					auth := r.Header.Get("Authorization")
					if auth == "" { // Ollama's client sends none: the echo is a reverse proxy's
						auth = "Bearer " + key
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					_, _ = io.WriteString(w, `{"error":{"message":"rejected request with header Authorization: `+auth+`; api_key=`+key+`"}}`)
				}))
				defer srv.Close()
				core, logs := observer.New(zapcore.DebugLevel)
				c, err := llm.NewBackend(llm.Config{API: api, APIKey: key, Host: srv.URL,
					Models: map[llm.Role]string{llm.RoleGenerator: "m"}, MaxRetries: 1, RetryBackoff: 1, Logger: zap.New(core)})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "hi"}}})
				if err == nil {
					t.Fatal("the call succeeded against a failing server")
				}
				var le *llm.Error
				if !errors.As(err, &le) || le.StatusCode != status {
					t.Errorf("err = %v, want an llm.Error with status %d", err, status)
				}
				var seen strings.Builder
				seen.WriteString(err.Error())
				for _, e := range logs.All() {
					seen.WriteString(e.Message)
					for k, v := range e.ContextMap() {
						seen.WriteString(k)
						seen.WriteString(" ")
						seen.WriteString(toString(v))
					}
				}
				if strings.Contains(seen.String(), key) {
					t.Errorf("the API key reached the log or the error: %s", seen.String())
				}
				if !strings.Contains(err.Error(), "rejected request") {
					t.Errorf("the server's message was lost, not scrubbed: %v", err)
				}
			})
		}
	}
}

func toString(v any) string { return fmt.Sprint(v) }

// TestHostCredentialsRefused: a model server URL with user information is
// refused with a clear error that does not print the password.
func TestHostCredentialsRefused(t *testing.T) {
	const password = "Pa55-W0rd-kept"
	for _, host := range []string{
		"http://alice:" + password + "@models.internal:11434",
		"https://alice:" + password + "@models.internal/v1",
		"alice:" + password + "@models.internal",
	} {
		_, err := llm.ParseHost(host)
		if !errors.Is(err, llm.ErrCredentialsInURL) {
			t.Errorf("ParseHost(%q) = %v, want ErrCredentialsInURL", host, err)
			continue
		}
		if strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), "models.internal") {
			t.Errorf("ParseHost(%q): %v: must name the host without the password", host, err)
		}
		_, err = llm.NewPool(llm.Config{Models: map[llm.Role]string{llm.RoleGenerator: "m"}}, []string{"http://127.0.0.1:1", host}, nil)
		if err == nil || strings.Contains(err.Error(), password) {
			t.Errorf("NewPool with %q: %v", host, err)
		}
	}
}
