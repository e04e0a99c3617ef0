// Package pgtest is the test-facing side of internal/pgcluster: throwaway
// PostgreSQL clusters tied to a test's lifetime, and names unique to one run.
// Everything that does not need package testing lives in pgcluster, so the
// product binary never links this package.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// Superuser is the bootstrap superuser of every cluster.
const Superuser = pgcluster.Superuser

// SuperuserPassword is the superuser's password, set so password auth methods work.
const SuperuserPassword = pgcluster.SuperuserPassword

// ErrNoPostgres means the server binaries could not be found.
var ErrNoPostgres = pgcluster.ErrNoPostgres

// Start creates and starts a cluster. The caller must call Stop.
func Start(ctx context.Context, opts pgcluster.Options) (*pgcluster.Cluster, error) {
	return pgcluster.Start(ctx, opts)
}

// FindBinDir returns the directory holding initdb, pg_ctl and postgres.
func FindBinDir() (string, error) { return pgcluster.FindBinDir() }

// SelfSignedCert returns a fresh PEM certificate and key for 127.0.0.1/localhost,
// for tests that terminate TLS elsewhere (e.g. at the proxy).
func SelfSignedCert() (certPEM, keyPEM []byte, err error) { return pgcluster.SelfSignedCert() }

// New starts a cluster for a test and stops it when the test ends. It skips the
// test with a clear message when the server binaries cannot be found and fails
// it on any other start error.
func New(tb testing.TB, opts pgcluster.Options) *pgcluster.Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if errors.Is(err, ErrNoPostgres) {
		tb.Skip(err.Error())
	}
	if err != nil {
		tb.Fatalf("start postgres: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Logf("stop postgres: %v", err)
		}
	})
	return c
}

// UniqueName returns prefix (lower-cased, anything but letters, digits and
// '_' replaced by '_', so t.Name() will do) plus a random suffix, short enough
// for a Postgres identifier: a database or role name that cannot collide with
// one left by an earlier test, a -count=N repetition or a parallel run on a
// cluster shared by a whole package.
func UniqueName(tb testing.TB, prefix string) string {
	tb.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("unique name: %v", err)
	}
	prefix = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, prefix)
	const maxPrefix = 63 - 1 - 2*len(b)
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}
