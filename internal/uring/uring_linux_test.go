//go:build linux

package uring

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// newRing sets up a ring on the test's locked thread, skipping where the
// kernel refuses io_uring.
func newRing(t *testing.T) *Ring {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	r, err := New(8)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, ErrUnsupported) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// pair is a non-blocking stream socket pair, as the relay's sockets are.
func pair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// next waits for completions and returns them.
func next(t *testing.T, r *Ring) []CQE {
	t.Helper()
	for !r.Ready() {
		if err := r.Wait(0); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
	}
	var got []CQE
	r.Completions(func(c CQE) { got = append(got, c) })
	return got
}

// all waits for n completions and returns their results by user data.
func all(t *testing.T, r *Ring, n int) map[uint64]int32 {
	t.Helper()
	got := map[uint64]int32{}
	for len(got) < n {
		for _, c := range next(t, r) {
			got[c.UserData] = c.Res
		}
	}
	if len(got) != n {
		t.Fatalf("completions %v, want %d", got, n)
	}
	return got
}

// A receive on a non-blocking socket with nothing to read waits for data
// rather than failing with EAGAIN; a linked send that succeeds posts nothing
// and starts the receive; the receive's completion carries the bytes.
func TestSendLinkedRecv(t *testing.T) {
	r := newRing(t)
	a, b := pair(t)
	out, in := []byte("hello"), make([]byte, 16)
	if err := r.Send(a, out, 1, Link|SkipSuccess); err != nil {
		t.Fatal(err)
	}
	if err := r.Recv(a, in, 2, 0); err != nil {
		t.Fatal(err)
	}
	// The peer reads what was sent and answers.
	var got [16]byte
	for {
		if err := r.Wait(1); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if r.Ready() {
			t.Fatal("a completion before the peer answered")
		}
		n, err := unix.Read(b, got[:])
		if err == nil {
			if string(got[:n]) != "hello" {
				t.Fatalf("peer read %q", got[:n])
			}
			break
		}
	}
	if _, err := unix.Write(b, []byte("world!")); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 1); got[2] != 6 || string(in[:6]) != "world!" {
		t.Fatalf("completions %v, buffer %q", got, in)
	}
}

// A failed send posts its error and cancels the entry linked behind it
// without a completion of its own (the head skips success completions,
// which also skips its link's cancellations): the send's completion ends
// the chain, and nothing is left on the socket to cancel.
func TestSendFailureCancelsLink(t *testing.T) {
	r := newRing(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := fds[0]
	defer unix.Close(a)
	unix.Close(fds[1])
	in := make([]byte, 4)
	if err := r.Send(a, []byte("x"), 1, Link|SkipSuccess); err != nil {
		t.Fatal(err)
	}
	if err := r.Recv(a, in, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 1); got[1] != -int32(unix.EPIPE) {
		t.Fatalf("completions %v, want the send's EPIPE alone", got)
	}
	if err := r.CancelFD(a, 3); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 1); got[3] != 0 {
		t.Fatalf("completions %v, want the cancellation alone, none found", got)
	}
}

// Cancelling by descriptor ends a waiting receive (-ECANCELED) and reports
// how many it found (0 once nothing is left).
func TestCancelFD(t *testing.T) {
	r := newRing(t)
	a, _ := pair(t)
	in := make([]byte, 4)
	if err := r.Recv(a, in, 2, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(1); err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.ETIME) {
		t.Fatal(err)
	}
	if err := r.CancelFD(a, 3); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 2); got[2] != -int32(unix.ECANCELED) || got[3] != 1 {
		t.Fatalf("completions %v", got)
	}
	if err := r.CancelFD(a, 4); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 1); got[4] != 0 {
		t.Fatalf("completions %v, want 0 found", got)
	}
}

// A read on a blocking eventfd waits for a write (the loop's wake-up).
func TestReadEventfd(t *testing.T) {
	r := newRing(t)
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var b [8]byte
	if err := r.Read(fd, b[:], 5); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(1); err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.ETIME) {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatal("read completed before the write")
	}
	if _, err := unix.Write(fd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if got := all(t, r, 1); got[5] != 8 || b[0] != 1 {
		t.Fatalf("completions %v", got)
	}
}

// An untimed hot wait returns with the completion it waited for, whether or
// not signals (here the runtime's own preemption signal, SIGURG) interrupt
// it first: an interrupted one goes on as an ordinary wait.
func TestHotUntimedWait(t *testing.T) {
	r := newRing(t)
	a, b := pair(t)
	in := make([]byte, 16)
	if err := r.Recv(a, in, 7, 0); err != nil {
		t.Fatal(err)
	}
	// Submitted first: an enter that submits returns the count even when a
	// signal then ends its wait, so only later waits show what one does.
	if _, err := r.enter(0, -1, false); err != nil {
		t.Fatal(err)
	}
	pid, tid := unix.Getpid(), unix.Gettid()
	go func() {
		for range 50 {
			if err := unix.Tgkill(pid, tid, unix.SIGURG); err != nil {
				t.Errorf("tgkill: %v", err)
			}
		}
		if _, err := unix.Write(b, []byte("late")); err != nil {
			t.Errorf("write: %v", err)
		}
	}()
	for !r.Ready() {
		// The ordinary wait's own EINTR comes back, as any wait's does; a
		// nil return with nothing to read would be an interrupted hot wait
		// given back (a loop would spin hot on it, never giving its P up).
		err := r.Wait(HotUntimed)
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("Wait: %v", err)
		}
		if err == nil && !r.Ready() {
			t.Fatal("Wait returned nil with no completion")
		}
	}
	var got []CQE
	r.Completions(func(c CQE) { got = append(got, c) })
	if len(got) != 1 || got[0].UserData != 7 || string(in[:max(got[0].Res, 0)]) != "late" {
		t.Fatalf("completions %+v, buffer %q; want one receive of \"late\"", got, in)
	}
}
