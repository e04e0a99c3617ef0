package llm

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Defaults.
const (
	DefaultHost        = "http://127.0.0.1:11434"
	DefaultNumCtx      = 8192
	DefaultCallTimeout = 60 * time.Second
	// DefaultMaxTokens is num_predict when a call sets none: generation
	// answers with reasoning fit easily; an endless one stops.
	DefaultMaxTokens = 4096
	// DefaultMaxAnswerBytes caps the text kept of one answer (about 16
	// tokens per 64 bytes: far above DefaultMaxTokens).
	DefaultMaxAnswerBytes = 256 << 10
	DefaultMaxRetries     = 2
	DefaultRetryBackoff   = 200 * time.Millisecond
	defaultOllamaPort     = "11434"
)

// Model server APIs (Config.API).
const (
	APIOllama = "ollama" // Ollama's native /api/chat, /api/embed, /api/tags
	// APIOpenAI is the OpenAI-compatible API that llama.cpp's server, vLLM,
	// LM Studio, LocalAI and Ollama itself serve under /v1.
	APIOpenAI = "openai"
)

// Config configures an OllamaClient or an OpenAIClient.
type Config struct {
	// API is APIOllama (default) or APIOpenAI; NewBackend picks the client.
	API string
	// APIKey, when set, is sent as a bearer token (OpenAI-compatible servers
	// started with an API key).
	APIKey string
	// Host of the Ollama server, in any form OLLAMA_HOST accepts:
	// "http://h:p", "h:p", "h", ":p", "0.0.0.0:11434", "[::1]:11434".
	// Empty means $OLLAMA_HOST, else DefaultHost. For APIOpenAI the path
	// is the API's base ("http://h:8080/v1"); without one, /v1.
	Host string
	// Models per role; an empty model for a role makes calls for it fail
	// with ErrNoModel.
	Models map[Role]string
	// NumCtx is sent on every chat call (Ollama silently truncates prompts
	// to its own, small default otherwise). Default DefaultNumCtx.
	NumCtx int
	// CallTimeout bounds each HTTP request. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxTokens is num_predict for calls that set none. Default DefaultMaxTokens.
	MaxTokens int
	// MaxAnswerBytes caps one answer's text; a longer one fails with
	// ErrBadOutput and is not retried. Default DefaultMaxAnswerBytes.
	MaxAnswerBytes int
	// MaxRetries is how often one call is retried after a transport error,
	// a 5xx, a broken response or a timeout. Default DefaultMaxRetries;
	// negative means no retries.
	MaxRetries int
	// RetryBackoff is the first wait between attempts; it doubles each time.
	RetryBackoff time.Duration
	// KeepAlive is how long Ollama keeps the model loaded after a call
	// (0: server default; negative: forever).
	KeepAlive time.Duration
	// Think, when set, is sent as Ollama's "think" flag: false keeps
	// reasoning models (qwen3, deepseek-r1) from spending tokens on thinking.
	Think *bool
	// EmbedBatch is the most texts per /api/embed request (default 64).
	EmbedBatch int
	HTTPClient *http.Client
	Logger     *zap.Logger
	// Getenv reads OLLAMA_HOST when Host is empty (default os.Getenv).
	Getenv func(string) string
}

// ParseHost turns an OLLAMA_HOST-style value into a base URL, the way
// Ollama's client does: scheme defaults to http, port to 11434 without a
// scheme (80/443 with one), host to 127.0.0.1. A wildcard bind address
// (0.0.0.0, ::) is dialed as loopback.
func ParseHost(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		s = DefaultHost
	}
	defaultPort := defaultOllamaPort
	scheme, hostport, ok := strings.Cut(s, "://")
	switch {
	case !ok:
		scheme, hostport = "http", s
	case scheme == "http":
		defaultPort = "80"
	case scheme == "https":
		defaultPort = "443"
	default:
		return nil, fmt.Errorf("llm: ollama host %q: unsupported scheme %q", DisplayHost(s), scheme)
	}
	hostport, path, _ := strings.Cut(hostport, "/")
	if strings.Contains(hostport, "@") {
		return nil, fmt.Errorf("llm: model server %s: %w", DisplayHost(s), ErrCredentialsInURL)
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: the whole thing is a host (maybe a bracketed IPv6).
		host, port = strings.Trim(hostport, "[]"), defaultPort
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	if port == "" {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("llm: ollama host %q: invalid port %q", DisplayHost(s), port)
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}
	if path != "" {
		u.Path = "/" + path
	}
	return u, nil
}

// ErrCredentialsInURL: a model server URL with user information
// (http://user:password@host). The URL is printed in logs, /metrics and
// /readyz, and a flag shows in the process list, so a password there would
// leak; nlproxy refuses it rather than print or send it.
var ErrCredentialsInURL = errors.New("credentials in the URL are not supported (they would show in logs, metrics and the process list); " +
	"give a bearer token with --llm-api-key-file or NLPROXY_LLM_API_KEY, or let a reverse proxy on the model server's side add them")

// DisplayHost is a model server address as messages may print it: any user
// information (user:password@) is left out.
func DisplayHost(s string) string {
	s = strings.TrimSpace(s)
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	hostport, path, hasPath := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostport, '@'); i >= 0 {
		hostport = hostport[i+1:]
	}
	out := hostport
	if ok {
		out = scheme + "://" + out
	}
	if hasPath {
		out += "/" + path
	}
	return out
}

// model resolves the model for a request.
func (c *Config) model(role Role, explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if role == "" {
		role = RoleGenerator
	}
	if m := c.Models[role]; m != "" {
		return m, nil
	}
	return "", fmt.Errorf("none for role %q (set Config.Models[%q])", role, role)
}
