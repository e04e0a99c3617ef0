package proxy

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// recordingObserver keeps what it is shown, copied (the buffer is the proxy's).
type recordingObserver struct {
	mu   sync.Mutex
	seen []string
}

func (o *recordingObserver) Observe(database, role string, _ uint64, sql []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, database+"|"+role+"|"+string(sql))
}

func (o *recordingObserver) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}

// TestObserverSeesPlainStatements runs a real client through both relays:
// the observer sees simple Query texts and Parse texts, never an ask.
func TestObserverSeesPlainStatements(t *testing.T) {
	needPG(t)
	for _, goroutines := range []bool{false, true} {
		name := map[bool]string{false: "event loop", true: "goroutine relay"}[goroutines]
		t.Run(name, func(t *testing.T) {
			obs := &recordingObserver{}
			srv := &Server{Upstreams: []Upstream{{Address: trustPG.Addr(), TLS: UpstreamTLSDisable}}, Observer: obs, GoroutineRelay: goroutines}
			addr := serve(t, srv)
			ctx := context.Background()
			c := connect(t, proxyURL(addr, pgtest.Superuser, "", "postgres", "disable"))
			marker := pgtest.UniqueName(t, "obs")
			simple := "SELECT 1 AS " + marker + "_simple"
			if _, err := c.Exec(ctx, simple, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			extended := "SELECT $1::int AS " + marker + "_parse"
			if got := queryInt(t, c, extended, 7); got != 7 {
				t.Fatalf("got %d", got)
			}
			// Without a translator an ask is refused (0A000); either way it
			// is the proxy's, and never observed.
			for _, ask := range []string{"/* ask: " + marker + " how many rows */", "ASK " + marker + " anything;"} {
				if _, err := c.Exec(ctx, ask, pgx.QueryExecModeSimpleProtocol); err == nil {
					t.Fatalf("%s: no error without a translator", ask)
				}
				if _, err := c.Exec(ctx, ask); err == nil {
					t.Fatalf("%s (extended): no error without a translator", ask)
				}
			}
			// A statement after the asks, on the same session, so that all
			// before it have been relayed when it returns.
			last := "SELECT 2 AS " + marker + "_last"
			if _, err := c.Exec(ctx, last, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			seen := obs.all()
			who := "postgres|" + pgtest.Superuser + "|"
			for _, want := range []string{simple, extended, last} {
				if !slices.Contains(seen, who+want) {
					t.Errorf("not observed: %q; saw %q", want, seen)
				}
			}
			for _, s := range seen {
				if strings.Contains(strings.ToLower(s), "ask") {
					t.Errorf("an ask was observed: %q", s)
				}
			}
		})
	}
}
