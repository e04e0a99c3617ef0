//go:build unix

package workload

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock beside path (path+".lock": path itself
// is replaced by rename, so it cannot carry the lock), so that a proxy's
// save and `nlproxy workload forget` do not interleave.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("workload: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("workload: lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
