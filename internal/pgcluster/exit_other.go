//go:build !linux

package pgcluster

import (
	"errors"
	"syscall"
	"time"
)

// exitWatch is a no-op off Linux: pg_ctl stop -w is all there is to wait for.
type exitWatch struct{}

func watchExit(int) *exitWatch { return nil }

func (w *exitWatch) wait(time.Duration) error { return nil }

func (w *exitWatch) close() {}

// Exited reports whether process pid has exited.
func Exited(pid int) (bool, error) {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true, nil
	}
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false, err
	}
	return false, nil
}

// keepDescriptorsOwn is a no-op off Linux (see exit_linux.go).
func keepDescriptorsOwn() {}
