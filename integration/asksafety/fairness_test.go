package asksafety_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// blockedModel makes the fake model hold every generation until release is
// closed, reporting each one it holds on entered.
func (f *fixture) blockedModel() (entered chan string, release chan struct{}) {
	entered = make(chan string, 16)
	release = make(chan struct{})
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["accounts"], "entities": []}`},
		fakeollama.Rule{Name: "blocked", PromptContains: []string{candidatePrompt}, ReplyFunc: func(v fakeollama.ChatView) string {
			entered <- v.Question()
			<-release
			return sqlReply("SELECT count(*) FROM accounts")
		}},
	)
	return entered, release
}

// TestAskSlotsPerRole: the per-client cap counts one login role on one
// host. A role holding its asks does not lock out another role asking from
// the same host; a second session of the same role is refused (53400).
func TestAskSlotsPerRole(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const other = "colleague"
	if err := f.cluster.CreateRole(ctx, other, other+"-secret", false); err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Exec(ctx, f.db, "GRANT SELECT ON accounts TO "+other); err != nil {
		t.Fatal(err)
	}
	entered, release := f.blockedModel()
	defer close(release)
	_, addr := f.startProxy(t, f.engine(t, guard.Options{}), func(s *proxy.Server) { s.MaxAsks, s.MaxAsksPerClient = 10, 1 })

	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 2)
	ask := func(conn *pgx.Conn, q string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int
			errs <- conn.QueryRow(ctx, "-- ask: "+q, pgx.QueryExecModeSimpleProtocol).Scan(&n)
		}()
	}
	ask(f.askerConn(t, addr), "how many accounts, asker")
	<-entered // the asker holds its one slot, waiting for the model
	// The same role from the same host: over its cap.
	if _, err := f.askerConn(t, addr).Exec(ctx, "-- ask: how many accounts, asker again"); codeOf(err) != "53400" {
		t.Errorf("the asker's second ask: %v, want SQLSTATE 53400", err)
	}
	// Another role from the same host: a slot of its own.
	colleague, _ := f.connectAs(t, addr, other, f.db)
	ask(colleague, "how many accounts, colleague")
	select {
	case q := <-entered:
		if q == "" {
			t.Error("the colleague's ask reached the model without its question")
		}
	case err := <-errs:
		t.Fatalf("the colleague's ask ended before reaching the model: %v", err)
	}
	release <- struct{}{}
	release <- struct{}{}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("ask: %v", err)
		}
	}
}

// TestClosedClientFreesAskSlot: a client that closes its connection while
// its ask waits for the model cancels the ask, and its slot is free at once
// (the model still holds the answer; the ask and the model call would time
// out only after an hour).
func TestClosedClientFreesAskSlot(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	entered, release := f.blockedModel()
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	done := make(chan *proxy.AskRecord, 4)
	eng := f.engine(t, guard.Options{})
	client, err := llm.New(llm.Config{Host: f.fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: time.Hour, MaxRetries: -1, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	eng.LLM = client
	eng.AskTimeout = time.Hour
	_, addr := f.startProxy(t, eng, func(s *proxy.Server) {
		s.MaxAsks, s.MaxAsksPerClient = 1, 1
		s.OnAsk = func(r *proxy.AskRecord) { done <- r } // after the ask's slots are released
	})

	pc, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", askUser, askPass, addr, f.db))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	hc.Frontend.Send(&pgproto3.Query{String: "-- ask: how many accounts, then I leave"})
	if err := hc.Frontend.Flush(); err != nil {
		t.Fatal(err)
	}
	<-entered // the ask holds the proxy's only slot
	hc.Conn.Close()
	select {
	case r := <-done:
		if r.Err == nil {
			t.Errorf("the abandoned ask was answered: %+v", r)
		}
	case <-ctx.Done(): // hang guard: the model holds the answer for an hour
		t.Fatal("the closed client's ask still holds its slot")
	}
	// The slot is free: another ask gets to the model.
	errs := make(chan error, 1)
	go func() {
		var n int
		errs <- f.askerConn(t, addr).QueryRow(ctx, "-- ask: how many accounts, next", pgx.QueryExecModeSimpleProtocol).Scan(&n)
	}()
	select {
	case <-entered:
	case err := <-errs:
		t.Fatalf("the next ask: %v, want it to get the freed slot", err)
	}
	releaseAll() // the abandoned ask's model request is held too
	if err := <-errs; err != nil {
		t.Errorf("the next ask: %v", err)
	}
}
