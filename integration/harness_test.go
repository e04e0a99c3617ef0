package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// target is where a client connects: the proxy (or, for reference runs,
// Postgres itself) with the credentials and TLS settings to use.
type target struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
	// CAFile is set when the endpoint speaks TLS; clients verify against it.
	CAFile string
	// ChannelBinding, when set, is the client's channel_binding (disable
	// for a proxy with TLS on both legs, see TestTLSBothLegs).
	ChannelBinding string
}

func targetFor(t testing.TB, addr, database string) target {
	t.Helper()
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("split %q: %v", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("port %q: %v", portStr, err)
	}
	return target{Host: host, Port: port, User: pgtest.Superuser, Password: pgtest.SuperuserPassword, Database: database}
}

func (tg target) Addr() string { return net.JoinHostPort(tg.Host, strconv.Itoa(tg.Port)) }

func (tg target) sslmode() string {
	if tg.CAFile != "" {
		return "verify-full"
	}
	return "disable"
}

// URL is a libpq URL understood by psql, pgbench, pgx and psycopg.
func (tg target) URL() string {
	u := url.URL{Scheme: "postgres", Host: tg.Addr(), Path: "/" + tg.Database, User: url.UserPassword(tg.User, tg.Password)}
	q := url.Values{"sslmode": {tg.sslmode()}}
	if tg.CAFile != "" {
		q.Set("sslrootcert", tg.CAFile)
	}
	if tg.ChannelBinding != "" {
		q.Set("channel_binding", tg.ChannelBinding)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Env is the libpq environment for the target; every external client script
// reads its connection settings from these variables.
func (tg target) Env() []string {
	env := append(os.Environ(),
		"PGHOST="+tg.Host,
		"PGPORT="+strconv.Itoa(tg.Port),
		"PGUSER="+tg.User,
		"PGPASSWORD="+tg.Password,
		"PGDATABASE="+tg.Database,
		"PGSSLMODE="+tg.sslmode(),
		"PGCONNECT_TIMEOUT=10",
	)
	if tg.CAFile != "" {
		env = append(env, "PGSSLROOTCERT="+tg.CAFile)
	}
	return env
}

func (tg target) pgxConfig(t testing.TB) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(tg.URL())
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	cfg.ConnectTimeout = 10 * time.Second
	return cfg
}

func (tg target) connect(ctx context.Context, t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(ctx, tg.pgxConfig(t))
	if err != nil {
		t.Fatalf("connect %s: %v", tg.Addr(), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (tg target) connectPg(ctx context.Context, t testing.TB) *pgconn.PgConn {
	t.Helper()
	conn, err := pgconn.ConnectConfig(ctx, &tg.pgxConfig(t).Config)
	if err != nil {
		t.Fatalf("connect %s: %v", tg.Addr(), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// tlsMaterial is a self-signed certificate for the proxy's listener and the
// file clients use to verify it.
type tlsMaterial struct {
	Config *tls.Config
	CAFile string
}

func newTLSMaterial(t testing.TB) tlsMaterial {
	t.Helper()
	certPEM, keyPEM, err := pgtest.SelfSignedCert()
	if err != nil {
		t.Fatalf("cert: %v", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("key pair: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return tlsMaterial{Config: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, CAFile: caFile}
}

func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return fmt.Sprintf("<no SQLSTATE: %v>", err)
}
