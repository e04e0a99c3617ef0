package llm

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/nlproxy/nlproxy/internal/redact"
)

// Error kinds, checked with errors.Is. Every error returned by this package's
// calls is an *Error whose Kind is one of these (or a context error when the
// caller's ctx ended).
var (
	// ErrUnreachable: the server could not be connected to (refused, DNS).
	ErrUnreachable = errors.New("llm: model server unreachable")
	// ErrModelMissing: the model is not installed on the server.
	ErrModelMissing = errors.New("llm: model not installed")
	// ErrTimeout: one call ran past Config.CallTimeout.
	ErrTimeout = errors.New("llm: call timed out")
	// ErrBadOutput: the response or the model's text could not be parsed.
	ErrBadOutput = errors.New("llm: unparseable model output")
	// ErrServer: the server answered with an error status or broke off the
	// response.
	ErrServer = errors.New("llm: model server error")
	// ErrNoModel: no model was given and none is configured for the role.
	ErrNoModel = errors.New("llm: no model configured")
	// ErrUnanswerable: the model said the data cannot answer the question
	// (a line "UNANSWERABLE: <what is missing>" instead of SQL). Not retried.
	ErrUnanswerable = errors.New("llm: the model says the data cannot answer the question")
)

// UnanswerablePrefix starts the line a generator writes instead of SQL when
// the schema holds nothing that answers the question.
const UnanswerablePrefix = "UNANSWERABLE:"

// Unanswerable returns the reason after UnanswerablePrefix when the answer
// (outside any code block) declares the question unanswerable.
func Unanswerable(text string) (string, bool) {
	inFence := false
	for _, line := range strings.Split(StripThink(text), "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
			continue
		}
		l = strings.TrimLeft(l, "-*#> ")
		if !inFence && len(l) >= len(UnanswerablePrefix) && strings.EqualFold(l[:len(UnanswerablePrefix)], UnanswerablePrefix) {
			return strings.TrimSpace(l[len(UnanswerablePrefix):]), true
		}
	}
	return "", false
}

// Error describes a failed call. errors.Is matches both Kind and the cause.
type Error struct {
	Op         string // "chat", "embed", "list", "check"
	Model      string
	Step       string
	Attempts   int
	StatusCode int    // HTTP status when the server answered, else 0
	Hint       string // what the operator should do, e.g. "run `ollama pull x`"
	// Limit is the per-call timeout a call of Kind ErrTimeout ran past.
	Limit time.Duration
	Kind  error
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("llm ")
	b.WriteString(e.Op)
	if e.Model != "" {
		fmt.Fprintf(&b, " %s", e.Model)
	}
	if e.Step != "" {
		fmt.Fprintf(&b, " (step %s)", e.Step)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Kind.Error(), "llm: "))
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap exposes both the kind sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func pullHint(model string) string {
	return fmt.Sprintf("run `ollama pull %s`, or name a model the server has with --model (NLPROXY_MODEL)", model)
}

// scrub removes credentials from what a server answered with before the
// error is logged or reaches anyone: a server (or a proxy in front of it)
// that echoes the request's Authorization header in its error body would
// otherwise put the API key into the log and the client's error.
func scrub(err error, apiKey string) error {
	var se api.StatusError
	if errors.As(err, &se) {
		se.Status = redact.Credentials(se.Status, apiKey)
		se.ErrorMessage = redact.Credentials(se.ErrorMessage, apiKey)
		return se
	}
	var ae api.AuthorizationError
	if errors.As(err, &ae) {
		ae.Status = redact.Credentials(ae.Status, apiKey)
		ae.SigninURL = redact.Credentials(ae.SigninURL, apiKey)
		return ae
	}
	if s := err.Error(); redact.Credentials(s, apiKey) != s {
		// Transport errors quote URLs; keep the kind, not the text.
		return &scrubbed{msg: redact.Credentials(s, apiKey), err: err}
	}
	return err
}

// scrubbed is an error whose text had credentials removed; errors.Is and
// errors.As still see the cause (classify needs its type).
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
