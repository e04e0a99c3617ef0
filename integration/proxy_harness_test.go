//go:build !directonly

package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nlproxy/nlproxy/integration/pgtest"
	"github.com/nlproxy/nlproxy/proxy"
)

// proxyOptions tune the in-process proxy a test starts.
type proxyOptions struct {
	TLS      *tlsMaterial
	Upstream string // overrides the cluster's address
	// UpstreamTLS, when set, is the upstream TLS mode (default disable).
	UpstreamTLS proxy.UpstreamTLS
	// UpstreamRoots verifies the upstream's certificate in the verify modes.
	UpstreamRoots  *x509.CertPool
	MaxMessageSize int
	// Verbose logs the proxy through the test log (noisy; for debugging).
	Verbose bool
}

// viaProxy says the tests run through nlproxy (the directonly build tag
// points them at Postgres itself to validate the harness).
const viaProxy = true

type proxyHandle struct {
	Addr string
	srv  *proxy.Server
}

// startProxy serves an in-process proxy in front of c on a loopback port and
// shuts it down when the test ends.
func startProxy(t testing.TB, c *pgtest.Cluster, opts proxyOptions) *proxyHandle {
	t.Helper()
	addr := opts.Upstream
	if addr == "" {
		addr = c.Addr()
	}
	log := zap.NewNop()
	if opts.Verbose {
		log = zaptest.NewLogger(t)
	}
	up := proxy.Upstream{Address: addr, TLS: proxy.UpstreamTLSDisable}
	if opts.UpstreamTLS != "" {
		up.TLS = opts.UpstreamTLS
		up.TLSConfig = &tls.Config{RootCAs: opts.UpstreamRoots, ServerName: "127.0.0.1"}
	}
	srv := &proxy.Server{
		Upstreams:      []proxy.Upstream{up},
		Logger:         log,
		MaxMessageSize: opts.MaxMessageSize,
	}
	if opts.TLS != nil {
		srv.TLSConfig = opts.TLS.Config
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Logf("proxy shutdown: %v", err)
			_ = srv.Close()
		}
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, proxy.ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return &proxyHandle{Addr: ln.Addr().String(), srv: srv}
}

// startProxyUpstreamTLS fronts a TLS cluster, verifying its certificate.
func startProxyUpstreamTLS(t testing.TB, c *pgtest.Cluster, client tlsMaterial) *proxyHandle {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CertPEM) {
		t.Fatal("cluster certificate does not parse")
	}
	return startProxy(t, c, proxyOptions{TLS: &client, UpstreamTLS: proxy.UpstreamTLSVerifyFull, UpstreamRoots: roots})
}
