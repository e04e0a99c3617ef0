//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/nlproxy/nlproxy/internal/uring"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The io_uring loop (Server.RelayLoop) relays plaintext sessions with the
// epoll loop's pipes and message handling (parse, clientMsg, serverMsg,
// finish), but does its I/O through a ring: instead of waiting for
// readiness and then reading and writing with a system call each, it keeps
// a receive in the kernel's hands on each socket and, once a receive has
// brought whole messages, queues their send to the other socket and the
// next receive as one linked pair. Both go to the kernel in the
// io_uring_enter that waits for the next completion, so a round trip at
// one client costs two enters where epoll costs six system calls.
//
// Each pipe has at most one chain in flight: a receive into buf[w:], or a
// send of buf[r:p] linked to that receive (the receive starts once every
// byte went; the send posts no completion when it succeeds, so the
// receive's completion says both are done), or, when the buffer is full, a
// send alone. A failed send posts its error and drops the receive behind it
// without a completion. While a chain is in flight nothing moves the
// pipe's buffer: compact and the offsets of what is in the kernel's hands
// change only when it is done. That also keeps the epoll loop's
// backpressure: a side is not read again before what it sent went.
//
// A session leaving the loop first has its entries cancelled and waits for
// their completions (what a receive brought meanwhile is kept, as unparsed
// bytes), so the kernel holds neither its buffers nor its sockets when the
// goroutine relay takes them back.
//
// The ring is set up for one thread, which the loop's goroutine locks: the
// kernel runs completion work only inside that thread's io_uring_enter, so
// a completion costs no interrupt of whatever else runs.

// Kinds of entry, in the low byte of its user data (the descriptor above).
const (
	uRecv uint64 = iota + 1
	uSend
	uCancel
	uWake
)

func udata(fd int, op uint64) uint64 { return uint64(fd)<<8 | op }

// ringEntries is the submission ring's size: each session queues at most
// four entries per turn; a fuller ring is submitted early (uring.Ring).
const ringEntries = 256

// startRingLoop starts an io_uring loop's goroutine, which sets its ring
// up on its own locked thread; the error is the setup's.
func startRingLoop(srv *Server, idx, maxLoops int, entries uint32) (*eventLoop, error) {
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // blocking: the ring's read waits on it
	if err != nil {
		return nil, err
	}
	l := &eventLoop{srv: srv, idx: idx, maxLoops: maxLoops, epfd: -1, evfd: evfd, wake: new([8]byte)}
	ready := make(chan error, 1)
	go func() {
		// The ring is this thread's while it lives (stopRing closes it);
		// the thread then goes back to the runtime's pool.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r, err := uring.New(entries)
		if err != nil {
			ready <- err
			return
		}
		l.ring = r // before the caller hears: it reads l.ring after
		ready <- nil
		l.runRing()
	}()
	if err := <-ready; err != nil {
		unix.Close(evfd)
		return nil, err
	}
	return l, nil
}

func (l *eventLoop) runRing() {
	hot := ringHotWait(hotWaitMS(), os.Getenv("GODEBUG"))
	complete := l.complete
	l.armWake()
	for !l.stopping {
		if err := l.ring.Wait(l.hotWait(hot)); err != nil && !errors.Is(err, unix.EINTR) {
			l.failRing(err)
			break
		}
		l.ring.Completions(complete)
	}
	l.stopRing()
}

// ringHotWait is the io_uring loop's hot wait for hotWaitMS's ms: untimed
// where that is preemptMS and the runtime preempts a thread holding its P
// for that long (its signal ends the wait), which spares the kernel a
// timer armed and cancelled per wait (about 2% of the loop's CPU at one
// client, by perf). Timed where the runtime's asynchronous preemption is off
// (GODEBUG asyncpreemptoff=1: the wait would hold its P until traffic
// came, and a stop-the-world would wait for it), and where GOMAXPROCS is 1
// (1 ms, shorter than the runtime's bound).
func ringHotWait(ms int, godebug string) int {
	if ms < preemptMS {
		return ms
	}
	off := false
	for _, kv := range strings.Split(godebug, ",") { // the last setting wins, as in the runtime
		if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "asyncpreemptoff="); ok {
			off = v != "0"
		}
	}
	if off {
		return ms
	}
	return uring.HotUntimed
}

// armWake queues the read of the eventfd that post writes.
func (l *eventLoop) armWake() {
	if err := l.ring.Read(l.evfd, l.wake[:], udata(l.evfd, uWake)); err != nil {
		l.failRing(err)
		return
	}
	l.wakeOn = true
}

// complete handles one completion.
func (l *eventLoop) complete(c uring.CQE) {
	fd, op := int(c.UserData>>8), c.UserData&0xff
	if op == uWake {
		l.woken(c.Res)
		return
	}
	if fd >= len(l.byFd) || l.byFd[fd] == nil {
		return // a cancellation of the wake-up read
	}
	ls := l.byFd[fd]
	switch op {
	case uCancel:
		ls.cancels--
		l.settle(ls)
	case uRecv:
		side := 0
		if fd == ls.ufd {
			side = 1
		}
		l.received(ls, side, c.Res)
	case uSend:
		side := 0 // the client's pipe is sent upstream
		if fd == ls.cfd {
			side = 1
		}
		l.sent(ls, side, c.Res)
	}
}

// woken runs the requests posted to the loop and reads the eventfd again.
func (l *eventLoop) woken(res int32) {
	l.wakeOn = false
	if res == -int32(unix.ECANCELED) {
		return
	}
	l.mu.Lock()
	reqs := l.reqs
	l.reqs = nil
	l.mu.Unlock()
	for _, r := range reqs {
		l.request(r)
	}
	if !l.stopping {
		l.armWake()
	}
}

// addRing takes a session on: what came with the handshake is parsed, and
// the first chains go out.
func (l *eventLoop) addRing(ls *loopSess) {
	for _, fd := range []int{ls.cfd, ls.ufd} {
		for fd >= len(l.byFd) {
			l.byFd = append(l.byFd, make([]*loopSess, len(l.byFd)+64)...)
		}
		l.byFd[fd] = ls
	}
	if l.parse(ls, 0) && l.parse(ls, 1) {
		l.arm(ls)
	}
}

// received ends side's chain with its receive's result: the send before it
// (if any) went whole, and res bytes (or an error) came.
func (l *eventLoop) received(ls *loopSess, side int, res int32) {
	ch, pp := &ls.chain[side], ls.pipe(side)
	l.chainDone(ls, side)
	if res > 0 {
		pp.w = ch.recvOff + int(res)
		if side == 0 {
			ls.s.traffic.in.Add(int64(res))
		}
	}
	if ls.finished {
		l.settle(ls)
		return
	}
	switch {
	case res == -int32(unix.EINTR) || res == -int32(unix.EAGAIN):
	case res <= 0:
		err := io.EOF
		if res < 0 {
			err = unix.Errno(-res)
		}
		if side == 0 {
			l.finish(ls, loopClientGone, err)
		} else {
			l.finish(ls, loopUpstreamLost, err)
		}
		return
	default:
		if !l.parse(ls, side) {
			return
		}
	}
	l.arm(ls)
}

// sent handles a send's completion: the success of a send alone, or the
// failure of any (the receive linked behind it is then dropped).
func (l *eventLoop) sent(ls *loopSess, side int, res int32) {
	ch, pp := &ls.chain[side], ls.pipe(side)
	whole := res >= 0 && int(res) == ch.sendEnd-pp.r
	if whole {
		l.chainDone(ls, side)
	} else {
		ch.on = false
		if res > 0 { // what went before the error
			pp.r += int(res)
			if side == 1 {
				ls.s.traffic.out.Add(int64(res))
			}
		}
	}
	if ls.finished {
		l.settle(ls)
		return
	}
	if !whole {
		err := error(io.ErrShortWrite)
		if res < 0 {
			err = unix.Errno(-res)
		}
		l.finish(ls, loopClientGone, err) // as the epoll loop's failed write
		return
	}
	l.arm(ls)
}

// chainDone marks side's chain done after success of its send.
func (l *eventLoop) chainDone(ls *loopSess, side int) {
	ch, pp := &ls.chain[side], ls.pipe(side)
	ch.on = false
	if ch.send {
		if side == 1 {
			ls.s.traffic.out.Add(int64(ch.sendEnd - pp.r))
		}
		pp.r = ch.sendEnd
	}
}

// arm queues a chain for each pipe that has none: the send of what is
// parsed, linked to the next receive while the buffer has room.
func (l *eventLoop) arm(ls *loopSess) {
	for side := 0; side < 2; side++ {
		ch, pp := &ls.chain[side], ls.pipe(side)
		if ch.on {
			continue
		}
		pp.compact() // nothing of this pipe is in the kernel's hands
		if pp.rem == 0 && pp.r == pp.w {
			pp.r, pp.p, pp.w = 0, 0, 0
		}
		in, out := ls.fds(side)
		*ch = uchain{on: true, send: pp.r < pp.p, recv: pp.w < len(pp.buf), sendEnd: pp.p, recvOff: pp.w}
		var err error
		if ch.send {
			var flags uint8
			if ch.recv {
				flags = uring.Link | uring.SkipSuccess
			}
			err = l.ring.Send(out, pp.buf[pp.r:pp.p], udata(out, uSend), flags)
		}
		if ch.recv && err == nil {
			err = l.ring.Recv(in, pp.buf[pp.w:], udata(in, uRecv), 0)
		}
		if err != nil { // the ring failed: nothing more can be queued
			l.failRing(err)
			return
		}
	}
}

// settle hands a finished session back once none of its entries is in
// flight, cancelling those that are (again, if a cancellation found one
// between a send's completion and the start of the receive linked to it).
func (l *eventLoop) settle(ls *loopSess) {
	if ls.cancels > 0 {
		return
	}
	if !ls.chain[0].on && !ls.chain[1].on {
		l.deliver(ls, ls.res)
		return
	}
	for _, fd := range []int{ls.cfd, ls.ufd} {
		if err := l.ring.CancelFD(fd, udata(fd, uCancel)); err != nil {
			l.failRing(err)
			return
		}
		ls.cancels++
	}
}

// failRing gives every session back after the ring failed, which cannot
// happen with valid arguments. The kernel cancels what it still holds
// when the ring is closed, but not before the sessions hear: one with no
// entry in flight goes on on the goroutine relay; one with an entry in
// flight ends, since a receive may still take bytes off its sockets and a
// send may or may not have gone (passing it on again could run a
// statement twice), and its buffers, which the kernel may still write,
// are kept for the server's life instead of going back to the pool: a
// leak of two buffers per such session, on a failure that should not
// happen, rather than memory the kernel writes after it was reused.
func (l *eventLoop) failRing(err error) {
	if l.stopping {
		return
	}
	l.srv.logger().Error("proxy: io_uring event loop failed: sessions with I/O in flight end, the others go on on goroutines", zap.Error(err))
	l.srv.mu.Lock()
	l.srv.loopForgetLocked(l)
	if l.wakeOn { // the eventfd's read, still the kernel's
		l.srv.evloops.kernelHeld = append(l.srv.evloops.kernelHeld, l.wake[:])
	}
	for fd, ls := range l.byFd {
		if ls != nil && fd == ls.cfd && (ls.chain[0].on || ls.chain[1].on) {
			ls.kernelHeld = true
			l.srv.evloops.kernelHeld = append(l.srv.evloops.kernelHeld, ls.c.buf, ls.u.buf)
		}
	}
	l.srv.mu.Unlock()
	for fd, ls := range l.byFd {
		if ls == nil || fd != ls.cfd {
			continue
		}
		ls.finished = true
		res := loopResult{kind: loopHandoff, ls: ls}
		if ls.kernelHeld {
			ls.c.r, ls.u.r = ls.c.p, ls.u.p // nothing more is passed on
			res = loopResult{kind: loopClientGone, err: fmt.Errorf("io_uring: %w", err), ls: ls}
		}
		l.deliver(ls, res)
	}
	l.stopping = true
}

// stopRing refuses further requests, takes the wake-up read back from the
// kernel and closes the ring and the eventfd.
func (l *eventLoop) stopRing() {
	l.refuseRequests()
	// The read's buffer must not be freed while the kernel holds it.
	if l.wakeOn && l.ring.CancelFD(l.evfd, udata(l.evfd, uCancel)) == nil {
		for l.wakeOn {
			if err := l.ring.Wait(0); err != nil && !errors.Is(err, unix.EINTR) {
				break
			}
			l.ring.Completions(func(c uring.CQE) {
				if c.UserData&0xff == uWake {
					l.wakeOn = false
				}
			})
		}
	}
	l.ring.Close()
	unix.Close(l.evfd)
}
