package llm

import (
	"errors"
	"strings"
	"time"
)

// Why a streamed answer was ended by the client (ChatResponse.DoneReason).
const (
	// DoneComplete: the answer held what was asked (ChatRequest.Complete).
	DoneComplete = "complete"
	// DoneRepetition: the model started writing the same text over.
	DoneRepetition = "repetition"
	// DoneLength is the servers' reason for an answer cut at the cap.
	DoneLength = "length"
)

// errStopEarly ends reading a stream the client has seen enough of.
var errStopEarly = errors.New("answer complete")

// watcher follows a streamed answer: its text, how many chunks (about one
// token each) arrived, and whether to stop reading.
type watcher struct {
	complete func(string) bool
	max      int // answer byte cap
	text     strings.Builder
	chunks   int
	cut      string // DoneComplete or DoneRepetition once stopped
	checked  int    // text length at the last repetition check
	// When the request went out, the first piece and the latest arrived:
	// the client's own measure of reading the prompt and of writing, for
	// an answer the server gave no timings of (a stream the client ended).
	start, first, last time.Time
}

func newWatcher(complete func(string) bool, maxBytes int) *watcher {
	return &watcher{complete: complete, max: maxBytes, start: time.Now()}
}

// timings fills the client-side durations of out from what arrived.
func (w *watcher) timings(out *ChatResponse) {
	if w.first.IsZero() {
		out.FirstChunk, out.Streaming = 0, 0
		return
	}
	out.FirstChunk, out.Streaming = w.first.Sub(w.start), w.last.Sub(w.first)
}

// add takes one piece; it returns errStopEarly when the answer is complete
// or repeating, errAnswerTooLong past the byte cap.
func (w *watcher) add(piece string) error {
	if piece == "" {
		return nil
	}
	if w.text.Len()+len(piece) > w.max {
		return errAnswerTooLong
	}
	w.text.WriteString(piece)
	w.chunks++
	w.last = time.Now()
	if w.first.IsZero() {
		w.first = w.last
	}
	// Checks run where a statement or a JSON value can end, and the
	// repetition check every 64 bytes: parsing on every token would cost
	// more than it saves.
	if w.complete != nil && strings.ContainsAny(piece, "`;}\n") && w.complete(w.text.String()) {
		w.cut = DoneComplete
		return errStopEarly
	}
	if n := w.text.Len(); n-w.checked >= 64 {
		w.checked = n
		if Repeating(w.text.String()) {
			w.cut = DoneRepetition
			return errStopEarly
		}
	}
	return nil
}

// Repeating reports whether text ends in a loop: its last 64 bytes already
// occurred twice before. Small models under greedy decoding fall into such
// loops and would write them until the cap.
func Repeating(text string) bool {
	const tail = 64
	if len(text) < 4*tail {
		return false
	}
	t := text[len(text)-tail:]
	if strings.TrimSpace(t) == "" {
		return true // endless whitespace
	}
	return strings.Count(text, t) >= 3
}

// estimateTokens is the prompt's size when the server gave no count (a
// stream the client ended): about 4 bytes a token.
func estimateTokens(system string, msgs []Message) int {
	n := len(system)
	for _, m := range msgs {
		n += len(m.Content)
	}
	return (n + 3) / 4
}

// restoreStop puts back what a stop sequence took from a finished answer:
// servers end generation at a stop sequence and leave it out of the text,
// so a stop holding a code fence took the fence that closed the answer.
// The answer is complete again for the parsers (an odd number of fences
// means the last one is open); a stop of blank lines takes nothing a
// parser needs.
func restoreStop(content, doneReason string, stops []string) string {
	if doneReason != "stop" || strings.Count(content, "```")%2 == 0 {
		return content
	}
	for _, s := range stops {
		if strings.Contains(s, "```") {
			c := strings.TrimRight(content, " \t")
			if !strings.HasSuffix(c, "\n") {
				c += "\n"
			}
			return c + "```"
		}
	}
	return content
}
