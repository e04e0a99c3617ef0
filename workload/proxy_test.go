package workload_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
)

// TestRelayDropsRatherThanBlocks: a real client runs many statements
// through a real proxy whose collector's worker is stuck; every statement
// completes and the overflow is counted as dropped.
func TestRelayDropsRatherThanBlocks(t *testing.T) {
	pg := pgtest.New(t, pgcluster.Options{AuthMethod: "trust"})
	const size = 16
	c := workload.NewCollector(workload.NewStore("", workload.Limits{}), workload.CollectorOptions{QueueSize: size})
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	c.SetBefore(func() {
		if first {
			first = false
			close(entered)
			<-release
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	defer close(release) // runs before the cancel above

	for _, goroutines := range []bool{false, true} {
		srv := &proxy.Server{Upstreams: []proxy.Upstream{{Address: pg.Addr(), TLS: proxy.UpstreamTLSDisable}}, Observer: c, GoroutineRelay: goroutines}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		u := url.URL{Scheme: "postgres", Host: ln.Addr().String(), Path: "/postgres", User: url.User(pgtest.Superuser), RawQuery: "sslmode=disable"}
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard only
		conn, err := pgx.Connect(cctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		before := c.Stats().Dropped
		for i := range 3 * size {
			var n int
			if i%2 == 0 {
				// A new text each time (the alias): a repeat would be
				// counted in the recently seen table, not queued.
				err = conn.QueryRow(cctx, "SELECT "+strconv.Itoa(i)+" AS c"+strconv.Itoa(i), pgx.QueryExecModeSimpleProtocol).Scan(&n)
			} else {
				err = conn.QueryRow(cctx, "SELECT $1::int", i).Scan(&n)
			}
			if err != nil || n != i {
				t.Fatalf("statement %d: %d, %v", i, n, err)
			}
			if i == 0 && !goroutines {
				<-entered // the worker now holds the first statement
			}
		}
		conn.Close(cctx)
		ccancel()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, proxy.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		if d := c.Stats().Dropped; d <= before {
			t.Errorf("goroutine relay %v: dropped %d, was %d: the queue cannot have held %d statements", goroutines, d, before, 3*size)
		}
	}
	if st := c.Stats(); st.Captured-st.Repeats > size+1 {
		t.Errorf("queued %d with a queue of %d and the worker stuck", st.Captured-st.Repeats, size)
	}
}
