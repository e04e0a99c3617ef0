package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestAuditLog checks the info-level trail of one good TLS session, one
// refused login and one Unix-socket session: who, from where, how, how long,
// how many bytes, and never a password or statement text.
func TestAuditLog(t *testing.T) {
	needPG(t)
	core, logs := observer.New(zapcore.InfoLevel)
	tlsCfg, _ := proxyTLS(t)
	srv := &Server{
		Upstreams: []Upstream{{Address: scramPG.Addr(), TLS: UpstreamTLSDisable}},
		TLSConfig: tlsCfg,
		Logger:    zap.New(core),
	}
	addr := serve(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const secretQuery = "SELECT 'audit-canary-value'"
	c, err := pgx.Connect(ctx, proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "postgres", "require"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, secretQuery); err != nil {
		t.Fatal(err)
	}
	pid := c.PgConn().PID()
	clientAddr := c.PgConn().Conn().LocalAddr().String()
	c.Close(ctx)

	const badPassword = "audit-wrong-password"
	if _, err := pgx.Connect(ctx, proxyURL(addr, pgtest.Superuser, badPassword, "postgres", "disable")); pgCode(err) != "28P01" {
		t.Fatalf("wrong password: err = %v, want 28P01", err)
	}

	dir, port := serveUnix(t, srv)
	uc, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres", dir, port, pgtest.Superuser, pgtest.SuperuserPassword))
	if err != nil {
		t.Fatal(err)
	}
	uc.Close(ctx)

	srv.Close()
	srv.waitSessions() // every session has logged its end

	entries := logs.All()
	var lines []string
	for _, e := range entries {
		lines = append(lines, e.Message+" "+fmt.Sprint(e.ContextMap()))
		if e.Level < zapcore.InfoLevel {
			continue
		}
		for _, f := range e.Context {
			v := fmt.Sprint(f.String, f.Interface)
			if strings.Contains(v, pgtest.SuperuserPassword) || strings.Contains(v, badPassword) || strings.Contains(v, "audit-canary") {
				t.Errorf("log line %q leaks %s=%s", e.Message, f.Key, v)
			}
		}
	}
	t.Logf("audit log:\n%s", strings.Join(lines, "\n"))

	find := func(msg string, match map[string]any) map[string]any {
		t.Helper()
		for _, e := range entries {
			if e.Message != msg || e.Level != zapcore.InfoLevel {
				continue
			}
			m := e.ContextMap()
			ok := true
			for k, v := range match {
				if fmt.Sprint(m[k]) != fmt.Sprint(v) {
					ok = false
				}
			}
			if ok {
				return m
			}
		}
		t.Errorf("no info line %q with %v", msg, match)
		return nil
	}
	who := map[string]any{"client": clientAddr}
	find("connection accepted", who)
	find("session ready", map[string]any{"client": clientAddr, "user": pgtest.Superuser, "database": "postgres", "tls": true, "backend_pid": pid})
	if m := find("session ended", map[string]any{"client": clientAddr, "user": pgtest.Superuser}); m != nil {
		if in, out := m["bytes_from_client"].(int64), m["bytes_to_client"].(int64); in <= int64(len(secretQuery)) || out <= 0 {
			t.Errorf("session ended: bytes in %d, out %d", in, out)
		}
		if d, _ := m["duration"].(time.Duration); d <= 0 {
			t.Errorf("session ended: duration %v", m["duration"])
		}
	}
	find("authentication failed", map[string]any{"user": pgtest.Superuser, "database": "postgres", "sqlstate": "28P01", "tls": false})
	find("session ready", map[string]any{"client": "[local]", "tls": false, "user": pgtest.Superuser})
	find("session ended", map[string]any{"client": "[local]"})
}
