//go:build unix

package proxy

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxSocketPath is the usable length of sun_path (108 bytes on Linux, 104 on
// the BSDs, one of them the terminating NUL); Postgres has the same limit.
const maxSocketPath = 103

// SocketPath is where Postgres (and nlproxy) put the Unix socket for port in
// dir, so that `psql -h dir -p port` finds it.
func SocketPath(dir string, port int) string {
	return filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port))
}

// ListenUnix creates dir/.s.PGSQL.<port> with mode 0777 (Postgres's default
// unix_socket_permissions) and a lock file next to it, .s.PGSQL.<port>.lock,
// holding this process's PID, as Postgres does. A lock left by a process
// that is gone, and the socket it left, are removed first; a live owner is an
// error. Closing the listener removes both files.
func ListenUnix(dir string, port int) (net.Listener, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("proxy: unix socket: bad port %d", port)
	}
	sock := SocketPath(dir, port)
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("proxy: unix socket path %q is longer than %d bytes", sock, maxSocketPath)
	}
	lock := sock + ".lock"
	if err := createSocketLock(lock, sock, dir, port); err != nil {
		return nil, err
	}
	// We hold the lock: a socket file still there is a stale one.
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove(lock)
		return nil, fmt.Errorf("proxy: removing stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		_ = os.Remove(lock)
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		ln.Close()
		_ = os.Remove(lock)
		return nil, fmt.Errorf("proxy: unix socket permissions: %w", err)
	}
	return &unixListener{UnixListener: ln, lock: lock}, nil
}

// unixListener removes its lock file on Close (the socket file is removed by
// net.UnixListener itself).
type unixListener struct {
	*net.UnixListener
	lock string
	once sync.Once
	err  error
}

func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if err := os.Remove(l.lock); err != nil && !errors.Is(err, fs.ErrNotExist) && l.err == nil {
			l.err = err
		}
	})
	return l.err
}

// createSocketLock takes the lock file with O_EXCL. An existing lock is stale
// when its PID is not running (or is ours or our parent's, as after a restart
// in a container) and nothing answers on the socket.
func createSocketLock(lock, sock, dir string, port int) error {
	content := fmt.Sprintf("%d\n\n%d\n%d\n%s\n", os.Getpid(), time.Now().Unix(), port, dir)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return fillLock(f, lock, content)
		}
		if !errors.Is(err, fs.ErrExist) || attempt >= 10 {
			return fmt.Errorf("proxy: lock file: %w", err)
		}
		if err := removeStaleLock(lock, sock); err != nil {
			return err
		}
	}
}

// fillLock fills the lock file just created, and removes it again when
// that fails.
func fillLock(f *os.File, lock, content string) error {
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(lock)
		return fmt.Errorf("proxy: writing lock file: %w", werr)
	}
	return nil
}

// removeStaleLock removes an existing lock file, unless the server it names
// may still be running; a lock file removed meanwhile is gone already.
func removeStaleLock(lock, sock string) error {
	data, err := os.ReadFile(lock)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	if err != nil {
		return fmt.Errorf("proxy: lock file: %w", err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return fmt.Errorf("proxy: lock file %s is empty or corrupt: another server may be starting; if not, remove it", lock)
	}
	if pid != os.Getpid() && pid != os.Getppid() && processAlive(pid) {
		return fmt.Errorf("proxy: unix socket %s is in use: lock file %s belongs to running process %d", sock, lock, pid)
	}
	if socketAnswers(sock) {
		return fmt.Errorf("proxy: unix socket %s is in use (a server answers on it; lock file %s names process %d)", sock, lock, pid)
	}
	if err := os.Remove(lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("proxy: removing stale lock file: %w", err)
	}
	return nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func socketAnswers(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
