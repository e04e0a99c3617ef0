//go:build linux

package proxy

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"github.com/nlproxy/nlproxy/internal/uring"
)

// The event loops' state: what the Server holds of them (eventLoops), a
// session's while a loop relays it (loopSess), the parts of both, and the
// conn the handshake makes a TLS side over (loopable). What the loops do is
// in evloop_linux.go (epoll, and what both kinds share), evloop_tls_linux.go
// and evloop_uring_linux.go. The types stand apart because the Server, its
// sessions and these refer to each other, while the loops' code uses all
// three and none of them uses it.

// loopKind says why a session left the loop.
type loopKind uint8

const (
	loopHandoff      loopKind = iota // continue on the goroutine relay
	loopClientGone                   // the client closed, or a write failed
	loopUpstreamLost                 // the upstream closed or broke the protocol
	loopTerminate                    // the client's Terminate is the last thing to pass on
	loopDrained                      // the proxy shuts down and the session is idle
	loopDropped                      // the session was closed from outside
)

// pipe is one direction's buffer: [r,p) is parsed and waits to be written to
// the other side, [p,w) is read and not parsed yet, and rem bytes of the
// message at p are still to come and pass unparsed.
type pipe struct {
	buf     []byte
	r, p, w int
	rem     int
}

func (pp *pipe) pending() bool { return pp.r < pp.p }

// compact moves what is left to the front so a read has room and a message
// that must be read whole starts at 0.
func (pp *pipe) compact() {
	if pp.r == 0 {
		return
	}
	n := copy(pp.buf, pp.buf[pp.r:pp.w])
	pp.p -= pp.r
	pp.w = n
	pp.r = 0
}

// loopSess is a session while the loop relays it (loop goroutine only, as
// are the session's cl and sv meanwhile).
type loopSess struct {
	s        *session
	cfd, ufd int  // duplicates of the session's sockets, owned by the loop
	c, u     pipe // client → upstream, upstream → client
	// tls: the client's and the upstream's TLS (nil where plaintext);
	// evloop_tls_linux.go.
	tls      [2]*loopTLS
	events   [2]uint32
	finished bool
	// drainAfterZ: the ReadyForQuery just parsed leaves a draining session idle.
	drainAfterZ bool
	done        chan loopResult
	// io_uring loops only (evloop_uring_linux.go): each pipe's entries in
	// the kernel's hands, the cancellations awaited, and the result kept
	// until nothing of the session is left in flight.
	chain   [2]uchain
	cancels int
	res     loopResult
	// kernelHeld: the ring failed with entries of this session in flight;
	// the kernel may still write into its buffers, so they never go back
	// to the pool (failRing, eventLoops.kernelHeld).
	kernelHeld bool
}

type loopResult struct {
	kind loopKind
	err  error
	ls   *loopSess
}

type loopOp uint8

const (
	opAdd loopOp = iota
	opDrop
	opDrain
)

type loopReq struct {
	ls *loopSess
	op loopOp
}

// eventLoop is one relay thread. It ends when its last session leaves.
type eventLoop struct {
	srv        *Server
	idx        int
	epfd, evfd int
	// ring, when set, does the loop's I/O instead of epoll and read/write
	// (evloop_uring_linux.go); epfd is then unused.
	ring     *uring.Ring
	wake     *[8]byte // the eventfd read's buffer
	wakeOn   bool     // the ring holds wake
	sessions int      // assigned and not yet finished (under srv.mu)

	mu      sync.Mutex
	reqs    []loopReq
	stopped bool

	maxLoops int // loops of one kind at most (loopAcquire); set before it runs

	// loop goroutine only:
	byFd     []*loopSess
	stopping bool
}

// eventLoops is the Server's set of relay threads (under Server.mu):
// epoll loops, and io_uring loops for plaintext sessions where
// Server.RelayLoop asks for them.
type eventLoops struct {
	loops, rings []*eventLoop
	next         int
	bufs         sync.Pool
	// noRing: an io_uring loop could not be set up; epoll from then on.
	noRing bool
	// ringSize, when set, replaces ringEntries (a test makes setup fail).
	ringSize uint32
	// live counts the running loops of both kinds (see hotWait).
	live atomic.Int32
	// kernelHeld keeps the buffers of sessions a failed ring gave back with
	// entries in flight, and its wake-up read's (failRing), out of the
	// garbage collector's reach: the kernel may write into them until it
	// has cancelled those entries.
	kernelHeld [][]byte
}

func (el *eventLoops) set(ring bool) *[]*eventLoop {
	if ring {
		return &el.rings
	}
	return &el.loops
}

// TLS sides (evloop_tls_linux.go).

// loopConn is the net.Conn under a session's tls.Conn (evloop_tls_linux.go
// tells why).
type loopConn struct {
	net.Conn // on Go's netpoller: handshake and goroutine relay

	// While an event loop relays (set by enter before the loop has the
	// session, cleared by resume after it gave it back; loop goroutine only
	// in between):
	fd    int           // the loop's duplicate of the socket; -1 when on the netpoller
	count *countingConn // the client's byte counters (nil upstream)
	read  bool          // the read system call of this readiness event is made
	out   []byte        // records taken by Write, [off:] not written yet
	off   int
	err   error // a write failed
}

// loopable makes c the conn a session's tls.Conn is made over.
func loopable(c net.Conn) net.Conn { return &loopConn{Conn: c, fd: -1} }

// loopTLS is one TLS side of a session on the loop.
type loopTLS struct {
	conn *tls.Conn
	lc   *loopConn
	more bool  // the tls.Conn may hold input beyond what fill took
	rerr error // the read error that ends the side, once what came before it is passed on
}

// io_uring (evloop_uring_linux.go).

// uchain is one pipe's entries in flight.
type uchain struct {
	on      bool
	send    bool // buf[r:sendEnd] is being sent
	recv    bool // a receive into buf[recvOff:] ends the chain
	sendEnd int
	recvOff int
}
