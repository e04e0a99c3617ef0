package proxy

import (
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// The reply queue: while an ask is in play every message sent upstream is
// queued with what to do with its replies (replies.go attributes each reply
// to the head of the queue); a trial run's replies go to a sink, a
// row-limited ask's rows to a spool (spool.go).

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
	sentinel *pg.Error
}

// ends reports whether backend message typ completes the replies to a
// frontend message msg (ErrorResponse is handled apart).
func ends(msg, typ byte) bool {
	switch msg {
	case feParse:
		return typ == beParseComplete
	case feBind:
		return typ == beBindComplete
	case feClose:
		return typ == beCloseComplete
	case feDescribe:
		return typ == beRowDescription || typ == beNoData
	case feExecute:
		return typ == beCommandComplete || typ == bePortalSuspended || typ == beEmptyQueryResponse
	case feSync, feQuery, feFunctionCall:
		return typ == beReadyForQuery
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
	for len(r.q) > 0 && r.q[0].msg != feSync {
		r.q = r.q[1:]
	}
}

func (r *replyQueue) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q) == 0
}

// sink collects the replies of one trial run.
type sink struct {
	lim      pg.Limits
	rows     pg.Rows
	size     int
	tooLarge bool
	err      *pg.Error
	status   byte
	done     chan struct{}
}

func newSink(lim pg.Limits) *sink { return &sink{lim: lim, done: make(chan struct{})} }

func (k *sink) fail(e *pg.Error) {
	if k.err == nil {
		k.err = e
	}
}

func (k *sink) finish(status byte) {
	k.status = status
	close(k.done)
}

// rowSpool holds one spooled portal's rows. The server goroutine fills it
// (spoolReply) and answers Executes from it (portion), in reply order; the
// client goroutine only makes it.
type rowSpool struct {
	rows     [][]byte // whole DataRow messages, not yet sent
	size     int
	tooLarge bool
}

// portion is the reply to one Execute: up to maxRows rows (0: all left),
// then PortalSuspended while rows remain, else the SELECT tag of the rows
// this Execute sent, as Postgres tags a resumed portal.
func (sp *rowSpool) portion(maxRows int) []byte {
	if sp.tooLarge {
		sp.rows = nil
		return encodeError(spoolTooLarge())
	}
	n := len(sp.rows)
	if maxRows > 0 && maxRows < n {
		n = maxRows
	}
	var out []byte
	for _, r := range sp.rows[:n] {
		out = append(out, r...)
	}
	clear(sp.rows[:n]) // sent rows are not held
	sp.rows = sp.rows[n:]
	if len(sp.rows) > 0 {
		return append(out, mustEncode(&pgproto3.PortalSuspended{})...)
	}
	return append(out, mustEncode(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "SELECT %d", n)})...)
}

func spoolTooLarge() *pg.Error {
	return &pg.Error{Severity: "ERROR", Code: pg.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("nlproxy: the answer's rows exceed %d MiB, the most a row-limited fetch inside a transaction block may hold", maxSpoolBytes>>20),
		Hint:    "Fetch the answer without a row limit (no fetch size), outside a transaction block, or ask for fewer rows."}
}

// maxSpoolBytes bounds the row data one spooled portal holds: rows beyond
// it are not kept, and the Execute that would have sent them fails (54000).
const maxSpoolBytes = 32 << 20
