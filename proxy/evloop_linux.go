//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event loop relays sessions the way PgBouncer does: one thread waits
// in epoll_wait for the sockets of all its sessions and, when one is
// readable, reads it once, looks at the message headers and writes what it
// read to the other side in one write (a TLS side through its tls.Conn,
// evloop_tls_linux.go). A round trip then costs two wake-ups, two reads and
// two writes. The goroutine relay (two goroutines per session on Go's
// netpoller) also pays a read that fails with EAGAIN per relayed batch and
// the runtime's thread hand-offs, which measured as the gap to PgBouncer
// (bench/README.md).
//
// The loop handles untracked pass-through only. Anything else — a statement
// that may carry a marker, a message it would have to hold whole beyond its
// buffer, a protocol error, a client Terminate, an upstream that went away —
// ends the session's time on the loop at a message boundary: the sockets go
// back to the session's goroutine with what was read but not yet passed on,
// and the goroutine relay (or its close and error paths) carries on exactly
// as if it had relayed from the start.
//
// Ownership (see session): while a session is on the loop, the loop's one
// goroutine is both its client side and its server side. It alone touches
// s.cl and s.sv, recording each message through onClient and onServer as
// clientLoop and serverLoop do (handlers.go; the Query/Parse entry decision
// is the same mightAsk/queryAsk/parseAsk); the session's goroutine waits in loopRelay
// meanwhile, having emptied its readers into the loop's pipes. Shared state
// goes through s.sh and s.sig as on goroutines. The hand-back on ls.done
// orders everything the loop wrote before the goroutine relay starts.

func newEventLoop(srv *Server, idx int) (*eventLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	return &eventLoop{srv: srv, idx: idx, epfd: epfd, evfd: evfd}, nil
}

// loopAcquire picks a relay thread for a session, starting it if needed.
// Half the Ps at most (one on two cores): a thread waiting in epoll_wait
// holds its P in a system call, and the runtime takes such a P away (a
// context switch each time) unless another one is idle.
// ring asks for an io_uring loop; when one cannot be set up the session
// gets an epoll loop, and so does every later one.
func (srv *Server) loopAcquire(ring bool) (*eventLoop, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.loopAcquireLocked(ring)
}

func (srv *Server) loopAcquireLocked(ring bool) (*eventLoop, error) {
	el := &srv.evloops
	ring = ring && !el.noRing
	set := el.set(ring)
	n := max(1, runtime.GOMAXPROCS(0)/2)
	for len(*set) < n {
		*set = append(*set, nil)
	}
	i := el.next % n
	el.next++
	l := (*set)[i]
	if l == nil && ring {
		var err error
		if l, err = startRingLoop(srv, i, n, cmp.Or(el.ringSize, ringEntries)); err != nil {
			log := srv.logger().Warn
			if srv.RelayLoop != RelayIOUring { // asked for by name: a warning
				log = srv.logger().Info
			}
			log("proxy: io_uring relay loop unavailable, using epoll", zap.Error(err))
			el.noRing = true
			return srv.loopAcquireLocked(false)
		}
		(*set)[i] = l
		el.live.Add(1)
	}
	if l == nil {
		var err error
		if l, err = newEventLoop(srv, i); err != nil {
			return nil, err
		}
		(*set)[i] = l
		l.maxLoops = n
		el.live.Add(1)
		go l.run()
	}
	l.sessions++
	return l, nil
}

// loopRelease counts a session off its loop; it reports whether that was the
// loop's last, in which case the loop ends (a new one starts on demand).
func (srv *Server) loopRelease(l *eventLoop) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	l.sessions--
	if l.sessions > 0 {
		return false
	}
	srv.loopForgetLocked(l)
	return true
}

// loopForgetLocked makes the next session start a new loop in l's place.
func (srv *Server) loopForgetLocked(l *eventLoop) {
	if set := srv.evloops.set(l.ring != nil); l.idx < len(*set) && (*set)[l.idx] == l {
		(*set)[l.idx] = nil
		srv.evloops.live.Add(-1)
	}
}

func (srv *Server) loopBuf() []byte {
	if b, ok := srv.evloops.bufs.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, bufSize)
}

func (srv *Server) putLoopBuf(b []byte) {
	if b != nil {
		srv.evloops.bufs.Put(&b)
	}
}

var eventfdOne = [8]byte{1} // little-endian 1 (read-only)

// post hands the loop a request; false if the loop has ended (then every
// session it had has its result already).
func (l *eventLoop) post(r loopReq) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	l.reqs = append(l.reqs, r)
	if len(l.reqs) == 1 {
		_, _ = unix.Write(l.evfd, eventfdOne[:])
	}
	return true
}

func (l *eventLoop) run() {
	events := make([]unix.EpollEvent, 128)
	hot := hotWaitMS()
	var reqs []loopReq
	for !l.stopping {
		n, err := l.wait(events, l.hotWait(hot))
		if err != nil {
			l.fail(err)
			break
		}
		for i := 0; i < n && !l.stopping; i++ {
			reqs = l.dispatch(events[i], reqs)
		}
	}
	l.stop()
}

// wait waits for events, hot first (see epollWaitHot), then releasing the
// P; an interrupted wait returns no events.
func (l *eventLoop) wait(events []unix.EpollEvent, hot int) (int, error) {
	var n int
	var err error
	if hot > 0 {
		n, err = epollWaitHot(l.epfd, events, hot)
	}
	if n == 0 && err == nil {
		n, err = unix.EpollWait(l.epfd, events, -1)
	}
	if errors.Is(err, unix.EINTR) {
		return 0, nil
	}
	return n, err
}

// dispatch handles one event: the requests posted to the loop, or a
// session's socket; reqs is a buffer for the requests, returned for reuse.
func (l *eventLoop) dispatch(ev unix.EpollEvent, reqs []loopReq) []loopReq {
	fd := int(ev.Fd)
	if fd == l.evfd {
		var b [8]byte
		_, _ = unix.Read(l.evfd, b[:])
		l.mu.Lock()
		reqs, l.reqs = l.reqs, reqs[:0]
		l.mu.Unlock()
		for _, r := range reqs {
			l.request(r)
		}
		clear(reqs)
		return reqs
	}
	if fd < len(l.byFd) {
		if ls := l.byFd[fd]; ls != nil {
			l.serve(ls, fd, ev.Events)
		}
	}
	return reqs
}

// fail gives every session back after epoll_wait failed, which cannot
// happen with valid arguments.
func (l *eventLoop) fail(err error) {
	l.srv.logger().Error("proxy: event loop: epoll_wait failed, sessions go back to the goroutine relay", zap.Error(err))
	l.srv.mu.Lock()
	l.srv.loopForgetLocked(l)
	l.srv.mu.Unlock()
	for _, ls := range l.byFd {
		if ls != nil && !ls.finished {
			l.finish(ls, loopHandoff, nil)
		}
	}
}

// stop refuses further requests and closes the loop's descriptors.
func (l *eventLoop) stop() {
	l.refuseRequests()
	unix.Close(l.epfd)
	unix.Close(l.evfd)
}

// refuseRequests stops the loop taking requests and hands the sessions
// still waiting to be added back to their goroutines.
func (l *eventLoop) refuseRequests() {
	l.mu.Lock()
	l.stopped = true
	rest := l.reqs
	l.reqs = nil
	l.mu.Unlock()
	for _, r := range rest {
		if r.op == opAdd { // only after a failed wait: an added session keeps the loop alive
			r.ls.done <- loopResult{kind: loopHandoff, ls: r.ls}
		}
	}
}

// hotWaitMS bounds a wait in epollWaitHot: 10 ms, so that a loop on a busy
// machine, where a session's next message often comes a few milliseconds
// later, rarely goes through the scheduler (measured: a context switch and
// a round of the runtime's monitor per transaction fewer at -c 1 under
// load); 1 ms when GOMAXPROCS is 1, as the loop's P is then the only one
// and the session's goroutines must not wait long for it. With more Ps, at
// most half are loops' (loopAcquire), so the others always have one.
func hotWaitMS() int {
	if runtime.GOMAXPROCS(0) < 2 {
		return 1
	}
	return preemptMS
}

// preemptMS is how long the Go runtime lets a goroutine hold its P before
// its monitor preempts it (forcePreemptNS): a hot wait of this length gives
// the P up no later than a computing goroutine would.
const preemptMS = 10

// hotWait is the loop's hot wait now: ms, or none while the loops of both
// kinds together (a server relaying TLS sessions on epoll loops and
// plaintext ones on io_uring loops) are more than half the Ps, so that
// hot waits never hold every P.
func (l *eventLoop) hotWait(ms int) int {
	if int(l.srv.evloops.live.Load()) > l.maxLoops {
		return 0
	}
	return ms
}

// epollWaitHot waits for events at most msec without telling the scheduler
// (a raw system call: the thread keeps its P, as if computing). While
// traffic flows the loop waits far less than that between events, and a wait
// through Syscall costs more: leaving and re-entering the scheduler each time
// wakes the runtime's monitor thread, measured as a futex wake and nanosleep
// polling per round trip. An idle loop waits through EpollWait, releasing the
// P; the monitor's preemption signal (after 10 ms running) ends a raw wait
// with EINTR, so the loop yields like any busy goroutine.
func epollWaitHot(epfd int, events []unix.EpollEvent, msec int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// rawRead and rawWrite are read and write on the loop's non-blocking
// sockets without telling the scheduler, as epollWaitHot waits: they never
// block, and through Syscall each would enter and leave the scheduler's
// syscall state (the P could be handed to another thread meanwhile, when
// the kernel preempts the loop's thread on the write that wakes the peer).
// b is not empty.
func rawRead(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func (l *eventLoop) request(r loopReq) {
	ls := r.ls
	switch r.op {
	case opAdd:
		if l.ring != nil {
			l.addRing(ls)
		} else {
			l.add(ls)
		}
	case opDrop:
		if !ls.finished {
			l.finish(ls, loopDropped, nil)
		}
	case opDrain:
		if ls.finished {
			return
		}
		if ls.s.sh.drainIdle() {
			l.finish(ls, loopDrained, nil)
		}
	}
}

// add puts a session's sockets on the loop and passes on what came with
// the end of the handshake.
func (l *eventLoop) add(ls *loopSess) {
	for _, fd := range []int{ls.cfd, ls.ufd} {
		for fd >= len(l.byFd) {
			l.byFd = append(l.byFd, make([]*loopSess, len(l.byFd)+64)...)
		}
		l.byFd[fd] = ls
	}
	ls.events = [2]uint32{unix.EPOLLIN, unix.EPOLLIN}
	for i, fd := range []int{ls.cfd, ls.ufd} {
		ev := unix.EpollEvent{Events: ls.events[i], Fd: int32(fd)}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			l.finish(ls, loopHandoff, nil)
			return
		}
	}
	for side, t := range ls.tls {
		if t != nil { // the tls.Conn may hold what the handshake's end brought
			ls.newReadTurn(side)
			t.more = true
		}
	}
	if l.parse(ls, 0) && l.parse(ls, 1) && l.flush(ls, 0) && l.flush(ls, 1) && l.pump(ls) {
		l.rearm(ls)
	}
}

// serve handles readiness of one of a session's sockets.
func (l *eventLoop) serve(ls *loopSess, fd int, ev uint32) {
	// side 0 reads the client and writes upstream; side 1 the reverse.
	in, out := 0, 1
	if fd == ls.ufd {
		in, out = 1, 0
	}
	if ev&unix.EPOLLOUT != 0 {
		if ls.backlog(in) && !l.flushOut(ls, in) {
			return
		}
		if ls.pipe(out).pending() && !l.flush(ls, out) {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 && !ls.blocked(in) {
		ls.newReadTurn(in)
		if !l.fill(ls, in) || !l.parse(ls, in) || !l.flush(ls, in) {
			return
		}
	}
	if !l.pump(ls) {
		return
	}
	l.rearm(ls)
}

func (ls *loopSess) pipe(side int) *pipe {
	if side == 0 {
		return &ls.c
	}
	return &ls.u
}

func (ls *loopSess) fds(side int) (in, out int) {
	if side == 0 {
		return ls.cfd, ls.ufd
	}
	return ls.ufd, ls.cfd
}

// fill reads once from side's socket; false if the session left the loop.
func (l *eventLoop) fill(ls *loopSess, side int) bool {
	if t := ls.tls[side]; t != nil {
		return l.fillTLS(ls, side, t)
	}
	pp := ls.pipe(side)
	pp.compact()
	if pp.w == len(pp.buf) {
		return true // cannot happen: a message held whole fits (else handed off)
	}
	fd, _ := ls.fds(side)
	for {
		n, err := rawRead(fd, pp.buf[pp.w:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return true
		}
		if err != nil || n <= 0 {
			if err == nil {
				err = io.EOF
			}
			if side == 0 {
				l.finish(ls, loopClientGone, err)
			} else {
				l.finish(ls, loopUpstreamLost, err)
			}
			return false
		}
		if side == 0 {
			ls.s.traffic.in.Add(int64(n))
		}
		pp.w += n
		return true
	}
}

// flush writes side's parsed bytes to the other socket; false if the session
// left the loop. A short write leaves the rest pending (rearm asks for
// EPOLLOUT and stops reading that side meanwhile).
func (l *eventLoop) flush(ls *loopSess, side int) bool {
	if t := ls.tls[1-side]; t != nil {
		return l.flushTLS(ls, side, t)
	}
	pp := ls.pipe(side)
	_, fd := ls.fds(side)
	for pp.r < pp.p {
		n, err := rawWrite(fd, pp.buf[pp.r:pp.p])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return true
		}
		if err != nil {
			l.finish(ls, loopClientGone, err)
			return false
		}
		if side == 1 {
			ls.s.traffic.out.Add(int64(n))
		}
		pp.r += n
	}
	if pp.rem == 0 && pp.p == pp.w {
		pp.r, pp.p, pp.w = 0, 0, 0
	}
	return true
}

// rearm sets each socket's interest: read unless that side's bytes wait to
// be written, write while the other side's bytes (or TLS records) wait.
func (l *eventLoop) rearm(ls *loopSess) {
	want := [2]uint32{}
	for side := 0; side < 2; side++ {
		if !ls.blocked(side) {
			want[side] |= unix.EPOLLIN
		}
		if ls.pipe(1-side).pending() || ls.backlog(side) {
			want[side] |= unix.EPOLLOUT
		}
	}
	for side, fd := range []int{ls.cfd, ls.ufd} {
		if want[side] == ls.events[side] {
			continue
		}
		ev := unix.EpollEvent{Events: want[side], Fd: int32(fd)}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
			l.finish(ls, loopHandoff, nil)
			return
		}
		ls.events[side] = want[side]
	}
}

// finish takes the session off the loop and hands its sockets and buffers
// back to the session's goroutine. Always returns false (for callers' returns).
func (l *eventLoop) finish(ls *loopSess, kind loopKind, err error) bool {
	if ls.finished {
		return false
	}
	ls.finished = true
	if l.ring != nil {
		// The kernel may still hold the session's buffers and sockets:
		// settle hands it back once their entries are done.
		ls.res = loopResult{kind: kind, err: err, ls: ls}
		l.settle(ls)
		return false
	}
	for _, fd := range []int{ls.cfd, ls.ufd} {
		_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
	l.deliver(ls, loopResult{kind: kind, err: err, ls: ls})
	return false
}

// deliver gives a finished session back to its goroutine.
func (l *eventLoop) deliver(ls *loopSess, res loopResult) {
	for _, fd := range []int{ls.cfd, ls.ufd} {
		if fd < len(l.byFd) && l.byFd[fd] == ls {
			l.byFd[fd] = nil
		}
	}
	// Released before the session hears of it, so that anything the session
	// then does (an answer to the client) comes after the loop let it go.
	last := l.srv.loopRelease(l)
	ls.done <- res
	if last {
		l.stopping = true
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
	}
}

// parse walks side's unparsed bytes message by message, doing what the
// goroutine relay does for each (clientLoop / serverLoop, untracked); false
// if the session left the loop.
func (l *eventLoop) parse(ls *loopSess, side int) bool {
	pp := ls.pipe(side)
	s := ls.s
	var msgs uint64
	defer func() {
		if side == 0 {
			s.sig.msgsIn.Add(msgs)
		} else {
			s.sig.msgsOut.Add(msgs)
		}
	}()
	for {
		if pp.rem > 0 {
			k := min(pp.rem, pp.w-pp.p)
			pp.p += k
			pp.rem -= k
			if pp.rem > 0 {
				return true
			}
		}
		b := pp.buf[pp.p:pp.w]
		if len(b) < 5 {
			return true
		}
		typ := b[0]
		n := int(int32(binary.BigEndian.Uint32(b[1:]))) - 4
		var ok, wait bool
		if side == 0 {
			ok, wait = l.clientMsg(ls, typ, n, b)
		} else {
			ok, wait = l.serverMsg(ls, typ, n, b)
		}
		if !ok {
			return false
		}
		if wait {
			return true
		}
		msgs++
		k := min(5+n, len(b))
		pp.p += k
		pp.rem = 5 + n - k
		if side == 0 && typ == feTerminate {
			return l.finish(ls, loopTerminate, nil)
		}
		if side == 1 && typ == beReadyForQuery && ls.drainAfterZ {
			return l.finish(ls, loopDrained, nil)
		}
	}
}

// whole reports whether the message at b (body length n) is all in the
// buffer; handoff if it can never be (larger than the buffer).
func whole(pp *pipe, b []byte, n int) (complete, tooLarge bool) {
	if 5+n > len(pp.buf) {
		return false, true
	}
	return len(b) >= 5+n, false
}

// held returns the body of the message at b (body length n) once it is all
// in the buffer: wait until more bytes arrive, or ok false when it can never
// be (larger than the buffer), and the session left the loop.
func (l *eventLoop) held(ls *loopSess, pp *pipe, b []byte, n int) (body []byte, ok, wait bool) {
	complete, tooLarge := whole(pp, b, n)
	if tooLarge {
		return nil, l.finish(ls, loopHandoff, nil), false
	}
	if !complete {
		return nil, true, true
	}
	return b[5 : 5+n], true, false
}

// clientMsg handles one client message header at b: ok false if the session
// left the loop, wait if more bytes must arrive first. What the message does
// to the session is onClient's, called once the message can be passed on;
// here is only what the loop cannot carry (an ask, a message too large to
// hold, a protocol error), which goes to the goroutine relay.
func (l *eventLoop) clientMsg(ls *loopSess, typ byte, n int, b []byte) (ok, wait bool) {
	s, pp := ls.s, &ls.c
	if n < 0 || n > s.maxMsg {
		return l.finish(ls, loopHandoff, nil), false // the goroutine relay answers 08P01
	}
	var body []byte // whole, for onClient
	switch typ {
	case feQuery, feParse, feTerminate:
		// A Query or Parse is judged whole, as the goroutine relay judges
		// it (mightAsk, then queryAsk or parseAsk); a Terminate is the
		// last thing passed on.
		if body, ok, wait = l.held(ls, pp, b, n); !ok || wait {
			return ok, wait
		}
		if typ != feTerminate && s.loopAsks(typ, body) {
			return l.finish(ls, loopHandoff, nil), false
		}
	}
	s.onClient(typ, body)
	return true, false
}

// loopAsks reports whether a whole Query or Parse must go to the goroutine
// relay: an ask, or a message it would answer an error to.
func (s *session) loopAsks(typ byte, body []byte) bool {
	if typ == feQuery && (len(body) == 0 || body[len(body)-1] != 0) {
		return true
	}
	if !mightAsk(typ, body, true) {
		return false
	}
	if typ == feQuery {
		_, m, err := s.queryAsk(body[:len(body)-1])
		return err != nil || m.Kind != MarkerNone
	}
	_, m, _, err := s.parseAsk(body)
	return err != nil || m.Kind != MarkerNone
}

// serverMsg is clientMsg for an upstream message: onServer's, with the
// message read as far as serverInspects asks.
func (l *eventLoop) serverMsg(ls *loopSess, typ byte, n int, b []byte) (ok, wait bool) {
	s, pp := ls.s, &ls.u
	if n < 0 {
		return l.finish(ls, loopUpstreamLost, fmt.Errorf("%w: invalid message length from upstream", ErrProtocol)), false
	}
	if !s.serverChanges(typ) {
		return true, false
	}
	if typ == beReadyForQuery {
		if len(b) < 6 {
			return true, true
		}
		if n != 1 {
			return l.finish(ls, loopUpstreamLost, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol)), false
		}
		if s.sig.swallowZ.Load() > 0 || s.sig.tracked.Load() {
			return l.finish(ls, loopHandoff, nil), false // the ask path's; never on the loop
		}
	}
	var body []byte
	if s.serverInspects(typ, n) {
		if body, ok, wait = l.held(ls, pp, b, n); !ok || wait {
			return ok, wait
		}
	}
	if s.onServer(typ, body) {
		ls.drainAfterZ = true
	}
	return true, false
}

// ---- the session's side ----

// dupFD duplicates a connection's socket for the loop (close-on-exec; it
// shares the file description, so it is non-blocking like the original).
func dupFD(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return fd, derr
}

// fdConn makes a net.Conn of fd again (on Go's netpoller) and closes fd.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	f.Close()
	return c, err
}

// loopRelay relays the session on an event loop when it can. It returns
// true when the goroutine relay is to carry on (not eligible, or handed
// back), false when the session is over (run closes it).
func (s *session) loopRelay() bool {
	if s.srv.GoroutineRelay || s.srv.IdleTimeout > 0 || s.srv.IdleInTransactionTimeout > 0 {
		return true
	}
	client, up := s.sh.conns(s.traffic)
	tlsSides, upSock, restore, ok := s.loopSides(up)
	if !ok {
		return true
	}
	if s.cl.uw.Flush() != nil || s.cw.Flush() != nil {
		restore()
		return true
	}
	// io_uring carries plaintext sessions only; TLS ones stay on epoll.
	ring := s.srv.RelayLoop.ring() && tlsSides == [2]*loopTLS{}
	cfd, ufd, l, err := s.loopTake(client, upSock, ring)
	if err != nil {
		restore()
		return true
	}
	ls := &loopSess{s: s, cfd: cfd, ufd: ufd, tls: tlsSides, done: make(chan loopResult, 1)}
	ls.c.buf, ls.u.buf = s.srv.loopBuf(), s.srv.loopBuf()
	// What the handshake's readers hold already.
	ls.c.w, _ = s.cl.cr.Read(ls.c.buf[:s.cl.cr.Buffered()])
	ls.u.w, _ = s.sv.ur.Read(ls.u.buf[:s.sv.ur.Buffered()])
	// The goroutine relay's read buffers and upstream writer sit unused
	// while the loop relays: let them go (afterLoop makes what is needed
	// again). cw stays: sendClient (drain) may use it under its lock.
	s.cl.cr, s.sv.ur, s.cl.uw = nil, nil, nil

	s.sh.setLoopDrain(func() { l.post(loopReq{ls, opDrain}) })
	// TLS sides read and write the loop's sockets from now on; under cw's
	// lock, as a drain that came before setLoopDrain may write to the client.
	s.cw.mu.Lock()
	if t := ls.tls[0]; t != nil {
		t.lc.enter(cfd, s.traffic)
	}
	if t := ls.tls[1]; t != nil {
		t.lc.enter(ufd, nil)
	}
	s.cw.mu.Unlock()
	// Off Go's netpoller: the loop's duplicates keep the sockets open.
	_ = client.Close()
	_ = upSock.Close()
	if !l.post(loopReq{ls, opAdd}) { // the loop failed meanwhile
		return s.afterLoop(loopResult{kind: loopHandoff, ls: ls})
	}
	var res loopResult
	select {
	case res = <-ls.done:
	case <-s.ctx.Done():
		l.post(loopReq{ls, opDrop})
		res = <-ls.done
	}
	return s.afterLoop(res)
}

// loopSides finds the session's TLS sides and the socket under its
// upstream; ok is false when a side cannot go on the loop. restore undoes
// what it did to the session's upstream.
func (s *session) loopSides(up net.Conn) (sides [2]*loopTLS, upSock net.Conn, restore func(), ok bool) {
	restore = func() {}
	if s.tlsc != nil {
		if sides[0], _ = tlsSide(s.tlsc); sides[0] == nil {
			return sides, nil, restore, false
		}
	}
	upTLS, ok := tlsSide(up)
	if !ok {
		return sides, nil, restore, false
	}
	if upTLS == nil {
		return sides, up, restore, true
	}
	sides[1], upSock = upTLS, upTLS.lc.Conn
	// From here close closes the socket only: the tls.Conn is the loop's
	// until afterLoop gives it back (leaveLoop).
	if s.sh.setUpstream(upSock) {
		s.sh.setUpstream(up)
		return sides, nil, restore, false
	}
	return sides, upSock, func() { s.sh.setUpstream(up) }, true
}

// loopTake duplicates both sockets for a loop (an io_uring one if ring
// and available) and takes one; on an error
// nothing is kept.
func (s *session) loopTake(client, upSock net.Conn, ring bool) (cfd, ufd int, l *eventLoop, err error) {
	if cfd, err = dupFD(client); err != nil {
		return -1, -1, nil, err
	}
	if ufd, err = dupFD(upSock); err != nil {
		unix.Close(cfd)
		return -1, -1, nil, err
	}
	if l, err = s.srv.loopAcquire(ring); err != nil {
		unix.Close(cfd)
		unix.Close(ufd)
		return -1, -1, nil, err
	}
	return cfd, ufd, l, nil
}

// afterLoop puts the session's sockets back on Go's netpoller, passes on
// what the loop had read, and ends the session or continues on goroutines.
func (s *session) afterLoop(res loopResult) bool {
	ls := res.ls
	defer func() {
		if ls.kernelHeld {
			return
		}
		s.srv.putLoopBuf(ls.c.buf)
		s.srv.putLoopBuf(ls.u.buf)
	}()
	up, ok := s.reopenConns(ls)
	if !ok {
		return false
	}
	if res.kind == loopHandoff {
		// Unparsed bytes are read again by the goroutine relay's readers.
		s.cl.cr = bufio.NewReaderSize(readerWithPrefix(ls.c.buf[ls.c.p:ls.c.w], s.clientStream()), bufSize)
		s.sv.ur = bufio.NewReaderSize(readerWithPrefix(ls.u.buf[ls.u.p:ls.u.w], up), bufSize)
		s.cl.uw = newOutBuf(up, bufSize)
	} else {
		s.cl.uw = newOutBuf(up, 4096) // the session ends: what is left to pass on
	}
	parsedOK := s.passParsed(ls)
	switch res.kind {
	case loopHandoff:
		return parsedOK && s.passRest(ls)
	case loopUpstreamLost:
		s.upstreamLost(false, res.err)
	case loopDrained:
		_ = s.sendClient(encodeError(shutdownError()))
	}
	return false
}

// reopenConns puts the loop's sockets back on Go's netpoller; ok is false
// when the session was closed meanwhile (or a socket cannot be reopened),
// in which case they are closed here.
func (s *session) reopenConns(ls *loopSess) (up net.Conn, ok bool) {
	client, cerr := fdConn(ls.cfd)
	up, uerr := fdConn(ls.ufd)
	// A TLS side's loopConn goes back on the netpoller over the new socket
	// (the client's through s.traffic, whose Conn leaveLoop sets), and the
	// session's upstream is the tls.Conn again.
	if t := ls.tls[1]; t != nil && up != nil {
		t.lc.resume(up)
		up = t.conn
	}
	if t := ls.tls[0]; t != nil {
		t.lc.resume(s.traffic)
	}
	// fdConn gives no connection with its error: nil ones are not taken.
	if gone := s.sh.leaveLoop(s.traffic, client, up); gone || cerr != nil || uerr != nil {
		// close has run and found only the originals: close these.
		closeReopened(ls, client, up)
		return nil, false
	}
	// Records the loop took and could not write go first.
	for _, t := range ls.tls {
		if t != nil && t.lc.flushBacklog() != nil {
			s.close()
			return nil, false
		}
	}
	for _, c := range []net.Conn{up, client} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	return up, true
}

// closeReopened closes the reopened conns of a session that ended while on
// the loop, telling the server first.
func closeReopened(ls *loopSess, client, up net.Conn) {
	if up != nil {
		_ = up.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if t := ls.tls[1]; t != nil {
			_ = t.lc.flushBacklog() // records in order before the Terminate
		}
		_, _ = io.WriteString(up, terminateMsg)
		up.Close()
	}
	if client != nil {
		client.Close()
	}
}

// passParsed writes what the loop had parsed but not yet passed on, both
// ways; false if a write failed.
func (s *session) passParsed(ls *loopSess) bool {
	_, werr := s.cl.uw.Write(ls.c.buf[ls.c.r:ls.c.p])
	if werr == nil {
		werr = s.cl.uw.Flush()
	}
	s.cw.mu.Lock()
	s.cw.Reset(s.clientStream())
	_, cwerr := s.cw.Write(ls.u.buf[ls.u.r:ls.u.p])
	if cwerr == nil {
		cwerr = s.cw.Flush()
	}
	s.cw.mu.Unlock()
	return werr == nil && cwerr == nil
}

// passRest passes on the rest of a message the loop was passing through
// when it handed off; false if the session is over.
func (s *session) passRest(ls *loopSess) bool {
	if ls.c.rem > 0 && relayN(s.cl.cr, s.cl.uw, ls.c.rem, s.cl.uw.Flush) != nil || s.cl.uw.Flush() != nil {
		return false
	}
	if ls.u.rem > 0 && relayN(s.sv.ur, s.cw.Writer, ls.u.rem, s.cw.Flush) != nil || s.cw.Flush() != nil {
		return false
	}
	return true
}

// readerWithPrefix reads p (copied) first, then r.
func readerWithPrefix(p []byte, r io.Reader) io.Reader {
	if len(p) == 0 {
		return r
	}
	return io.MultiReader(bytes.NewReader(bytes.Clone(p)), r)
}
