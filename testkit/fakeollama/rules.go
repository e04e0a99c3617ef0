package fakeollama

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// Route names as they appear in requests.
const (
	RouteChat       = "/api/chat"
	RouteGenerate   = "/api/generate"
	RouteEmbed      = "/api/embed"
	RouteEmbeddings = "/api/embeddings" // legacy single-prompt embedding route
	RouteTags       = "/api/tags"
	RouteShow       = "/api/show"
	RouteVersion    = "/api/version"
	RoutePS         = "/api/ps"
)

// Message is one chat message as the fake server saw it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatView is what rules match on: a normalized view of a /api/chat,
// /api/generate or /api/embed request.
type ChatView struct {
	Route    string
	Model    string
	System   string    // system messages (chat) or the system field (generate), joined
	Messages []Message // chat messages; generate's prompt appears as one user message
	// Prompt is every system and message text joined by newlines: the text
	// PromptContains is matched against.
	Prompt  string
	Format  json.RawMessage
	Options map[string]any
	Stream  bool
	Input   []string // embed inputs
}

// LastUser returns the content of the last user message, or "".
func (v ChatView) LastUser() string {
	for i := len(v.Messages) - 1; i >= 0; i-- {
		if v.Messages[i].Role == "user" {
			return v.Messages[i].Content
		}
	}
	return ""
}

// Question returns the question a pipeline prompt asks: the line after a
// line "Question:" in the last user message (few-shot examples, written
// "Question: …" on one line, do not count), or "".
func (v ChatView) Question() string {
	_, rest, ok := strings.Cut(v.LastUser(), "\nQuestion:\n")
	if !ok {
		if rest, ok = strings.CutPrefix(v.LastUser(), "Question:\n"); !ok {
			return ""
		}
	}
	q, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(q)
}

// QuestionContains is a Rule.Match that holds when the asked question (see
// ChatView.Question) contains s.
func QuestionContains(s string) func(ChatView) bool {
	return func(v ChatView) bool { return strings.Contains(v.Question(), s) }
}

// Fault makes a rule misbehave at the HTTP level.
type Fault int

const (
	// FaultNone answers normally.
	FaultNone Fault = iota
	// FaultGarbage answers 200 with a body that is not JSON.
	FaultGarbage
	// FaultDrop writes part of the response and then closes the connection.
	FaultDrop
	// FaultEndless streams answer chunks (the Reply, repeated) without end,
	// whatever the request's stream flag, until the client goes away: a
	// model that never stops, or a server that ignores num_predict.
	FaultEndless
	// FaultEndlessVaried streams text that never repeats itself and never
	// ends: a model that rambles on, caught only by the cap or the time.
	FaultEndlessVaried
	// FaultAbortRepetition streams the Reply and ends the stream without
	// done, as Ollama does when it aborts a model that repeats itself. A
	// non-streaming request gets the whole answer with done:false.
	FaultAbortRepetition
)

// Rule scripts one kind of answer. A rule applies when every non-zero
// condition (Route, Model, PromptContains, Match) holds and it has not been
// used up (Times).
type Rule struct {
	Name string
	// Route restricts the rule to one route; "" means /api/chat and
	// /api/generate (embedding routes need an explicit Route).
	Route string
	// Model restricts the rule to one model; ":latest" is implied when the
	// name has no tag.
	Model string
	// PromptContains: all must be substrings of ChatView.Prompt.
	PromptContains []string
	Match          func(ChatView) bool

	Reply     string
	ReplyFunc func(ChatView) string // takes precedence over Reply

	// Delay before the first byte; it ends early when the client goes away.
	Delay time.Duration
	// ChunkDelay is slept between streamed chunks.
	ChunkDelay time.Duration
	// ChunkSize is the number of runes per streamed chunk (default 8).
	ChunkSize int

	// Status, when not 0 or 200, is answered with {"error": Error}.
	Status int
	Error  string
	Fault  Fault

	// PromptTokens and EvalTokens override the computed token counts.
	PromptTokens int
	EvalTokens   int
	// PromptEvalDuration and EvalDuration override the reported (virtual)
	// times of reading the prompt and writing the answer: a slow model
	// without sleeping. Nothing waits for them.
	PromptEvalDuration time.Duration
	EvalDuration       time.Duration
	DoneReason         string // default "stop"

	// Times limits how often the rule applies; 0 means unlimited.
	Times int
}

func (r *Rule) matches(v ChatView) bool {
	switch r.Route {
	case "":
		if v.Route != RouteChat && v.Route != RouteGenerate {
			return false
		}
	default:
		if r.Route != v.Route {
			return false
		}
	}
	if r.Model != "" && llm.NormalizeModel(r.Model) != llm.NormalizeModel(v.Model) {
		return false
	}
	for _, s := range r.PromptContains {
		if !strings.Contains(v.Prompt, s) {
			return false
		}
	}
	if r.Match != nil && !r.Match(v) {
		return false
	}
	return true
}

func (r *Rule) reply(v ChatView) string {
	if r.ReplyFunc != nil {
		return r.ReplyFunc(v)
	}
	return r.Reply
}
