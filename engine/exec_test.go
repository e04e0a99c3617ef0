package engine

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/integration/pgtest"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }

func TestTrialRun(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgtest.Options{})
	if err := cluster.Exec(ctx, "postgres", `CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 50);
		CREATE FUNCTION bump() RETURNS int LANGUAGE sql AS 'INSERT INTO t VALUES (0) RETURNING id'`); err != nil {
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
	ex := ConnExecutor{Conn: conn}
	count := func() string {
		rows, err := ex.Query(ctx, "SELECT count(*) FROM t", 0)
		if err != nil {
			t.Fatal(err)
		}
		return *rows.Values[0][0]
	}

	tests := []struct {
		name     string
		setup    string // run by the "client" first
		tx       TxStatus
		sql      string
		wantCode string // SQLSTATE expected from the trial, "" for success
		wantRows int
		after    TxStatus
	}{
		{name: "idle select bounded", tx: TxIdle, sql: "SELECT id FROM t ORDER BY id;", wantRows: 10, after: TxIdle},
		{name: "idle write refused by read-only tx", tx: TxIdle, sql: "SELECT bump()", wantCode: "25006", after: TxIdle},
		{name: "idle statement timeout", tx: TxIdle, sql: "SELECT pg_sleep(5)", wantCode: "57014", after: TxIdle},
		{name: "in transaction error leaves tx usable", setup: "BEGIN", tx: TxInTx, sql: "SELECT nope FROM t", wantCode: "42703", after: TxInTx},
		{name: "in transaction write refused", setup: "BEGIN", tx: TxInTx, sql: "SELECT bump() FROM t", wantCode: "25006", after: TxInTx},
		{name: "in transaction select", setup: "BEGIN", tx: TxInTx, sql: "SELECT id FROM t -- trailing comment", wantRows: 10, after: TxInTx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != "" {
				if _, err := ex.Query(ctx, tt.setup, 0); err != nil {
					t.Fatal(err)
				}
				defer ex.Query(ctx, "ROLLBACK", 0) //nolint:errcheck
			}
			rows, err := trialRun(ctx, ex, tt.tx, tt.sql, 200*time.Millisecond, 10)
			if tt.wantCode != "" {
				var se *ServerError
				if !errors.As(err, &se) || se.Code != tt.wantCode {
					t.Fatalf("err = %v, want SQLSTATE %s", err, tt.wantCode)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if len(rows.Values) != tt.wantRows {
				t.Fatalf("rows = %d, want %d", len(rows.Values), tt.wantRows)
			}
			if got := TxStatus(conn.TxStatus()); got != tt.after {
				t.Fatalf("session tx status after trial = %c, want %c", got, tt.after)
			}
			if tt.tx == TxInTx {
				// The client's transaction still works, and is read-write again.
				if _, err := ex.Query(ctx, "CREATE TEMP TABLE IF NOT EXISTS scratch (x int); INSERT INTO scratch VALUES (1)", 0); err != nil {
					t.Fatalf("client transaction unusable after trial: %v", err)
				}
			}
		})
	}
	if got := count(); got != "50" {
		t.Fatalf("rows in t = %s, want 50 (data changed by a trial)", got)
	}

	t.Run("failed transaction refused", func(t *testing.T) {
		ex.Query(ctx, "BEGIN", 0)          //nolint:errcheck
		ex.Query(ctx, "SELECT 1/0", 0)     //nolint:errcheck
		defer ex.Query(ctx, "ROLLBACK", 0) //nolint:errcheck
		_, err := trialRun(ctx, ex, TxFailed, "SELECT 1", time.Second, 10)
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeInFailedTransaction {
			t.Fatalf("err = %v, want %s", err, CodeInFailedTransaction)
		}
	})
}
