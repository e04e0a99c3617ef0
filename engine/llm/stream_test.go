package llm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/poll"
)

// transcript is what the server received and what the client made of it:
// the golden form of one chat call.
func transcript(srv *fakeollama.Server, resp llm.ChatResponse, err error) string {
	var b strings.Builder
	for i, r := range srv.RequestsTo(fakeollama.RouteChat) {
		fmt.Fprintf(&b, "=== request %d: model %s, stream %v, num_predict %v, temperature %v\n", i+1, r.Model, r.Stream, r.Options["num_predict"], r.Options["temperature"])
		if stop, ok := r.Options["stop"]; ok {
			fmt.Fprintf(&b, "=== stop %q\n", stop)
		}
		for _, m := range r.Messages {
			fmt.Fprintf(&b, "--- %s\n%s\n", m.Role, m.Content)
		}
	}
	fmt.Fprintf(&b, "=== answer: done_reason %q, folded %v, %d completion tokens, error %v\n%s\n",
		resp.DoneReason, resp.Folded, resp.CompletionTokens, err, resp.Content)
	return b.String()
}

// checkTranscript compares with testdata/transcripts/<name>.golden (this
// package's -update rewrites it).
func checkTranscript(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "transcripts", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if string(want) != got {
		t.Errorf("transcript %s differs from %s:\n%s", name, path, got)
	}
}

func systemAsk(system, user string) llm.ChatRequest {
	return llm.ChatRequest{System: system, Messages: []llm.Message{{Role: llm.SpeakerUser, Content: user}}}
}

// TestChatFoldsSystemForTemplatelessModel: a model whose template is
// `{{ .Prompt }}` (a base model imported from a bare GGUF) would never see
// a system message; the client asks /api/show once, folds the system text
// into the user message, and says so once in the log and in Notes. A model
// with a chat template gets the system message as it is.
func TestChatFoldsSystemForTemplatelessModel(t *testing.T) {
	const base, chat = "base-270m", "chat-135m"
	srv := fakeollama.New(t, fakeollama.Options{
		Models:    []string{base, chat},
		Templates: map[string]string{base: fakeollama.NoTemplate},
		Default:   &fakeollama.Rule{Name: "any", Reply: "```sql\nSELECT 1\n```"},
	})
	core, logs := observer.New(zapcore.WarnLevel)
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.Logger = zap.New(core) })
	for _, tc := range []struct{ name, model string }{{"notemplate", base}, {"chatml", chat}} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Reset()
			req := systemAsk("You write PostgreSQL. Only SELECT.", "How many users?")
			req.Model = tc.model
			resp, err := c.Chat(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			checkTranscript(t, tc.name, transcript(srv, resp, err))
			// A second call is folded the same way without asking again.
			if _, err := c.Chat(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if n := len(srv.RequestsTo(fakeollama.RouteShow)); n != 1 {
				t.Errorf("%d /api/show requests, want 1 per model", n)
			}
		})
	}
	if n := logs.FilterMessageSnippet("no chat template").Len(); n != 1 {
		t.Errorf("the fold was logged %d times, want once", n)
	}
	notes := c.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], base) || !strings.Contains(notes[0], "folded") {
		t.Errorf("notes = %q, want one naming %s", notes, base)
	}
	info, err := c.Describe(t.Context(), chat)
	if err != nil || info.FoldsSystem() || !info.HasTemplate || info.Params() != 7.6e9 {
		t.Errorf("describe %s = %+v, %v", chat, info, err)
	}
}

// TestChatStopsEarly: a streamed answer is read only until Complete holds
// (the rest of a chain of thought is never waited for) or until the model
// repeats itself; the chunks read count as its completion tokens.
func TestChatStopsEarly(t *testing.T) {
	closedFence := func(s string) bool {
		_, after, ok := strings.Cut(s, "```sql")
		return ok && strings.Contains(after, "```")
	}
	for _, tc := range []struct {
		name     string
		rule     fakeollama.Rule
		complete func(string) bool
		reason   string
	}{
		// A model that goes on writing after its query, without end.
		{"complete", fakeollama.Rule{Name: "cot", Reply: "1. count users -> count(*)\n```sql\nSELECT count(*) FROM users\n```\nCheck: the table exists.\n", Fault: fakeollama.FaultEndless}, closedFence, llm.DoneComplete},
		// A model caught in a loop that never writes a query.
		{"repetition", fakeollama.Rule{Name: "loop", Reply: "Check: users -> count(*) is right.\n", Fault: fakeollama.FaultEndless}, closedFence, llm.DoneRepetition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, tc.rule)
			c := newClient(t, srv, nil)
			req := systemAsk("Write SQL.", "How many users?")
			req.Complete = tc.complete
			resp, err := c.Chat(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.DoneReason != tc.reason || resp.CompletionTokens == 0 || resp.PromptTokens == 0 || len(resp.Content) > 4096 {
				t.Fatalf("done %q, %d+%d tokens, %d bytes; want %s with tokens counted", resp.DoneReason, resp.PromptTokens, resp.CompletionTokens, len(resp.Content), tc.reason)
			}
			if n := len(srv.RequestsTo(fakeollama.RouteChat)); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if tc.name == "complete" {
				checkTranscript(t, "earlystop", transcript(srv, resp, err))
			}
		})
	}
}

// TestChatStopSequences: a step's stop sequences reach the server, which
// ends the answer there and leaves the sequence out (the fake does as
// Ollama does); the client puts back a closing fence the stop took, so the
// answer is whole for the parsers.
func TestChatStopSequences(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		stop        []string
		want        string // the answer's content
		sql         string // what ChatSQL makes of it ("" for JSON)
	}{
		{"fenced sql", "1. count users -> count(*)\n```sql\nSELECT count(*) FROM users\n```\n\nThis query counts the users.\n```sql\nSELECT 2\n```",
			[]string{"```\n\n"}, "1. count users -> count(*)\n```sql\nSELECT count(*) FROM users\n```", "SELECT count(*) FROM users"},
		{"json", "{\"keywords\": [\"users\"], \"entities\": []}\n\nThe keywords are users.", []string{"\n\n"},
			"{\"keywords\": [\"users\"], \"entities\": []}", ""},
		// The fenced steps' stops: a fence alone on its line ends the
		// answer even when prose follows on the next line.
		{"fence then prose", "1. count users -> count(*)\n```sql\nSELECT count(*) FROM users\n```\nThis query counts the users.\n",
			[]string{"\n```\n", "```\n\n"}, "1. count users -> count(*)\n```sql\nSELECT count(*) FROM users\n```", "SELECT count(*) FROM users"},
		// The model stopped by itself: nothing to put back.
		{"no stop met", "```sql\nSELECT 1\n```", []string{"```\n\n"}, "```sql\nSELECT 1\n```", "SELECT 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, fakeollama.Rule{Name: "stop", Reply: tc.reply})
			c := newClient(t, srv, nil)
			req := systemAsk("Write SQL.", "How many users?")
			req.Stop = tc.stop
			resp, err := c.Chat(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Content != tc.want {
				t.Fatalf("content %q, want %q", resp.Content, tc.want)
			}
			got := srv.RequestsTo(fakeollama.RouteChat)[0].Options["stop"]
			if fmt.Sprint(got) != fmt.Sprint(tc.stop) {
				t.Errorf("stop sent %v, want %v", got, tc.stop)
			}
			if tc.sql != "" {
				srv.Reset()
				sql, _, err := llm.ChatSQL(t.Context(), c, req)
				if err != nil || sql != tc.sql {
					t.Errorf("ChatSQL = %q, %v; want %q", sql, err, tc.sql)
				}
			}
			if tc.name == "fenced sql" {
				srv.Reset()
				resp, err := c.Chat(t.Context(), req)
				checkTranscript(t, "stop", transcript(srv, resp, err))
			}
		})
	}
}

// TestChatRetryDiffers: a deterministic request that timed out, or that the
// server aborted for repetition (a stream without done), is never sent
// again unchanged: each retry halves the cap and warms the temperature.
func TestChatRetryDiffers(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule fakeollama.Rule
		mod  func(*llm.Config)
		kind error
	}{
		{"aborted for repetition", fakeollama.Rule{Name: "abort", Reply: "SELECT SELECT SELECT", Fault: fakeollama.FaultAbortRepetition}, nil, llm.ErrServer},
		{"timed out", fakeollama.Rule{Name: "slow", Reply: "SELECT 1", Delay: time.Hour}, func(c *llm.Config) { c.CallTimeout = 20 * time.Millisecond }, llm.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, tc.rule)
			c := newClient(t, srv, tc.mod)
			req := systemAsk("Write SQL.", "How many users?")
			req.MaxTokens = 400
			_, err := c.Chat(context.Background(), req)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			reqs := srv.RequestsTo(fakeollama.RouteChat)
			if len(reqs) != 1+llm.DefaultMaxRetries {
				t.Fatalf("%d requests, want %d", len(reqs), 1+llm.DefaultMaxRetries)
			}
			seen := map[string]bool{}
			for _, r := range reqs {
				k := fmt.Sprint(r.Options["num_predict"], "/", r.Options["temperature"])
				if seen[k] {
					t.Errorf("request with num_predict/temperature %s sent twice", k)
				}
				seen[k] = true
			}
			if first := reqs[0].Options; first["num_predict"] != float64(400) || first["temperature"] != float64(0) {
				t.Errorf("first request %v, want the caller's cap and temperature", first)
			}
		})
	}
}

// TestRepeating: the loop detector fires on text that ends in a repeated
// stretch, not on long text that merely reuses words.
func TestRepeating(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{strings.Repeat("Check: ok.\n", 40), true},
		{strings.Repeat(" ", 400), true},
		{"short", false},
		{strings.Repeat("x", 100), false},
		{func() string {
			var b strings.Builder
			for i := range 60 {
				fmt.Fprintf(&b, "%d. SELECT count(*) FROM t%d;\n", i, i)
			}
			return b.String()
		}(), false},
	} {
		if got := llm.Repeating(tc.text); got != tc.want {
			t.Errorf("Repeating(%.40q…) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestChatDrainsWhatItStops: an answer the client no longer needs (complete
// early, or its caller gone) is read to its end in the background, never
// closed while tokens flow. Ollama v0.17.4 keeps one of the model's slots
// for good when a client closes a stream mid-answer, and the fake does the
// same: with one slot, had any stream been closed, every later call would
// wait until its deadline.
func TestChatDrainsWhatItStops(t *testing.T) {
	var tail strings.Builder
	for i := range 80 {
		fmt.Fprintf(&tail, "Note %d: the count includes row %d.\n", i, i*7)
	}
	reply := "```sql\nSELECT count(*) FROM users\n```\n" + tail.String()
	srv := fakeollama.New(t, fakeollama.Options{
		Models: []string{genModel, smallModel},
		Slots:  1,
		// A pause between chunks, so the fake sees a client that closes
		// mid-answer, as Ollama's handler does.
		Rules: []fakeollama.Rule{{Name: "cot", Reply: reply, ChunkDelay: time.Millisecond}},
	})
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.MaxRetries = -1 })
	closedFence := func(s string) bool {
		_, after, ok := strings.Cut(s, "```sql")
		return ok && strings.Contains(after, "```")
	}
	for i := range 3 {
		// Each call is bounded only so that a wedged fake fails the test
		// instead of hanging it.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		req := systemAsk("Write SQL.", "How many users?")
		req.Complete = closedFence
		resp, err := c.Chat(ctx, req)
		cancel()
		if err != nil || resp.DoneReason != llm.DoneComplete {
			t.Fatalf("complete %d: %v, done %q; want the answer stopped complete", i, err, resp.DoneReason)
		}

		ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
		req.Complete = func(s string) bool {
			if strings.Contains(s, "SELECT") {
				cancel() // the ask gave up mid-answer
			}
			return false
		}
		_, err = c.Chat(ctx, req)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("gone %d: %v; want the caller's cancel", i, err)
		}
	}
	poll.Until(t, "the drained answers end", func() bool { return srv.Answering() == 0 })
	if n := srv.Leaked(); n != 0 {
		t.Errorf("%d streams closed mid-answer; want every one drained", n)
	}
	if n := len(srv.RequestsTo(fakeollama.RouteChat)); n != 6 {
		t.Errorf("%d requests, want 6 (no retries)", n)
	}
}

// TestChatDrainIsBounded: a server that ignores num_predict and streams
// without end is drained only a little past the output cap, then closed.
// The drain's time limit is set beyond the wait's, so only the cap can end
// it in time.
func TestChatDrainIsBounded(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "endless", Reply: "```sql\nSELECT 1\n```\nmore ", Fault: fakeollama.FaultEndlessVaried})
	c := newClient(t, srv, nil)
	llm.SetDrainLimit(c, 10*poll.Bound)
	req := systemAsk("Write SQL.", "How many users?")
	req.MaxTokens = 32
	req.Complete = func(s string) bool { return strings.Contains(s, "SELECT 1\n```") }
	resp, err := c.Chat(t.Context(), req)
	if err != nil || resp.DoneReason != llm.DoneComplete {
		t.Fatalf("%v, done %q; want the answer stopped complete", err, resp.DoneReason)
	}
	poll.Until(t, "the endless stream is closed", func() bool { return srv.Answering() == 0 })
}
