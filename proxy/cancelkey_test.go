package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRegisterKey: keys are (real pid, proxy secret); the same PID from two
// upstreams is fine, an identical (pid, secret) is drawn again.
func TestRegisterKey(t *testing.T) {
	s1 := []byte{1, 2, 3, 4}
	s2 := []byte{5, 6, 7, 8}
	long := bytes.Repeat([]byte{9}, 32)
	type reg struct {
		pid       uint32
		secretLen int
		want      []byte
	}
	for _, tc := range []struct {
		name  string
		draws []byte // what the random source yields, in order
		regs  []reg
	}{
		{"distinct pids may share a secret", cat(s1, s1), []reg{{42, 4, s1}, {43, 4, s1}}},
		{"same pid, colliding secret is redrawn", cat(s1, s1, s2), []reg{{42, 4, s1}, {42, 4, s2}}},
		{"collides twice", cat(s1, s1, s1, s2), []reg{{42, 4, s1}, {42, 4, s2}}},
		{"protocol 3.2 secret length", long, []reg{{7, 32, long}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &Server{keyRand: bytes.NewReader(tc.draws)}
			sessions := make([]*session, len(tc.regs))
			for i, r := range tc.regs {
				sessions[i] = &session{}
				got, err := srv.registerKey(sessions[i], r.pid, r.secretLen)
				if err != nil {
					t.Fatalf("register %d: %v", i, err)
				}
				if !bytes.Equal(got, r.want) {
					t.Fatalf("register %d: secret %x, want %x", i, got, r.want)
				}
			}
			for i, r := range tc.regs {
				if got := srv.keys[cancelKey(r.pid, r.want)]; got != sessions[i] {
					t.Errorf("key %d maps to %p, want session %p", i, got, sessions[i])
				}
			}
			if len(srv.keys) != len(tc.regs) {
				t.Errorf("%d keys for %d sessions", len(srv.keys), len(tc.regs))
			}
		})
	}
	t.Run("random source fails", func(t *testing.T) {
		srv := &Server{keyRand: bytes.NewReader(nil)}
		if _, err := srv.registerKey(&session{}, 1, 4); !errors.Is(err, io.EOF) {
			t.Fatalf("err = %v, want a wrapped EOF", err)
		}
	})
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestClientSeesRealPID: BackendKeyData carries the backend's PID and a secret
// that is not the backend's; a CancelRequest with the proxy's secret cancels,
// one with a wrong secret for the same PID is ignored.
func TestClientSeesRealPID(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, nil)
	c := connect(t, trustURL(addr))
	pid := uint32(queryInt(t, c, "SELECT pg_backend_pid()"))
	if got := c.PgConn().PID(); got != pid {
		t.Fatalf("client pid %d, backend pid %d", got, pid)
	}
	clientSecret := c.PgConn().SecretKey()
	srv.mu.Lock()
	var sess *session
	for s := range srv.conns {
		sess = s
	}
	srv.mu.Unlock()
	if sess == nil {
		t.Fatal("no session registered")
	}
	realPID, secret := sess.sh.backendKey()
	realSecret := append([]byte(nil), secret...)
	if realPID != pid || len(realSecret) != len(clientSecret) {
		t.Fatalf("session holds pid %d secret %x; client has pid %d secret %x", realPID, realSecret, pid, clientSecret)
	}
	if bytes.Equal(realSecret, clientSecret) {
		t.Fatal("client was handed the backend's real cancel secret")
	}

	// Only the proxy's secret is a key; the backend's own is not one.
	srv.mu.Lock()
	_, knownReal := srv.keys[cancelKey(pid, realSecret)]
	_, knownProxy := srv.keys[cancelKey(pid, clientSecret)]
	srv.mu.Unlock()
	if knownReal || !knownProxy {
		t.Fatalf("key map: real secret known=%v, proxy secret known=%v", knownReal, knownProxy)
	}

	// Over the wire: the proxy's key cancels a running statement.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "SELECT pg_sleep(60)")
		errc <- err
	}()
	admin := connect(t, trustURL(addr))
	waitActive(t, admin, pid)
	if err := sendRawCancel(addr, pid, clientSecret); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; pgCode(err) != "57014" {
		t.Fatalf("err = %v, want 57014", err)
	}
}

// waitActive waits until backend pid is running a statement.
func waitActive(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		err := admin.QueryRow(context.Background(),
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", int32(pid)).Scan(&active)
		if err != nil {
			t.Fatal(err)
		}
		if active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never became active", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sendRawCancel(addr string, pid uint32, secret []byte) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write(encodeCancel(pid, secret)); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.Copy(io.Discard, conn) // the proxy closes once it has forwarded the cancel
	return nil
}
