// Package llm is the engine's access to a local language model: a Client
// interface (implemented for Ollama by OllamaClient and for OpenAI-compatible
// servers by OpenAIClient), typed errors, a
// startup model check, and defensive parsing of small models' output
// (ExtractSQL, ExtractJSON, ChatJSON).
package llm

import (
	"context"
	"encoding/json"
	"time"
)

// Client talks to a model server. Implementations are safe for concurrent use.
type Client interface {
	// Chat runs one non-streaming chat completion.
	Chat(ctx context.Context, req ChatRequest) (ChatResponse, error)
	// Embed returns one vector per text, in order. An empty model means the
	// configured embedding model.
	Embed(ctx context.Context, model string, texts []string) ([][]float32, error)
	// ListModels returns the installed model names (e.g. "qwen2.5:3b").
	ListModels(ctx context.Context) ([]string, error)
}

// Role names a configured model by what the pipeline uses it for.
type Role string

// Model roles.
const (
	RoleGenerator Role = "generator" // SQL generation, fixing, selection
	RoleSmall     Role = "small"     // cheap steps: keywords, routing
	RoleEmbedding Role = "embedding" // vectors for retrieval (optional)
)

// Message speaker roles, as Ollama names them.
const (
	SpeakerSystem    = "system"
	SpeakerUser      = "user"
	SpeakerAssistant = "assistant"
)

// Message is one chat turn. Role is one of the Speaker* constants.
type Message struct {
	Role    string
	Content string
}

// ChatRequest is one chat call.
type ChatRequest struct {
	// Role picks the configured model when Model is empty (default generator).
	Role  Role
	Model string
	// System is sent as a leading system message when non-empty.
	System   string
	Messages []Message
	// Temperature is always sent, so 0 means deterministic decoding.
	Temperature float64
	// JSONSchema becomes Ollama's `format`: a JSON schema object, or the
	// JSON string "json" for free-form JSON.
	JSONSchema json.RawMessage
	// NumCtx overrides Config.NumCtx for this call when > 0.
	NumCtx int
	// MaxTokens bounds the completion (Ollama num_predict) when > 0.
	MaxTokens int
	// Complete, when set, is asked as the answer streams in; once it holds
	// the client stops reading (the server stops generating) and the
	// answer so far is the answer, DoneReason DoneComplete.
	Complete func(content string) bool `json:"-"`
	// Stop sequences end generation on servers that support them.
	Stop []string
	// Step names the pipeline step for logs and traces only; it is never
	// sent to the model.
	Step string
}

// ChatResponse is the model's answer and its cost.
type ChatResponse struct {
	Content          string
	Model            string
	PromptTokens     int
	CompletionTokens int
	// Duration is the wall time of the call, retries included.
	Duration time.Duration
	// DoneReason is Ollama's done_reason ("stop", "length", ...), or why
	// the client ended the stream (DoneComplete, DoneRepetition).
	DoneReason string
	// EvalDuration is the server's time generating the completion (0 when
	// it did not say): CompletionTokens/EvalDuration is the model's speed.
	EvalDuration time.Duration
	// PromptDuration is the server's time reading the prompt (0 unknown).
	PromptDuration time.Duration
	// FirstChunk is the client's time from the request to the answer's
	// first piece (reading the prompt, and any wait, included), Streaming
	// from the first piece to the last: the speeds of an answer the server
	// gave no timings of. 0 when nothing arrived.
	FirstChunk, Streaming time.Duration
	// Folded: the system text went inside the user message (the model has
	// no chat template that places it).
	Folded bool
	// Attempts is the number of HTTP requests made (retries and ChatJSON
	// repairs included).
	Attempts int
}
