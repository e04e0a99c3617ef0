package asksafety_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func (f *fixture) askerConn(t *testing.T, addr string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", askUser, askPass, addr, f.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func codeOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// allocated is the bytes this process has allocated so far. The proxy, the
// engine and the fake model run in this process, so a run of the proxy
// that held a huge answer or row would show here, whatever GC did since.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestMemoryBounded: an endless model answer and a 200 MB row in a trial run
// (one repeat() call, under a guard size bound raised for this test: the
// default refuses it before it runs) end with a clear error, the proxy
// never holds them, and the session is still usable.
func TestMemoryBounded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The limit under test is bytes, not time: a trial timeout that a loaded
	// machine could reach first would turn 54000 into a fix round.
	eng := f.engine(t, guard.Options{Bounds: guard.Bounds{MaxSizedArg: 256 << 20}})
	eng.TrialTimeout = 2 * time.Minute
	_, addr := f.startProxy(t, eng, nil)
	conn := f.askerConn(t, addr)
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["accounts"], "entities": []}`},
		// Never the same text twice: the client's repetition check does not
		// end it, so the answer-size cap must.
		fakeollama.Rule{Name: "endless", PromptContains: []string{fakeollama.PromptCandidate, "never stops"}, Reply: "SELECT balance FROM accounts UNION ALL", Fault: fakeollama.FaultEndlessVaried},
		fakeollama.Rule{Name: "huge", PromptContains: []string{fakeollama.PromptCandidate, "huge row"}, Reply: sqlReply("SELECT repeat('x', 200000000) AS big")},
	)
	const budget = 64 << 20 // far below either attack, far above an ask's own needs
	for _, tc := range []struct {
		question, code string
	}{
		{"an answer that never stops", "42N01"},
		{"a huge row", "54000"},
	} {
		t.Run(tc.question, func(t *testing.T) {
			baseHeap := heapInUse()
			before := allocated()
			_, err := conn.Exec(ctx, "-- ask: "+tc.question)
			used := allocated() - before
			if codeOf(err) != tc.code {
				var pe *pgconn.PgError
				_ = errors.As(err, &pe)
				t.Fatalf("err = %v (%+v), want SQLSTATE %s", err, pe, tc.code)
			}
			t.Logf("%s: %v; %d KiB allocated during the ask", tc.question, err, used>>10)
			if used > budget {
				t.Errorf("the ask allocated %d MiB; the limits should keep it under %d MiB", used>>20, budget>>20)
			}
			if after := heapInUse(); after > baseHeap+budget/2 {
				t.Errorf("heap in use %d MiB after the ask, %d MiB before", after>>20, baseHeap>>20)
			}
			var n int
			if err := conn.QueryRow(ctx, "SELECT 42").Scan(&n); err != nil || n != 42 {
				t.Fatalf("session unusable after the ask: %v", err)
			}
		})
	}
}

// TestConcurrentAskLimits: beyond the proxy's and a client's limits an ask
// fails at once with 53400 while the others go on.
func TestConcurrentAskLimits(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["accounts"], "entities": []}`},
		fakeollama.Rule{Name: "blocked", PromptContains: []string{fakeollama.PromptCandidate}, ReplyFunc: func(fakeollama.ChatView) string {
			entered <- struct{}{}
			<-release
			return sqlReply("SELECT count(*) FROM accounts")
		}},
	)
	for _, tc := range []struct {
		name      string
		configure func(*proxy.Server)
	}{
		{"per proxy", func(s *proxy.Server) { s.MaxAsks, s.MaxAsksPerClient = 1, 10 }},
		{"per client", func(s *proxy.Server) { s.MaxAsks, s.MaxAsksPerClient = 10, 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := f.startProxy(t, f.engine(t, guard.Options{}), tc.configure)
			first, second := f.askerConn(t, addr), f.askerConn(t, addr)
			var wg sync.WaitGroup
			var firstErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int
				firstErr = first.QueryRow(ctx, "-- ask: how many accounts "+tc.name, pgx.QueryExecModeSimpleProtocol).Scan(&n)
			}()
			<-entered // the first ask holds its slot, waiting for the model
			_, err := second.Exec(ctx, "-- ask: how many accounts, again "+tc.name)
			if codeOf(err) != "53400" {
				t.Errorf("second ask: %v, want SQLSTATE 53400", err)
			}
			var n int
			if err := second.QueryRow(ctx, "SELECT 42").Scan(&n); err != nil || n != 42 {
				t.Errorf("refused session unusable: %v", err)
			}
			release <- struct{}{}
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("first ask: %v", firstErr)
			}
		})
	}
	close(release)
}

// TestErrorsHideInfrastructure: when the catalog cannot connect, the client
// learns that the catalog is unavailable, not where the server is or which
// role the catalog uses.
func TestErrorsHideInfrastructure(t *testing.T) {
	f := newFixture(t)
	broken := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return nil, errors.New(`failed to connect to host=10.20.30.40 user=nlproxy_catalog database=` + database + `: password authentication failed for user "nlproxy_catalog"`)
	}}
	t.Cleanup(func() { broken.Close() })
	eng := f.engine(t, guard.Options{Bounds: guard.Bounds{MaxSizedArg: 256 << 20}})
	eng.Catalogs = broken
	_, addr := f.startProxy(t, eng, nil)
	conn := f.askerConn(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := conn.Exec(ctx, "-- ask: how many accounts")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "58000" {
		t.Fatalf("err = %v, want SQLSTATE 58000", err)
	}
	all := pe.Message + pe.Detail + pe.Hint
	for _, secret := range []string{"10.20.30.40", "nlproxy_catalog", "password"} {
		if strings.Contains(all, secret) {
			t.Errorf("the client's error reveals %q: %+v", secret, pe)
		}
	}
}
