//go:build !directonly

package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
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
	// UnixSocket also serves on a Unix socket (proxyHandle.SocketDir/SocketPort).
	UnixSocket bool
	// Verbose logs the proxy through the test log (noisy; for debugging).
	Verbose bool
	// GoroutineRelay relays plaintext sessions on goroutines too (by
	// default the event loop carries them on Linux).
	GoroutineRelay bool
}

// viaProxy says the tests run through nlproxy (the directonly build tag
// points them at Postgres itself to validate the harness).
const viaProxy = true

type proxyHandle struct {
	Addr string
	// SocketDir and SocketPort locate the Unix socket (host=SocketDir
	// port=SocketPort) when proxyOptions.UnixSocket is set.
	SocketDir  string
	SocketPort int
	srv        *proxy.Server
}

// startProxy serves an in-process proxy in front of c on a loopback port and
// shuts it down when the test ends.
func startProxy(t testing.TB, c *pgcluster.Cluster, opts proxyOptions) *proxyHandle {
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
		GoroutineRelay: opts.GoroutineRelay,
	}
	if opts.TLS != nil {
		srv.TLSConfig = opts.TLS.Config
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	lns := []net.Listener{ln}
	h := &proxyHandle{Addr: ln.Addr().String(), srv: srv}
	if opts.UnixSocket {
		// Short dir: socket paths are limited to ~100 bytes.
		dir, err := os.MkdirTemp("", "nlpsock")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		h.SocketDir, h.SocketPort = dir, ln.Addr().(*net.TCPAddr).Port
		uln, err := proxy.ListenUnix(dir, h.SocketPort)
		if err != nil {
			t.Fatalf("listen unix: %v", err)
		}
		lns = append(lns, uln)
	}
	done := make(chan error, len(lns))
	for _, l := range lns {
		go func() { done <- srv.Serve(l) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Logf("proxy shutdown: %v", err)
			_ = srv.Close()
		}
		for range lns {
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, proxy.ErrServerClosed) {
					t.Errorf("Serve returned %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("Serve did not return after Shutdown")
			}
		}
	})
	return h
}

// startProxyUpstreamTLS fronts a TLS cluster, verifying its certificate.
func startProxyUpstreamTLS(t testing.TB, c *pgcluster.Cluster, client tlsMaterial) *proxyHandle {
	t.Helper()
	return startProxyTLSBothLegs(t, c, client, false)
}

// startProxyTLSBothLegs is startProxyUpstreamTLS on the relay goroutineRelay
// says (TLS sessions are on the event loop by default on Linux).
func startProxyTLSBothLegs(t testing.TB, c *pgcluster.Cluster, client tlsMaterial, goroutineRelay bool) *proxyHandle {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CertPEM) {
		t.Fatal("cluster certificate does not parse")
	}
	return startProxy(t, c, proxyOptions{TLS: &client, UpstreamTLS: proxy.UpstreamTLSVerifyFull, UpstreamRoots: roots, GoroutineRelay: goroutineRelay})
}
