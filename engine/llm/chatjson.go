package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// maxRepairs bounds the corrective re-asks after unparseable output.
const maxRepairs = 1

// formatJSON is Ollama's free-form JSON mode, used when no schema is given.
var formatJSON = json.RawMessage(`"json"`)

// ChatJSON asks for JSON (req.JSONSchema as Ollama's format, free-form JSON
// when empty), parses the answer into v with ExtractJSON and, when that
// fails, re-asks once with the bad answer and a corrective message. Token
// counts, duration and attempts in the response cover every call. It fails
// with ErrBadOutput when the answer still does not parse.
func ChatJSON(ctx context.Context, client Client, req ChatRequest, v any) (ChatResponse, error) {
	if len(req.JSONSchema) == 0 {
		req.JSONSchema = formatJSON
	}
	return chatParse(ctx, client, req, func(content string) error { return ExtractJSON(content, v) },
		func(err error) string {
			msg := "Your previous reply could not be parsed as JSON (" + parseReason(err) + "). " +
				"Reply again with only the JSON value, no prose and no code fences."
			if string(req.JSONSchema) != string(formatJSON) {
				msg += " It must match this JSON schema: " + string(req.JSONSchema)
			}
			return msg
		})
}

// ChatSQL asks for SQL and extracts it with ExtractSQL, re-asking once with a
// corrective message when no statement can be found. An answer that declares
// the question unanswerable (see Unanswerable) fails with ErrUnanswerable,
// the reason in the error, without a re-ask.
func ChatSQL(ctx context.Context, client Client, req ChatRequest) (string, ChatResponse, error) {
	var sql string
	resp, err := chatParse(ctx, client, req, func(content string) error {
		if reason, ok := Unanswerable(content); ok {
			return &Error{Op: "chat", Step: req.Step, Kind: ErrUnanswerable, Err: errors.New(reason)}
		}
		var err error
		sql, err = ExtractSQL(content)
		return err
	}, func(error) string {
		return "Your previous reply did not contain a SQL query. Reply with exactly one PostgreSQL " +
			"SELECT statement in a ```sql code block and nothing else."
	})
	return sql, resp, err
}

func chatParse(ctx context.Context, client Client, req ChatRequest, parse func(string) error, corrective func(error) string) (ChatResponse, error) {
	var total ChatResponse
	msgs := append([]Message(nil), req.Messages...)
	for repair := 0; ; repair++ {
		req.Messages = msgs
		resp, err := client.Chat(ctx, req)
		total.Model = resp.Model
		total.PromptTokens += resp.PromptTokens
		total.CompletionTokens += resp.CompletionTokens
		total.Duration += resp.Duration
		total.Attempts += resp.Attempts
		total.DoneReason = resp.DoneReason
		total.Content = resp.Content
		if err != nil {
			return total, err
		}
		perr := parse(resp.Content)
		if perr == nil {
			return total, nil
		}
		if errors.Is(perr, ErrUnanswerable) {
			return total, perr
		}
		if repair >= maxRepairs {
			return total, &Error{Op: "chat", Model: resp.Model, Step: req.Step, Attempts: total.Attempts,
				Kind: ErrBadOutput, Err: fmt.Errorf("after %d corrective re-ask(s): %w", maxRepairs, cause(perr))}
		}
		msgs = append(msgs,
			Message{Role: SpeakerAssistant, Content: resp.Content},
			Message{Role: SpeakerUser, Content: corrective(perr)})
	}
}

// cause unwraps an extraction *Error to its cause (which quotes the output).
func cause(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err
	}
	return err
}

// parseReason is the cause of a parse failure without the echoed output.
func parseReason(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		if inner := errors.Unwrap(e.Err); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}
