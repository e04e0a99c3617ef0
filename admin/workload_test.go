package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/workload"
)

// TestWorkloadSection: the page shows what the collector learnt — counts,
// normalised text, joins — and no literal of the statements.
func TestWorkloadSection(t *testing.T) {
	c := workload.NewCollector(workload.NewStore("", workload.Limits{}), workload.CollectorOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for _, sql := range []string{
		`SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.email = 'alice@example.com'`,
		`SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.email = 'bob@example.com'`,
		`SELEC nonsense`,
	} {
		c.Observe("shop", "analyst", 0, []byte(sql))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := &Server{Token: "tok", Workload: c}
	b := body(t, get(t, s.Handler(), "/", "Authorization", "Bearer tok"))
	for _, want := range []string{
		`id="workload"`, "captured 3", "unparsable 1", "learnt 2", "fingerprints stored 1",
		"shop: 1 fingerprints", "analyst", "t2.email = $1", "customers.id = orders.customer_id",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, leak := range []string{"alice", "bob@"} {
		if strings.Contains(b, leak) {
			t.Errorf("page shows the literal %q", leak)
		}
	}
	if off := body(t, get(t, (&Server{Token: "tok"}).Handler(), "/", "Authorization", "Bearer tok")); strings.Contains(off, `id="workload"`) {
		t.Error("workload section shown with learning off")
	}
}
