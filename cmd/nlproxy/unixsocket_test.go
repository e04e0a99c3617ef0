package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestUnixSocketDirConfig(t *testing.T) {
	yamlPath := filepath.Join(t.TempDir(), "nlproxy.yaml")
	if err := os.WriteFile(yamlPath, []byte("unix_socket_dir: /from/yaml\nupstreams: [{url: postgres://h/d}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default is none", []string{"--upstream", "postgres://h/d"}, nil, ""},
		{"yaml", []string{"--config", yamlPath}, nil, "/from/yaml"},
		{"env beats yaml", []string{"--config", yamlPath}, map[string]string{"NLPROXY_UNIX_SOCKET_DIR": "/from/env"}, "/from/env"},
		{"flag beats env", []string{"--config", yamlPath, "--unix-socket-dir", "/from/flag"}, map[string]string{"NLPROXY_UNIX_SOCKET_DIR": "/from/env"}, "/from/flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.UnixSocketDir != tc.want {
				t.Fatalf("UnixSocketDir = %q, want %q", c.UnixSocketDir, tc.want)
			}
		})
	}
}

// syncBuffer is a log sink shared by the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeUnixSocket runs `nlproxy serve --unix-socket-dir` and connects
// through the socket with SCRAM; on shutdown the socket and its lock go away.
func TestServeUnixSocket(t *testing.T) {
	listenAddr := regexp.MustCompile(`"msg":"nlproxy listening","addr":"127\.0\.0\.1:(\d+)"`)
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	dir, err := os.MkdirTemp("", "nlpsock") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--no-engine", "--listen", "127.0.0.1:0", "--unix-socket-dir", dir,
			"--upstream", fmt.Sprintf("host=127.0.0.1 port=%d sslmode=disable", c.Port), "--log-format", "json"},
			io.Discard, &logs)
	}()

	// The socket is named after the TCP port the kernel picked. Its file
	// appears at bind, before listen, so readiness is the "nlproxy listening"
	// line, which is logged once both listeners are up.
	var port string
	deadline := time.Now().Add(30 * time.Second)
	for port == "" {
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v\n%s", err, logs.String())
		default:
		}
		if m := listenAddr.FindStringSubmatch(logs.String()); m != nil {
			port = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not say it is listening\n%s", logs.String())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	sock := filepath.Join(dir, ".s.PGSQL."+port)
	if m, _ := filepath.Glob(filepath.Join(dir, ".s.PGSQL.*[0-9]")); len(m) != 1 || m[0] != sock {
		t.Errorf("sockets in %s: %v, want only %s", dir, m, sock)
	}
	if _, err := os.Stat(sock + ".lock"); err != nil {
		t.Errorf("lock file: %v", err)
	}

	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=postgres",
		dir, port, pgtest.Superuser, pgtest.SuperuserPassword))
	if err != nil {
		t.Fatalf("connect over the socket: %v\n%s", err, logs.String())
	}
	var n int
	if err := conn.QueryRow(cctx, "SELECT 40 + 2").Scan(&n); err != nil || n != 42 {
		t.Fatalf("query: %d, %v", n, err)
	}
	conn.Close(cctx)

	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, logs.String())
	}
	for _, p := range []string{sock, sock + ".lock"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind after shutdown (%v)", p, err)
		}
	}
}
