package integration_test

import (
	"testing"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// newScramCluster starts a cluster whose TCP clients authenticate with
// SCRAM-SHA-256, so every proxied session relays a real SASL exchange.
func newScramCluster(t *testing.T, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	return pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256", Settings: settings})
}
