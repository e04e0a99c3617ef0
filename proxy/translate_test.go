package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/router/askfunc"
)

// scriptTranslator is a test double for the engine: it answers by question
// and uses the session executor the way the engine does.
type scriptTranslator struct {
	pgQueryAskFuncs // the table-function form, as router.Translator reads it
	mu              sync.Mutex
	reqs            []TranslateRequest
	// slow receives once the "slow" question is being translated.
	slow chan struct{}
}

// seal makes a statement the way the engine does; the proxy tests allow any
// function, so that what stops a write is the proxy's read-only scope.
func seal(sql string) (sealed.Statement, error) {
	return guard.Seal(sql, guard.Options{AllowFunctions: []string{"*"}, Names: guard.SearchPath{"public"}})
}

func (s *scriptTranslator) Translate(ctx context.Context, req TranslateRequest) (Translation, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	final := func(sql string, timeout time.Duration) (Translation, error) {
		st, err := seal(sql)
		if err != nil {
			return Translation{}, err
		}
		return Translation{Statement: st, Timeout: timeout, Notice: "nlproxy: " + st.Display()}, nil
	}
	trial := func(sql string, maxRows int) (*pg.Rows, error) {
		st, err := seal(sql)
		if err != nil {
			return nil, err
		}
		return req.Exec.Trial(ctx, st, pg.Limits{Timeout: 5 * time.Second, MaxRows: maxRows, MaxBytes: 1 << 20})
	}
	switch req.Marker.Question {
	case "how many answers":
		// Trial run on the client's own session, bounded.
		res, err := trial("SELECT g FROM generate_series(1, 10) g", 3)
		if err != nil {
			return Translation{}, err
		}
		if len(res.Values) != 3 || !res.Truncated || res.Columns[0] != "g" || *res.Values[2][0] != "3" {
			return Translation{}, fmt.Errorf("executor result wrong: %+v", res)
		}
		// A server error comes back as *pg.Error and leaves the session usable.
		_, err = trial("SELECT 1/0", 1)
		var pe *pg.Error
		if !errors.As(err, &pe) || pe.Code != "22012" {
			return Translation{}, fmt.Errorf("executor error %v, want a *pg.Error 22012", err)
		}
		_, err = trial("SELECT nosuchcol FROM pg_class", 1)
		if !errors.As(err, &pe) || pe.Code != "42703" {
			return Translation{}, fmt.Errorf("executor error %v, want 42703", err)
		}
		return final("SELECT 42 AS answer", time.Minute)
	case "show me the sql":
		return Translation{Rows: &StaticResult{Columns: []string{"sql"}, Rows: TextRows([]string{"SELECT 'it''s' -- é\\"})}}, nil
	case "bad table":
		return Translation{}, &pg.Error{Code: "42P01", Message: "relation \"nope\" does not exist"}
	case "model down":
		return Translation{}, errors.New("ollama: connection refused")
	case "slow":
		if s.slow != nil {
			s.slow <- struct{}{}
		}
		<-ctx.Done()
		return Translation{}, ctx.Err()
	case "bounded":
		return final("SELECT current_setting('transaction_read_only') AS ro, current_setting('statement_timeout') AS st", 1500*time.Millisecond)
	case "sneaky write":
		return final("SELECT public.proxy_bump()", time.Minute)
	case "too slow":
		return final("SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b", 100*time.Millisecond)
	case "table function":
		// The table-function form: the answer goes in the call's place.
		if req.Marker.Statement == "" {
			return Translation{}, errors.New("table function without its statement")
		}
		text, err := askfunc.Embed(req.Marker.Statement, "SELECT 7 AS n")
		if err != nil {
			return Translation{}, err
		}
		return final(text, time.Minute)
	case "in tx":
		if req.TxStatus != 'T' {
			return Translation{}, errors.New("want tx status T, got " + string(req.TxStatus))
		}
		return final("SELECT 1 AS answer", time.Minute)
	}
	return Translation{}, errors.New("unexpected question " + req.Marker.Question)
}

func TestTranslator(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	tr := &scriptTranslator{slow: make(chan struct{}, 1)}
	_, addr := trustServer(t, &Server{Translator: tr})
	cfg, err := pgx.ParseConfig(trustURL(addr))
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	var nmu sync.Mutex
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		nmu.Lock()
		notices = append(notices, n.Message)
		nmu.Unlock()
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	pc := c.PgConn()

	// Simple protocol.
	res, err := pc.Exec(ctx, "-- ask: how many answers").ReadAll()
	if err != nil || len(res) != 1 || string(res[0].Rows[0][0]) != "42" || string(res[0].FieldDescriptions[0].Name) != "answer" {
		t.Fatalf("simple ask: %v %+v", err, res)
	}
	nmu.Lock()
	if len(notices) != 1 || notices[0] != "nlproxy: SELECT 42 AS answer" {
		t.Errorf("notices %q", notices)
	}
	nmu.Unlock()

	// Extended protocol: Describe must see the generated statement's shape (int4).
	var n int32
	if err := c.QueryRow(ctx, "/* ask: how many answers */").Scan(&n); err != nil || n != 42 {
		t.Fatalf("extended ask: %d %v", n, err)
	}
	// ask-sql returns the SQL as a one-row result.
	var sqlText string
	if err := c.QueryRow(ctx, "-- ask-sql: show me the sql").Scan(&sqlText); err != nil || sqlText != "SELECT 'it''s' -- é\\" {
		t.Fatalf("ask-sql: %q %v", sqlText, err)
	}
	// Engine errors: *pg.Error keeps its code, others are XX000; session stays usable.
	for q, code := range map[string]string{"ASK bad table": "42P01", "ASK model down": "XX000"} {
		_, err := pc.Exec(ctx, q).ReadAll()
		if pgCode(err) != code {
			t.Errorf("%s: err = %v, want %s", q, err, code)
		}
		if err := c.QueryRow(ctx, "-- ask: "+strings.TrimPrefix(q, "ASK ")).Scan(&n); pgCode(err) != code {
			t.Errorf("extended %s: err = %v, want %s", q, err, code)
		}
	}
	if got := queryInt(t, c, "SELECT 9"); got != 9 {
		t.Fatal("session unusable")
	}

	// A marker inside a pipelined batch: the statements before it still run, in order.
	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT 'first'", nil, nil, nil, nil)
	p.SendQueryParams("-- ask: how many answers", nil, nil, nil, nil)
	p.SendQueryParams("SELECT 'last'", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		r, err := p.GetResults()
		if err != nil || r == nil {
			t.Fatalf("pipeline: %v", err)
		}
		switch r := r.(type) {
		case *pgconn.ResultReader:
			rr := r.Read()
			if rr.Err != nil {
				t.Fatalf("pipeline: %v", rr.Err)
			}
			got = append(got, string(rr.Rows[0][0]))
		case *pgconn.PipelineSync:
			got = append(got, "sync")
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "first,42,last,sync" {
		t.Fatalf("pipeline got %v", got)
	}

	// Transaction status is passed to the engine.
	if _, err := pc.Exec(ctx, "BEGIN; -- x").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, "ASK in tx").ReadAll(); err != nil {
		t.Fatalf("ask in tx: %v", err)
	}
	if _, err := pc.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}

	// Cancel during translation aborts the engine's work via ctx.
	go func() {
		<-tr.slow // the translation is under way
		_ = pc.CancelRequest(ctx)
	}()
	_, err = pc.Exec(ctx, "ASK slow").ReadAll()
	if pgCode(err) != "57014" {
		t.Fatalf("cancel during translation: %v", err)
	}
	if got := queryInt(t, c, "SELECT 3"); got != 3 {
		t.Fatal("session unusable after cancel")
	}

	tr.mu.Lock()
	defer tr.mu.Unlock()
	r0 := tr.reqs[0]
	if r0.Database != "postgres" || r0.User != "postgres" || r0.TxStatus != 'I' || r0.Marker.Kind != MarkerAsk {
		t.Errorf("first request %+v", r0)
	}
}

// A generated query sent while idle runs read-only and time-bounded in its own
// implicit transaction; the client sees only its result, and the session's
// settings are untouched afterwards.
func TestTranslationReadOnlyFinalRun(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, &Server{Translator: &scriptTranslator{}})
	c, err := pgx.Connect(ctx, trustURL(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	pc := c.PgConn()
	// Fresh each run: the cluster is shared by the package and -count=N
	// repeats this test against it.
	if _, err := pc.Exec(ctx, `DROP TABLE IF EXISTS proxy_ro_t CASCADE; CREATE TABLE proxy_ro_t (x int);
		CREATE OR REPLACE FUNCTION proxy_bump() RETURNS int LANGUAGE sql AS 'INSERT INTO public.proxy_ro_t VALUES (1) RETURNING x'`).ReadAll(); err != nil {
		t.Fatal(err)
	}

	res, err := pc.Exec(ctx, "ASK bounded").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].CommandTag.String() != "SELECT 1" {
		t.Fatalf("client saw %d results (first tag %q), want only the SELECT", len(res), res[0].CommandTag)
	}
	if ro, st := string(res[0].Rows[0][0]), string(res[0].Rows[0][1]); ro != "on" || st != "1500ms" {
		t.Fatalf("final query ran with transaction_read_only=%s statement_timeout=%s", ro, st)
	}
	for q, code := range map[string]string{"ASK sneaky write": "25006", "ASK too slow": "57014"} {
		if _, err := pc.Exec(ctx, q).ReadAll(); pgCode(err) != code {
			t.Errorf("%s: err = %v, want %s", q, err, code)
		}
	}
	// Nothing leaks into the session: it is read-write and unbounded again.
	res, err = pc.Exec(ctx, "SELECT current_setting('transaction_read_only'), current_setting('statement_timeout'), proxy_bump(); SELECT count(*) FROM proxy_ro_t").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// The session writes again; only that direct call wrote, no ask did.
	if row := res[0].Rows[0]; string(row[0]) != "off" || string(row[1]) != "0" || string(res[1].Rows[0][0]) != "1" {
		t.Fatalf("session after asks: read_only=%s timeout=%s rows=%s", row[0], row[1], res[1].Rows[0][0])
	}
}
