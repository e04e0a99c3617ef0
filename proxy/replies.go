package proxy

import (
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// While an ask is in play the session is "tracked": every message the proxy
// sends upstream — the client's own and the proxy's (trial runs, read-only
// scopes, placeholders for replies the proxy makes itself) — is queued with
// what to do with its replies, and the server loop attributes each reply to
// the head of that queue. This one queue replaces the three mechanisms the
// relay had (error rewrites, swallowed command tags, executor capture).

// replyAct says what happens to the replies to one message sent upstream.
type replyAct uint8

const (
	// actRelay: replies go to the client as they are.
	actRelay replyAct = iota
	// actRelayBody: as actRelay, but the ReadyForQuery is the proxy's (the
	// client's Query goes on with an ask; see askQueryAfter).
	actRelayBody
	// actDrop: the proxy's own statement; replies are dropped, errors go to
	// the sink if there is one, else to the client.
	actDrop
	// actCapture: replies go to the sink (an executor's trial run).
	actCapture
	// actSynth: a placeholder (Close of a statement that never exists) whose
	// one reply is replaced by synth, so proxy-made replies keep their
	// place in the stream and are skipped after an error like the server's.
	actSynth
	// actSpool: the rows of a row-limited ask's run go to a spool (see
	// spool.go); errors go to the client.
	actSpool
)

// expect is one message sent upstream and what to do with its replies.
type expect struct {
	msg   byte // frontend message type: P B D E C S Q F
	act   replyAct
	synth []byte
	// synthFn, when set, makes synth when the reply arrives (a spooled
	// portion: its rows are known only then).
	synthFn func() []byte
	sink    *sink
	spool   *rowSpool
	// sentinel replaces the server's error to the sentinel statement that
	// stands in for a failed marker statement.
	sentinel *PgError
}

// ends reports whether backend message typ completes the replies to a
// frontend message msg (ErrorResponse is handled apart).
func ends(msg, typ byte) bool {
	switch msg {
	case 'P':
		return typ == '1'
	case 'B':
		return typ == '2'
	case 'C':
		return typ == '3'
	case 'D':
		return typ == 'T' || typ == 'n'
	case 'E':
		return typ == 'C' || typ == 's' || typ == 'I'
	case 'S', 'Q', 'F':
		return typ == 'Z'
	}
	return false
}

// replyQueue is the FIFO of expectations. The client goroutine appends
// before it writes the message; the server goroutine consumes.
type replyQueue struct {
	mu sync.Mutex
	q  []expect
}

func (r *replyQueue) push(es ...expect) {
	r.mu.Lock()
	r.q = append(r.q, es...)
	r.mu.Unlock()
}

func (r *replyQueue) head() (expect, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) == 0 {
		return expect{}, false
	}
	return r.q[0], true
}

func (r *replyQueue) pop() {
	r.mu.Lock()
	r.q = r.q[1:]
	if len(r.q) == 0 {
		r.q = nil
	}
	r.mu.Unlock()
}

// skipToSync drops the expectations of messages the server skipped after
// an error in an extended-protocol batch (everything up to the Sync).
func (r *replyQueue) skipToSync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.q) > 0 && r.q[0].msg != 'S' {
		r.q = r.q[1:]
	}
}

func (r *replyQueue) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q) == 0
}

// maxInspected bounds a message the proxy reads whole to look inside
// (errors, notices, parameter status, row descriptions it captures).
const maxInspected = 1 << 20

// trackedReply handles one upstream message in tracked mode; stop reports
// that the session was closed.
func (s *session) trackedReply(typ byte, n int) (stop bool, err error) {
	switch typ {
	case 'S':
		return false, s.relayParameterStatus(n)
	case 'A':
		return false, relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	case 'N':
		if h, ok := s.replies.head(); ok && h.act != actRelay && h.act != actRelayBody {
			_, err := s.sv.ur.Discard(5 + n) // a notice about the proxy's own statement
			return false, err
		}
		return false, relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	}
	if s.sv.skipping && typ == 'Z' {
		s.replies.skipToSync()
		s.sv.skipping = false
	}
	h, ok := s.replies.head()
	if !ok {
		return false, fmt.Errorf("%w: unexpected message %q from upstream", ErrProtocol, typ)
	}
	if typ == 'E' {
		return false, s.trackedError(h, n)
	}
	if typ == 'Z' {
		if !ends(h.msg, 'Z') {
			return false, fmt.Errorf("%w: ReadyForQuery while waiting for the reply to %q", ErrProtocol, h.msg)
		}
		status, err := s.readStatus(n)
		if err != nil {
			return false, err
		}
		s.replies.pop()
		drain := s.noteReady(status)
		if h.sink != nil {
			h.sink.finish(status)
		}
		switch h.act {
		case actDrop, actCapture, actRelayBody:
			return false, nil
		case actSynth: // a reply of the proxy's to a Query (see synthQuery)
			if _, err := s.cw.Write(h.synth); err != nil {
				return false, err
			}
		}
		if _, err := s.cw.Write([]byte{'Z', 0, 0, 0, 5, status}); err != nil {
			return false, err
		}
		if drain {
			_, _ = s.cw.Write(encodeError(shutdownError()))
			_ = s.cw.Flush()
			s.close()
			return true, nil
		}
		return false, nil
	}
	if typ == 'G' || typ == 'W' {
		s.sh.noteCopyIn(true)
	}
	switch h.act {
	case actRelay, actRelayBody:
		if typ == 'C' && n <= 256 {
			if b, err := s.sv.ur.Peek(5 + n); err == nil {
				if s.srv.watchTags() {
					s.noteTag(b[5:])
				}
				s.noteDiscard(b[5:])
			}
		}
		if err := relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush); err != nil {
			return false, err
		}
	case actDrop, actSynth:
		if _, err := s.sv.ur.Discard(5 + n); err != nil {
			return false, err
		}
		if h.act == actSynth && ends(h.msg, typ) {
			synth := h.synth
			if h.synthFn != nil {
				synth = h.synthFn()
			}
			if _, err := s.cw.Write(synth); err != nil {
				return false, err
			}
		}
	case actCapture:
		if err := s.capture(h.sink, typ, n); err != nil {
			return false, err
		}
	case actSpool:
		if err := s.spoolReply(h.spool, typ, n); err != nil {
			return false, err
		}
	}
	if ends(h.msg, typ) {
		s.replies.pop()
	}
	return false, nil
}

func (s *session) readStatus(n int) (byte, error) {
	b, err := s.sv.ur.Peek(6)
	if err != nil || n != 1 {
		return 0, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol)
	}
	status := b[5]
	_, _ = s.sv.ur.Discard(6)
	return status, nil
}

// trackedError handles an ErrorResponse: it goes to the sink, is replaced
// (sentinel), or is relayed; then, in an extended-protocol batch, the
// server skips everything up to Sync and so does the queue.
func (s *session) trackedError(h expect, n int) error {
	s.sv.errInUnit = true
	body, err := s.readBounded(n)
	if err != nil {
		return err
	}
	if fatalSeverity(body) {
		s.sv.upstreamFatal = true
	}
	switch {
	case h.sink != nil:
		h.sink.fail(pgErrorFromBody(body))
	case h.sentinel != nil && isSentinelError(body):
		if _, err := s.cw.Write(encodeError(s.clientText(h.sentinel))); err != nil {
			return err
		}
	default:
		if _, err := s.cw.Write(appendMsg(nil, 'E', body)); err != nil {
			return err
		}
	}
	switch h.msg {
	case 'S', 'Q', 'F':
		// A simple Query, FunctionCall or the Sync itself: ReadyForQuery follows.
	default:
		s.replies.pop()
		s.sv.skipping = true
	}
	return nil
}

// readBounded reads a message body the proxy must inspect; an oversized one
// (a server error quoting a huge value) is cut down, never held whole.
func (s *session) readBounded(n int) ([]byte, error) {
	if n <= maxInspected {
		_, body, err := readFrame(s.sv.ur, maxInspected)
		return body, err
	}
	b, err := s.sv.ur.Peek(5 + min(n, s.sv.ur.Size()-5))
	if err != nil && len(b) < 5 {
		return nil, err
	}
	pe := pgErrorFromBody(b[5:]) // may be incomplete: fields cut off are lost
	if _, err := s.sv.ur.Discard(5 + n); err != nil {
		return nil, err
	}
	if pe.Code == "" || pe.Code == pg.CodeInternalError {
		pe = &PgError{Severity: "ERROR", Code: pg.CodeProgramLimitExceeded, Message: "nlproxy: the server's error message was too large to pass on"}
	}
	out, _ := (&pgproto3.ErrorResponse{Severity: pe.Severity, SeverityUnlocalized: pe.Severity, Code: pe.Code, Message: truncate(pe.Message, 1024)}).Encode(nil)
	return out[5:], nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func isSentinelError(body []byte) bool {
	pe := pgErrorFromBody(body)
	return pe.Code == pg.CodeSyntaxError && strings.Contains(pe.Message, sentinelSQL)
}

// noteDiscard forgets the proxy's prepared ask statements when the client
// drops every prepared statement at once (they are gone upstream too).
func (s *session) noteDiscard(tag []byte) {
	switch strings.TrimRight(string(tag), "\x00") {
	case "DISCARD ALL":
		s.sig.discarded.Store(discardAll)
	case "DEALLOCATE ALL":
		s.sig.discarded.CompareAndSwap(0, deallocateAll)
	}
}

// Values of sideSignals.discarded.
const (
	deallocateAll = 1 + iota
	discardAll
)

// sink collects the replies of one trial run.
type sink struct {
	lim      pg.Limits
	rows     pg.Rows
	size     int
	tooLarge bool
	err      *PgError
	status   byte
	done     chan struct{}
}

func newSink(lim pg.Limits) *sink { return &sink{lim: lim, done: make(chan struct{})} }

func (k *sink) fail(e *PgError) {
	if k.err == nil {
		k.err = e
	}
}

func (k *sink) finish(status byte) {
	k.status = status
	close(k.done)
}

// capture hands one reply of a trial run's statement to its sink, keeping
// at most lim.MaxRows rows and lim.MaxBytes bytes of row data: a larger row
// is skipped in the read buffer without being held.
func (s *session) capture(k *sink, typ byte, n int) error {
	switch typ {
	case 'D':
		if k.tooLarge || (k.lim.MaxRows > 0 && len(k.rows.Values) >= k.lim.MaxRows) {
			_, err := s.sv.ur.Discard(5 + n)
			return err
		}
		if k.lim.MaxBytes > 0 && k.size+n > k.lim.MaxBytes {
			k.tooLarge = true
			_, err := s.sv.ur.Discard(5 + n)
			return err
		}
		k.size += n
		_, body, err := readFrame(s.sv.ur, 0)
		if err != nil {
			return err
		}
		var dr pgproto3.DataRow
		if err := dr.Decode(body); err != nil {
			return fmt.Errorf("%w: bad DataRow: %v", ErrProtocol, err)
		}
		row := make([]*string, len(dr.Values))
		for i, v := range dr.Values {
			if v != nil {
				str := string(v)
				row[i] = &str
			}
		}
		k.rows.Values = append(k.rows.Values, row)
		return nil
	case 'T':
		_, body, err := readFrame(s.sv.ur, maxInspected)
		if err != nil {
			return err
		}
		var rd pgproto3.RowDescription
		if err := rd.Decode(body); err != nil {
			return fmt.Errorf("%w: bad RowDescription: %v", ErrProtocol, err)
		}
		k.rows.Columns = make([]string, len(rd.Fields))
		k.rows.Types = make([]uint32, len(rd.Fields))
		for i, fd := range rd.Fields {
			k.rows.Columns[i] = string(fd.Name)
			k.rows.Types[i] = fd.DataTypeOID
		}
		return nil
	case 'C':
		_, body, err := readFrame(s.sv.ur, maxInspected)
		if err != nil {
			return err
		}
		k.rows.Tag = strings.TrimRight(string(body), "\x00")
		return nil
	case 's':
		k.rows.Truncated = true
	}
	_, err := s.sv.ur.Discard(5 + n)
	return err
}
