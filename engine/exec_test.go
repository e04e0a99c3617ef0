package engine

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// TestConnExecutorTrial: a trial run through ConnExecutor is read-only,
// bounded and leaves the session as it was, idle or in a transaction.
func TestConnExecutorTrial(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgcluster.Options{})
	if err := cluster.Exec(ctx, "postgres", `CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 50);
		-- Allowed functions run under the scope's pinned search_path: their
		-- bodies name what they use with its schema.
		CREATE FUNCTION bump() RETURNS int LANGUAGE sql AS 'INSERT INTO public.t VALUES (0) RETURNING id';
		CREATE VIEW bumped AS SELECT bump() AS b`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(cluster.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fns, err := catalog.LoadFunctions(ctx, conn2(t, ctx, cluster))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ex := ConnExecutor{Conn: conn}
	seal := func(sql string, opts guard.Options) sealed.Statement {
		t.Helper()
		opts.Catalog = fns
		opts.Names = guard.SearchPath{"public"}
		st, err := guard.Seal(sql, opts)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	lim := pg.Limits{Timeout: 2 * time.Second, MaxRows: 10, MaxBytes: 1 << 20}

	tests := []struct {
		name     string
		setup    string // run by the "client" first
		sql      string
		allow    []string
		lim      *pg.Limits
		wantCode string // SQLSTATE expected from the trial, "" for success
		wantErr  error
		wantRows int
		after    pg.TxStatus
	}{
		{name: "idle select bounded", sql: "SELECT id FROM t ORDER BY id;", wantRows: 10, after: pg.TxIdle},
		{name: "idle write refused by read-only tx", sql: "SELECT public.bump()", allow: []string{"public.bump"}, wantCode: "25006", after: pg.TxIdle},
		{name: "idle statement timeout", sql: "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b", wantCode: "57014", after: pg.TxIdle},
		{name: "idle byte limit", sql: "SELECT repeat('x', 100000) FROM t", lim: &pg.Limits{Timeout: time.Minute, MaxRows: 10, MaxBytes: 1000}, wantErr: pg.ErrResultTooLarge, after: pg.TxIdle},
		{name: "in transaction error leaves tx usable", setup: "BEGIN", sql: "SELECT nope FROM t", wantCode: "42703", after: pg.TxInTx},
		{name: "in transaction write refused", setup: "BEGIN", sql: "SELECT public.bump() FROM t", allow: []string{"public.bump"}, wantCode: "25006", after: pg.TxInTx},
		{name: "in transaction select", setup: "BEGIN", sql: "SELECT id FROM t -- trailing comment", wantRows: 10, after: pg.TxInTx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != "" {
				exec(tt.setup)
				defer exec("ROLLBACK")
			}
			l := lim
			if tt.lim != nil {
				l = *tt.lim
			}
			rows, err := ex.Trial(ctx, seal(tt.sql, guard.Options{AllowFunctions: tt.allow}), l)
			switch {
			case tt.wantCode != "":
				var se *pg.Error
				if !errors.As(err, &se) || se.Code != tt.wantCode {
					t.Fatalf("err = %v, want SQLSTATE %s", err, tt.wantCode)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case len(rows.Values) != tt.wantRows || !rows.Truncated:
				t.Fatalf("rows = %d (truncated %v), want %d of more", len(rows.Values), rows.Truncated, tt.wantRows)
			}
			if got := pg.TxStatus(conn.TxStatus()); got != tt.after {
				t.Fatalf("session tx status after trial = %c, want %c", got, tt.after)
			}
			if tt.after == pg.TxInTx {
				// The client's transaction still works, and is read-write again.
				exec("CREATE TEMP TABLE IF NOT EXISTS scratch (x int); INSERT INTO scratch VALUES (1)")
			}
		})
	}
	rs, err := conn.Exec(ctx, "SELECT count(*) FROM t").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rs[0].Rows[0][0]); got != "50" {
		t.Fatalf("rows in t = %s, want 50 (data changed by a trial)", got)
	}

	t.Run("view calling a function the guard refuses", func(t *testing.T) {
		_, err := guard.Seal("SELECT * FROM bumped", guard.Options{Catalog: fns})
		var re *guard.RejectError
		if !errors.As(err, &re) {
			t.Fatalf("err = %v, want the guard to refuse the view", err)
		}
	})

	t.Run("failed transaction refused", func(t *testing.T) {
		conn.Exec(ctx, "BEGIN; SELECT 1/0").ReadAll() //nolint:errcheck
		defer exec("ROLLBACK")
		_, err := ex.Trial(ctx, seal("SELECT 1", guard.Options{}), lim)
		if !errors.Is(err, pg.ErrFailedTransaction) {
			t.Fatalf("err = %v, want %v", err, pg.ErrFailedTransaction)
		}
	})
}

func conn2(t *testing.T, ctx context.Context, c *pgcluster.Cluster) catalog.Querier {
	t.Helper()
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
