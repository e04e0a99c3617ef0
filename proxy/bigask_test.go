package proxy

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// limitTranslator bounds questions at max bytes and counts what reaches it.
type limitTranslator struct {
	max   int
	calls atomic.Int32
}

func (l *limitTranslator) MaxQuestion() int { return l.max }

func (l *limitTranslator) Translate(ctx context.Context, req TranslateRequest) (Translation, error) {
	l.calls.Add(1)
	return Translation{}, &pg.Error{Severity: "ERROR", Code: "0A000", Message: "not scripted"}
}

// TestBigAskRefusedUnread: a marker statement far over the translator's
// bound fails with 54000 at its place in the stream — in a pipeline with
// parameter types, as a named statement, as a simple Query — without
// reaching the translator, and the session goes on.
func TestBigAskRefusedUnread(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	tr := &limitTranslator{max: 100}
	_, addr := trustServer(t, &Server{Translator: tr})
	c := connect(t, trustURL(addr))
	pc := c.PgConn()
	big := "-- ask: " + strings.Repeat("how many orders ", 1<<10) // 16 KiB, far over 100 + the slack

	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte("21")}, nil, nil, nil)
	p.SendQueryParams(big, [][]byte{[]byte("1")}, []uint32{23}, nil, nil)
	p.SendQueryParams("SELECT 3", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendQueryParams("SELECT 'after'", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	got := pipelineResults(t, p, 20)
	if want := "42,err:54000,sync,after,sync"; strings.Join(got, ",") != want {
		t.Fatalf("pipeline results %v, want %s", got, want)
	}

	// A named statement is refused and not created: the name stays free.
	if _, err := pc.Prepare(ctx, "big_one", big, []uint32{23}); pgCode(err) != "54000" {
		t.Fatalf("prepare: %v, want 54000", err)
	}
	if _, err := pc.Prepare(ctx, "big_one", "SELECT 1", nil); err != nil {
		t.Fatalf("the name was taken: %v", err)
	}
	// Simple protocol, and in a transaction block.
	if _, err := pc.Exec(ctx, big).ReadAll(); pgCode(err) != "54000" {
		t.Fatalf("simple: %v, want 54000", err)
	}
	if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, "/* ask: "+big+" */").ReadAll(); pgCode(err) != "54000" {
		t.Fatalf("in a transaction: %v, want 54000", err)
	}
	if pc.TxStatus() != 'E' {
		t.Fatalf("transaction status %c, want E", pc.TxStatus())
	}
	if _, err := pc.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, c, "SELECT 40 + 2"); n != 42 {
		t.Fatalf("after: %d", n)
	}
	if n := tr.calls.Load(); n != 0 {
		t.Fatalf("the translator was called %d times", n)
	}
}

// pipelineResults reads at most limit results of pipeline p (each result's
// first value, "err:<SQLSTATE>" or "sync") and closes it.
func pipelineResults(t *testing.T, p *pgconn.Pipeline, limit int) []string {
	t.Helper()
	var got []string
	for len(got) < limit {
		res, err := p.GetResults()
		if err != nil {
			got = append(got, "err:"+pgCode(err))
			continue
		}
		if res == nil {
			break
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			if rr := r.Read(); rr.Err != nil {
				got = append(got, "err:"+pgCode(rr.Err))
			} else {
				got = append(got, string(rr.Rows[0][0]))
			}
		case *pgconn.PipelineSync:
			got = append(got, "sync")
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return got
}
