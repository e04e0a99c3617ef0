package proxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// shared is the part of a session's state that more than one goroutine
// reads and writes: the client side, the server side, a translation's
// executor, Shutdown and cancel requests. Every field is under mu and is
// reached only through the methods below, each of which takes mu; cond
// (on mu) wakes a client side waiting for the server to be idle.
type shared struct {
	mu   sync.Mutex
	cond *sync.Cond

	// Set during the handshake.
	upConn     net.Conn // upstream (plain or TLS), for close; the event loop swaps it
	realPID    uint32   // the backend's own cancel key, never shown to the client
	realSecret []byte
	key        string // the proxy's cancel key, registered with the Server
	acquired   bool   // holds a connection slot of the Server's
	ready      bool   // the handshake's ReadyForQuery has been seen

	// The session's end.
	closing     bool
	draining    bool   // Shutdown: end once idle
	loopDrain   func() // set while an event loop relays: asks it to end the session if idle
	connsClosed bool   // close has closed the connections it found

	// The server's progress, for asks that must know the transaction state.
	unitsSent          uint64 // Query/Sync/FunctionCall sent upstream (each yields one ReadyForQuery)
	unitsDone          uint64 // ReadyForQuery received
	txStatus           byte
	lastActive         time.Time
	lastUnitFailed     bool // the unit the last ReadyForQuery ended had an error
	copyIn             bool // the server waits for COPY data from the client
	clientEncoding     string
	nonStandardStrings bool   // standard_conforming_strings = off // from ParameterStatus
	xacts              uint64 // returns to idle, for metrics

	translating bool
	cancelTr    context.CancelFunc
}

// init readies a new session's state: idle until the server says otherwise.
func (sh *shared) init() {
	sh.cond = sync.NewCond(&sh.mu)
	sh.txStatus = txIdle
}

// ---- handshake ----

func (sh *shared) setAcquired() {
	sh.mu.Lock()
	sh.acquired = true
	sh.mu.Unlock()
}

// setUpstream records the upstream connection; closing reports that the
// session was closed meanwhile (the caller closes up).
func (sh *shared) setUpstream(up net.Conn) (closing bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.upConn = up
	return sh.closing
}

// setBackendKey records the backend's cancel key and the proxy's key for
// it; closing as in setUpstream.
func (sh *shared) setBackendKey(pid uint32, secret []byte, key string) (closing bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.realPID, sh.realSecret, sh.key = pid, append([]byte(nil), secret...), key
	return sh.closing
}

// backendKey is the backend's own cancel key (secret nil before it is known).
func (sh *shared) backendKey() (pid uint32, secret []byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.realPID, sh.realSecret
}

// setReady records the handshake's ReadyForQuery.
func (sh *shared) setReady(status byte) {
	sh.mu.Lock()
	sh.txStatus = status
	sh.ready = true
	sh.lastActive = time.Now()
	sh.mu.Unlock()
}

// sharedStatus is what the Server's session listing shows.
type sharedStatus struct {
	ready, translating bool
	pid                uint32
	tx                 byte
}

func (sh *shared) status() sharedStatus {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sharedStatus{ready: sh.ready, translating: sh.translating, pid: sh.realPID, tx: sh.txStatus}
}

// ---- the server's progress ----

// sent counts a message that the server answers with one ReadyForQuery.
func (sh *shared) sent() {
	sh.mu.Lock()
	sh.unitsSent++
	sh.mu.Unlock()
}

// noteReady records a ReadyForQuery that ends a unit in which failed says
// whether an error came; it reports whether the session should now be
// closed because the server is draining.
func (sh *shared) noteReady(status byte, failed bool) (drain bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.txStatus = status
	sh.copyIn = false
	sh.lastUnitFailed = failed
	if status == txIdle {
		sh.xacts++
	}
	if sh.unitsDone < sh.unitsSent {
		sh.unitsDone++
	}
	sh.lastActive = time.Now()
	idle := sh.unitsDone == sh.unitsSent
	if idle {
		sh.cond.Broadcast()
	}
	return sh.draining && idle && status == txIdle && !sh.translating
}

// noteCopyIn records that the server waits for COPY data; an ask waiting
// for the server to become idle must stop waiting.
func (sh *shared) noteCopyIn(on bool) {
	sh.mu.Lock()
	sh.copyIn = on
	sh.cond.Broadcast()
	sh.mu.Unlock()
}

func (sh *shared) setEncoding(enc string) {
	sh.mu.Lock()
	sh.clientEncoding = enc
	sh.mu.Unlock()
}

// setNonStandardStrings records standard_conforming_strings = off, which
// the server reports at startup and after every change.
func (sh *shared) setNonStandardStrings(off bool) {
	sh.mu.Lock()
	sh.nonStandardStrings = off
	sh.mu.Unlock()
}

// scanOptions is how the session's SQL text reads: its client_encoding
// and standard_conforming_strings.
func (sh *shared) scanOptions() sqlscan.Options {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sqlscan.Options{NonStandardStrings: sh.nonStandardStrings, Encoding: sqlscan.EncodingOf(sh.clientEncoding)}
}

func (sh *shared) encoding() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.clientEncoding
}

// tx is the transaction status of the last ReadyForQuery.
func (sh *shared) tx() byte {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.txStatus
}

func (sh *shared) unitFailed() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lastUnitFailed
}

func (sh *shared) transactions() uint64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.xacts
}

// idleState is what the idle timeouts need: whether nothing is in flight,
// the transaction status and when the session was last active.
func (sh *shared) idleState() (idle bool, tx byte, last time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.unitsDone == sh.unitsSent && !sh.translating, sh.txStatus, sh.lastActive
}

func (sh *shared) touch() {
	sh.mu.Lock()
	sh.lastActive = time.Now()
	sh.mu.Unlock()
}

// waitIdle waits until every request sent upstream has been answered, or
// until the server waits for the client's COPY data (errCopyIn).
func (sh *shared) waitIdle() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for sh.unitsDone != sh.unitsSent && !sh.closing && !sh.copyIn {
		sh.cond.Wait()
	}
	switch {
	case sh.closing:
		return errQuiet
	case sh.copyIn:
		return errCopyIn
	}
	return nil
}

// ---- translation ----

// startTranslation records a running translation (cancel ends it) and
// returns the transaction status it starts in.
func (sh *shared) startTranslation(cancel context.CancelFunc) (tx byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.translating, sh.cancelTr = true, cancel
	return sh.txStatus
}

func (sh *shared) endTranslation() {
	sh.mu.Lock()
	sh.translating, sh.cancelTr = false, nil
	sh.mu.Unlock()
}

// cancelTranslation aborts a running translation (client CancelRequest).
func (sh *shared) cancelTranslation() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cancelTr != nil {
		sh.cancelTr()
		return true
	}
	return false
}

// trialAllowed reports whether an executor may run a trial now (a
// translation runs and the session is open), and the transaction status.
func (sh *shared) trialAllowed() (ok bool, tx byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.translating && !sh.closing, sh.txStatus
}

// ---- the session's end ----

func (sh *shared) isClosing() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.closing
}

// setClosing marks the session closing without closing anything (the
// client's Terminate): the upstream's close that follows is expected.
func (sh *shared) setClosing() {
	sh.mu.Lock()
	sh.closing = true
	sh.cond.Broadcast()
	sh.mu.Unlock()
}

// beginClose marks the session closed and returns what close must close and
// release: client is the connection the client side reads now (the event
// loop may have swapped it, see afterLoop).
func (sh *shared) beginClose(traffic *countingConn) (client, up net.Conn, key string, acquired bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.closing = true
	sh.connsClosed = true
	sh.cond.Broadcast()
	return traffic.Conn, sh.upConn, sh.key, sh.acquired
}

// drain marks the session draining (Shutdown). loop, when set, is the event
// loop's way to end the session if idle; otherwise idle says whether the
// session can end now (else its next ReadyForQuery ends it, see noteReady).
func (sh *shared) drain() (loop func(), idle bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closing {
		return nil, false
	}
	sh.draining = true
	if sh.loopDrain != nil {
		return sh.loopDrain, false
	}
	return nil, sh.idleLocked()
}

// drainIdle reports whether a draining session is idle (the event loop's
// check on a drain request).
func (sh *shared) drainIdle() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.draining && sh.idleLocked()
}

func (sh *shared) idleLocked() bool {
	return sh.ready && sh.unitsDone == sh.unitsSent && sh.txStatus == txIdle && !sh.translating
}

// ---- the event loop's hand-over ----

// conns returns the connections an event loop takes over.
func (sh *shared) conns(traffic *countingConn) (client, up net.Conn) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return traffic.Conn, sh.upConn
}

func (sh *shared) setLoopDrain(f func()) {
	sh.mu.Lock()
	sh.loopDrain = f
	sh.mu.Unlock()
}

// leaveLoop ends the event loop's time: with client and up (made again from
// the loop's sockets) the connections close closes from now on, unless
// close has run meanwhile (gone: the caller closes them).
func (sh *shared) leaveLoop(traffic *countingConn, client, up net.Conn) (gone bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.loopDrain = nil
	if sh.connsClosed {
		return true
	}
	if client != nil && up != nil {
		traffic.Conn, sh.upConn = client, up
	}
	return false
}

// countingConn counts the bytes a client connection carries: one atomic add
// per read or write system call, which the relay batches anyway.
type countingConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}
