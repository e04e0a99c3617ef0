package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// exitWatch observes one process that is not our child (the postmaster's
// parent is pg_ctl, long gone), so Stop can return only once it has exited.
type exitWatch struct{ fd int }

// watchExit opens a pidfd for pid. A nil watch (kernel without pidfd, or the
// process already gone) waits for nothing.
func watchExit(pid int) *exitWatch {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	return &exitWatch{fd: fd}
}

func (w *exitWatch) close() {
	if w != nil {
		_ = unix.Close(w.fd)
	}
}

// wait blocks until the process has exited (a pidfd turns readable on exit,
// zombie or reaped) or timeout passes, then closes the watch.
func (w *exitWatch) wait(timeout time.Duration) error {
	if w == nil {
		return nil
	}
	defer w.close()
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return errors.New("pgcluster: postmaster still running after pg_ctl stop")
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pgcluster: wait for postmaster: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

// Exited reports whether process pid has exited: it no longer exists, or it
// is a zombie nobody has reaped yet (which holds no resources and no port).
func Exited(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	// A process reaped between the open and the read fails the read with
	// ESRCH rather than ENOENT: gone either way.
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pgcluster: %w", err)
	}
	// Format: "pid (comm) state …"; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false, fmt.Errorf("pgcluster: unexpected /proc/%d/stat %q", pid, b)
	}
	state := b[i+2]
	return state == 'Z' || state == 'X', nil
}

// keepDescriptorsOwn marks every descriptor from 3 up close-on-exec before
// pg_ctl starts a postmaster that outlives it. Go opens its own descriptors
// close-on-exec, but ones this process inherited do not have the flag: a Go
// fuzz worker's pipes to its coordinator are such. A postmaster holding them
// keeps the coordinator from ever seeing the worker end (go test -fuzz
// then hangs).
func keepDescriptorsOwn() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
