package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// With -tls, every target that has a TLS setup here offers TLS to pgbench
// (sslmode=require) and speaks TLS to Postgres (ssl=on with a throwaway
// certificate), so a TLS config measures encryption on both sides, as a
// production pooler between TLS clients and a TLS-only server sees it. Neither
// side verifies certificates (sslmode=require): the handshake and record
// costs are the same, and one throwaway certificate serves every proxy.

// tlsFiles is the proxies' client-facing certificate and key, as PEM files.
type tlsFiles struct {
	cert, key       string
	certPEM, keyPEM []byte
}

// writeTLSFiles makes a fresh self-signed certificate for 127.0.0.1 and
// localhost and writes it into dir.
func writeTLSFiles(dir string) (*tlsFiles, error) {
	certPEM, keyPEM, err := pgcluster.SelfSignedCert()
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	f := &tlsFiles{cert: filepath.Join(dir, "proxy.crt"), key: filepath.Join(dir, "proxy.key"), certPEM: certPEM, keyPEM: keyPEM}
	if err := os.WriteFile(f.cert, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	if err := os.WriteFile(f.key, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("tls key: %w", err)
	}
	return f, nil
}

// copyTo writes the certificate and key into dir (a peer's own directory, so
// a peer running as another user can read them) and returns their paths.
func (f *tlsFiles) copyTo(dir string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(cert, f.certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("tls certificate: %w", err)
	}
	if err := os.WriteFile(key, f.keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("tls key: %w", err)
	}
	return cert, key, nil
}

// tlsCapable reports whether proxybench sets up TLS for target t.
func tlsCapable(t string) bool {
	switch t {
	case targetDirect, targetPgbouncer, targetPgbouncerSrc, targetPgdog,
		targetNlproxy, targetNlproxyEngine, targetNlproxyAlt, targetNlproxyLearn:
		return true
	}
	return false
}

// tlsModes lists the TLS settings among configs: plaintext first.
func tlsModes(configs []Config) []bool {
	var plain, tls bool
	for _, c := range configs {
		plain = plain || !c.TLS
		tls = tls || c.TLS
	}
	var out []bool
	if plain {
		out = append(out, false)
	}
	if tls {
		out = append(out, true)
	}
	return out
}

// epKey names a started endpoint: the target, plus "+tls" for its TLS twin.
func epKey(target string, tls bool) string {
	if tls {
		return target + "+tls"
	}
	return target
}

// upstreamURLFor sets the sslmode of a Postgres URL: require with TLS.
func upstreamURLFor(raw string, tls bool) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("sslmode", sslmode(tls))
	u.RawQuery = q.Encode()
	return u.String()
}

// nlproxyTLSArgs are nlproxy's options for client TLS; the upstream's TLS
// comes from the upstream URL's sslmode.
func nlproxyTLSArgs(f *tlsFiles) []string {
	if f == nil {
		return nil
	}
	return []string{"--tls-cert", f.cert, "--tls-key", f.key, "--require-tls"}
}

// errNotTLS means a TLS target's connection to Postgres was plaintext.
var errNotTLS = errors.New("the server session is not TLS")

// checkTLS proves a TLS endpoint is TLS on both sides: the connection to it
// uses sslmode=require (refused if it does not offer TLS), and the server
// session behind it, in pg_stat_ssl, is encrypted.
func checkTLS(ctx context.Context, name, rawURL string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(cctx, rawURL)
	if err != nil {
		return fmt.Errorf("%s: TLS connection: %w", name, err)
	}
	defer conn.Close(cctx)
	if conn.Conn() == nil {
		return fmt.Errorf("%s: no connection", name)
	}
	if _, ok := conn.Conn().(interface{ ConnectionState() tls.ConnectionState }); !ok {
		return fmt.Errorf("%s: the client connection is not TLS", name)
	}
	rs, err := conn.Exec(cctx, "SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_catalog.pg_backend_pid()").ReadAll()
	if err != nil {
		return fmt.Errorf("%s: pg_stat_ssl: %w", name, err)
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 || string(rs[0].Rows[0][0]) != "t" {
		return fmt.Errorf("%s: %w", name, errNotTLS)
	}
	return nil
}
