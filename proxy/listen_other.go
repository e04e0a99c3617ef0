//go:build !unix

package proxy

import (
	"errors"
	"net"
	"path/filepath"
	"strconv"
)

// SocketPath is where Postgres puts the Unix socket for port in dir.
func SocketPath(dir string, port int) string {
	return filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port))
}

// ListenUnix is only available on Unix systems.
func ListenUnix(dir string, port int) (net.Listener, error) {
	return nil, errors.New("proxy: unix sockets are not supported on this platform")
}
