//go:build linux

package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Operation codes (include/uapi/linux/io_uring.h, enum io_uring_op).
const (
	opRead        = 22
	opAsyncCancel = 14
	opSend        = 26
	opRecv        = 27
)

// Setup flags and features used.
const (
	setupCQSize       = 1 << 3
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	featNoDrop   = 1 << 1
	featExtArg   = 1 << 8
	featCQESkip  = 1 << 11
	wantFeatures = featNoDrop | featExtArg | featCQESkip
)

// Entry flags.
const (
	// Link makes the next entry start only once this one has succeeded
	// (IOSQE_IO_LINK); a failure cancels it (-ECANCELED).
	Link = 1 << 2
	// SkipSuccess posts no completion when the entry succeeds
	// (IOSQE_CQE_SKIP_SUCCESS); a failure still posts one.
	SkipSuccess = 1 << 6
)

const (
	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	cancelAll = 1 << 0 // IORING_ASYNC_CANCEL_ALL
	cancelFD  = 1 << 1 // IORING_ASYNC_CANCEL_FD

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqOffsets
	cqOff                                                                  cqOffsets
}

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	_           uint64
}

// CQE is struct io_uring_cqe: the entry's UserData and its result (a count,
// or a negated errno).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// geteventsArg is struct io_uring_getevents_arg (IORING_ENTER_EXT_ARG).
type geteventsArg struct {
	sigmask   uint64
	sigmaskSz uint32
	minWait   uint32
	ts        uint64
}

// Ring is one io_uring instance with its mapped rings.
type Ring struct {
	fd           int
	closed       bool
	sqRing, cqMm []byte
	sqeMm        []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqes           []sqe
	tail           uint32 // our tail: entries filled, not yet published

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []CQE

	ts  unix.Timespec
	arg geteventsArg
}

// ErrUnsupported says the kernel lacks a feature the ring needs.
var ErrUnsupported = errors.New("io_uring: kernel lacks a needed feature")

// New sets up a ring of entries submission slots (a power of two) for the
// calling thread, which must be locked (runtime.LockOSThread) and the only
// one to use it. An error wraps the system call's (EPERM or ENOSYS where
// io_uring is disabled, EINVAL where the flags are unknown).
func New(entries uint32) (*Ring, error) {
	// A completion ring eight times the submission ring: a loop's sessions
	// have up to two receives each in flight, and completions beyond the
	// ring wait in the kernel (IORING_FEAT_NODROP) until it has room.
	p := params{flags: setupCQSize | setupSingleIssuer | setupDeferTaskrun, cqEntries: 8 * entries}
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &Ring{fd: int(fd)}
	if p.features&wantFeatures != wantFeatures {
		r.Close()
		return nil, ErrUnsupported
	}
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Ring) mmap(p *params) error {
	var err error
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	if r.sqRing, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring: mmap sq: %w", err)
	}
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(CQE{})))
	if r.cqMm, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring: mmap cq: %w", err)
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(sqe{}))
	if r.sqeMm, err = unix.Mmap(r.fd, offSQEs, sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring: mmap sqes: %w", err)
	}
	sq := unsafe.Pointer(&r.sqRing[0])
	r.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.tail = atomic.LoadUint32(r.sqTail)
	// The index array maps ring slots to entries: one to one, set once.
	array := unsafe.Slice((*uint32)(unsafe.Add(sq, p.sqOff.array)), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMm[0])), p.sqEntries)
	cq := unsafe.Pointer(&r.cqMm[0])
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*CQE)(unsafe.Add(cq, p.cqOff.cqes)), p.cqEntries)
	return nil
}

// Close unmaps the rings and closes the ring; the kernel cancels what is
// still in flight. Callers wait for the completions of entries that
// reference their memory first.
func (r *Ring) Close() {
	for _, m := range [][]byte{r.sqeMm, r.cqMm, r.sqRing} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMm, r.cqMm, r.sqRing = nil, nil, nil
	if !r.closed {
		unix.Close(r.fd)
		r.closed = true // fd itself stays as it was set up (FD)
	}
}

// FD is the ring's descriptor: a test swaps another file in under it to
// make the ring fail as a kernel error would.
func (r *Ring) FD() int { return r.fd }

// next returns a free submission slot, submitting what is queued first
// when the ring is full.
func (r *Ring) next() (*sqe, error) {
	for r.tail-atomic.LoadUint32(r.sqHead) >= uint32(len(r.sqes)) {
		if _, err := r.enter(0, -1, false); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, err
		}
	}
	e := &r.sqes[r.tail&r.sqMask]
	*e = sqe{}
	r.tail++
	return e, nil
}

// Recv queues a receive into b (not empty) from socket fd.
func (r *Ring) Recv(fd int, b []byte, userData uint64, flags uint8) error {
	e, err := r.next()
	if err != nil {
		return err
	}
	e.opcode, e.flags, e.fd = opRecv, flags, int32(fd)
	e.addr, e.len = uint64(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))
	e.userData = userData
	return nil
}

// Send queues a send of all of b (not empty) to socket fd: MSG_WAITALL
// makes the kernel retry a short send, so success means every byte went;
// MSG_NOSIGNAL, a closed peer is an error, not SIGPIPE.
func (r *Ring) Send(fd int, b []byte, userData uint64, flags uint8) error {
	e, err := r.next()
	if err != nil {
		return err
	}
	e.opcode, e.flags, e.fd = opSend, flags, int32(fd)
	e.addr, e.len = uint64(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))
	e.opFlags = unix.MSG_WAITALL | unix.MSG_NOSIGNAL
	e.userData = userData
	return nil
}

// Read queues a read into b (not empty) from fd at the file's position.
func (r *Ring) Read(fd int, b []byte, userData uint64) error {
	e, err := r.next()
	if err != nil {
		return err
	}
	e.opcode, e.fd = opRead, int32(fd)
	e.addr, e.len = uint64(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))
	e.off = ^uint64(0) // -1: the current position, as read(2)
	e.userData = userData
	return nil
}

// CancelFD queues the cancellation of every started entry on fd; its own
// completion's Res is how many were found (0: none). An entry linked
// behind another one is cancelled with the one it waits for.
func (r *Ring) CancelFD(fd int, userData uint64) error {
	e, err := r.next()
	if err != nil {
		return err
	}
	e.opcode, e.fd = opAsyncCancel, int32(fd)
	e.opFlags = cancelFD | cancelAll
	e.userData = userData
	return nil
}

// CancelUserData queues the cancellation of every started entry with
// target's user data.
func (r *Ring) CancelUserData(target, userData uint64) error {
	e, err := r.next()
	if err != nil {
		return err
	}
	e.opcode, e.fd = opAsyncCancel, -1
	e.addr = target
	e.opFlags = cancelAll
	e.userData = userData
	return nil
}

// HotUntimed is Wait's hot wait with no kernel timer: the runtime's
// preemption signal, sent to a thread that has held its P for about 10 ms,
// ends it instead.
const HotUntimed = -1

// Wait submits what is queued and waits for at least one completion:
// first through a raw system call (the thread keeps its Go P, as a
// computing goroutine would) for at most hotMS milliseconds, or with
// HotUntimed until a signal interrupts it; then, if nothing came, through
// an ordinary one that gives the P up while blocked. With hotMS 0 it only
// waits the ordinary way. A timed hot wait's EINTR (the runtime's
// preemption signal) returns with nothing done but the submission; an
// untimed one's goes on to the ordinary wait, so an idle loop gives its P
// up. The caller reads the completions either way.
func (r *Ring) Wait(hotMS int) error {
	if hotMS != 0 {
		n, err := r.enter(1, hotMS, true)
		if err == nil || n > 0 || r.Ready() || errors.Is(err, unix.EBUSY) {
			return nil // EBUSY: completions wait in the kernel; read ours first
		}
		switch {
		case hotMS == HotUntimed && errors.Is(err, unix.EINTR):
		case !errors.Is(err, unix.ETIME):
			return err
		}
	}
	if _, err := r.enter(1, -1, false); err != nil && !errors.Is(err, unix.EBUSY) {
		return err
	}
	return nil
}

// enter publishes queued entries and calls io_uring_enter. timeoutMS < 0
// waits without a time limit; raw chooses RawSyscall6 over Syscall6.
func (r *Ring) enter(minComplete uint32, timeoutMS int, raw bool) (int, error) {
	atomic.StoreUint32(r.sqTail, r.tail)
	toSubmit := r.tail - atomic.LoadUint32(r.sqHead)
	flags := uintptr(enterGetEvents)
	var arg, argSz uintptr
	if timeoutMS >= 0 {
		r.ts = unix.NsecToTimespec(int64(timeoutMS) * 1e6)
		r.arg = geteventsArg{ts: uint64(uintptr(unsafe.Pointer(&r.ts)))}
		flags |= enterExtArg
		arg, argSz = uintptr(unsafe.Pointer(&r.arg)), unsafe.Sizeof(r.arg)
	}
	call := unix.Syscall6
	if raw {
		call = unix.RawSyscall6
	}
	n, _, e := call(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), flags, arg, argSz)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Ready reports whether a completion waits to be read.
func (r *Ring) Ready() bool {
	return atomic.LoadUint32(r.cqTail) != *r.cqHead
}

// Completions calls f for each completion posted so far, in order, and
// marks them read. f may queue entries.
func (r *Ring) Completions(f func(CQE)) {
	head := *r.cqHead
	for {
		tail := atomic.LoadUint32(r.cqTail)
		if head == tail {
			break
		}
		for ; head != tail; head++ {
			c := r.cqes[head&r.cqMask]
			atomic.StoreUint32(r.cqHead, head+1)
			f(c)
		}
	}
}
