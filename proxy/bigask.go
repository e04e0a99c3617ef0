package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// QuestionLimiter is a Translator that bounds questions (router.Translator
// does: --max-question-bytes). The proxy then refuses a marker statement
// far over that bound while reading it, never holding it whole; the
// translator's own check stays the one that decides for every question.
type QuestionLimiter interface {
	MaxQuestion() int
}

// bigAskSlack is what a marker statement may carry beyond its question
// (marker, comment delimiters, whitespace) before the proxy refuses it
// unread.
const bigAskSlack = 4 << 10

// bigAskPrefix is how much of a long statement is looked at to tell a
// marker statement.
const bigAskPrefix = 512

// bigAskLimit is the message length over which a marker statement is
// refused unread; 0 when the translator sets no bound.
func (s *session) bigAskLimit() int {
	if l, ok := s.srv.Translator.(QuestionLimiter); ok && l.MaxQuestion() > 0 {
		return l.MaxQuestion() + bigAskSlack
	}
	return 0
}

// refuseBigAsk handles a Query or Parse of n body bytes that is longer
// than bigAskLimit: when it is a marker statement it is read past (memory
// stays bounded whatever its length) and fails at its place in the stream
// with 54000, as the translator would have failed it; handled is false for
// any other statement, which takes the normal path.
func (s *session) refuseBigAsk(typ byte, n int) (handled bool, err error) {
	hdr, err := s.cl.cr.Peek(5 + min(n, bigAskPrefix))
	if err != nil {
		return false, err
	}
	body := hdr[5:]
	name := ""
	if typ == feParse {
		var rest []byte
		var ok bool
		if name, rest, ok = cstring(body); !ok {
			return false, nil // a name longer than the prefix: not an ask of any client
		}
		body = rest
	}
	m := markerPrefix(body)
	if m.Kind == MarkerNone {
		return false, nil
	}
	limit := s.bigAskLimit() - bigAskSlack
	perr := &pg.Error{Severity: "ERROR", Code: pg.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("nlproxy: the question's statement is %d bytes, more than the question limit of %d", n, limit),
		Hint:    "Ask a shorter question; an operator can raise --max-question-bytes (NLPROXY_MAX_QUESTION_BYTES)."}
	start := time.Now()
	tail, err := s.skipBigAsk(typ, n)
	if err != nil {
		return true, err
	}
	if s.srv.OnAsk != nil {
		s.reportAsk(m, start, &Translation{}, perr)
	}
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		// The server fails the COPY on any Query or Parse: send it one.
		if typ == feQuery {
			return true, s.passMarker(feQuery, queryMsg(sentinelSQL))
		}
		return true, s.passMarker(feParse, parseMsg(name, sentinelSQL, tail))
	}
	if err != nil || !ok {
		return true, err
	}
	if typ == feQuery {
		return true, s.failQuery(perr)
	}
	return true, s.failParse(name, tail, perr)
}

// skipBigAsk reads past a Query or Parse of n body bytes; tail is a Parse's
// parameter types.
func (s *session) skipBigAsk(typ byte, n int) (tail []byte, err error) {
	if typ == feQuery {
		_, err := s.cl.cr.Discard(5 + n)
		return nil, err
	}
	tail, err = discardParse(s.cl.cr, n)
	if errors.Is(err, ErrProtocol) {
		return nil, s.fatal(pg.CodeProtocolViolation, "nlproxy: %v", err)
	}
	return tail, err
}

// markerPrefix tells a marker statement from the first bytes of its text:
// the marker's question (what it says of it) is the prefix seen.
func markerPrefix(b []byte) Marker {
	text := asciiOnly(string(b)) // the marker keywords are ASCII
	if m := ParseMarker(text); m.Kind != MarkerNone {
		return m
	}
	return ParseMarker(text + " */") // a comment form whose end was not seen
}

// discardParse reads past a Parse of n body bytes (the header peeked, not
// consumed) and returns its parameter-type tail.
func discardParse(r *bufio.Reader, n int) (tail []byte, err error) {
	if _, err := r.Discard(5); err != nil {
		return nil, err
	}
	left := n
	for nuls := 0; nuls < 2; { // the statement name, then the query text
		chunk, err := r.ReadSlice(0)
		left -= len(chunk)
		if left < 0 {
			return nil, fmt.Errorf("%w: malformed Parse", ErrProtocol)
		}
		switch {
		case err == nil:
			nuls++
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			return nil, err
		}
	}
	// int16 count and one int32 type per parameter: at most 2+4*65535.
	if left < 2 || left > 2+4*65535 {
		return nil, fmt.Errorf("%w: malformed Parse", ErrProtocol)
	}
	tail = make([]byte, left)
	_, err = io.ReadFull(r, tail)
	return tail, err
}
