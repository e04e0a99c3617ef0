//go:build directonly

package integration_test

import (
	"testing"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// proxyOptions tune the in-process proxy a test starts.
type proxyOptions struct {
	TLS            *tlsMaterial
	Upstream       string // overrides the cluster's address
	MaxMessageSize int
	GoroutineRelay bool
}

// viaProxy is a stand-in until the proxy package builds: it points at Postgres.
const viaProxy = false

type proxyHandle struct{ Addr string }

func startProxy(t testing.TB, c *pgcluster.Cluster, opts proxyOptions) *proxyHandle {
	t.Helper()
	return &proxyHandle{Addr: c.Addr()}
}

func startProxyUpstreamTLS(t testing.TB, c *pgcluster.Cluster, _ tlsMaterial) *proxyHandle {
	t.Helper()
	t.Skip("needs the proxy")
	return nil
}

func startProxyTLSBothLegs(t testing.TB, c *pgcluster.Cluster, _ tlsMaterial, _ bool) *proxyHandle {
	t.Helper()
	t.Skip("needs the proxy")
	return nil
}
