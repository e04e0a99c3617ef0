package guard

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/internal/golden"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const fixtureSQL = `
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers, amount numeric,
  status text, note text, created_at timestamptz DEFAULT now());
CREATE SEQUENCE s;
CREATE SCHEMA app;
CREATE FUNCTION app.score(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2';
CREATE FUNCTION score(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 3';
INSERT INTO customers VALUES (1, 'Bob', 'Los Angeles'), (2, 'O''Neil', 'Los Angeles'), (3, 'Ana', 'New York');
INSERT INTO orders VALUES (1, 1, 12.5, 'shipped', NULL), (2, 3, 3, 'pending', 'gift');
`

// readOnly runs sql the way the engine's trial runs do: READ ONLY
// transaction, statement timeout, always rolled back. It returns the row count.
func readOnly(ctx context.Context, conn *pgx.Conn, sql string) (int, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '5s'"); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

func serverVersion(ctx context.Context, t *testing.T, conn *pgx.Conn) string {
	var v string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('server_version')").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPostgres checks the guard against a real server: everything it accepts
// is valid SQL that runs read-only, some things it rejects would otherwise
// have run even inside a READ ONLY transaction, and literal corrections
// produce SQL that finds the stored rows.
func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	cl := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.Exec(ctx, "postgres", fixtureSQL); err != nil {
		t.Fatal(err)
	}
	conn, err := cl.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	// The server may be any 15.x (or newer) release: a function it has that
	// the reviewed list lacks must be refused, and is listed for review; the
	// test does not fail because the server is newer than the list. With
	// -update the list takes the server's functions (review the diff).
	t.Run("built-in functions reviewed or refused", func(t *testing.T) {
		fns, err := catalog.LoadFunctions(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if len(fns.Builtin) < 1000 {
			t.Fatalf("server lists only %d pg_catalog functions", len(fns.Builtin))
		}
		var unreviewed, gone []string
		for n := range fns.Builtin {
			if !reviewed(n) {
				unreviewed = append(unreviewed, n)
			}
		}
		for n := range reviewedBuiltins() {
			if _, ok := fns.Builtin[n]; !ok {
				gone = append(gone, n)
			}
		}
		sort.Strings(unreviewed)
		sort.Strings(gone)
		if golden.Updating() {
			lines := make([]string, 0, len(fns.Builtin)+len(gone))
			for n, v := range fns.Builtin {
				lines = append(lines, n+" "+string(v))
			}
			for _, n := range gone { // kept: older servers still have them
				lines = append(lines, n+" "+string(reviewedBuiltins()[n]))
			}
			sort.Strings(lines)
			golden.CheckFile(t, "reviewed_builtins.txt", strings.Join(lines, "\n")+"\n")
			return
		}
		if len(unreviewed) > 0 {
			t.Logf("built-ins on this server (%s) not on the reviewed list, refused until reviewed: %s", serverVersion(ctx, t, conn), strings.Join(unreviewed, ", "))
		}
		if len(gone) > 0 {
			t.Logf("%d reviewed built-ins this server lacks (an older or newer major)", len(gone))
		}
		for _, n := range unreviewed {
			_, err := Check("SELECT pg_catalog."+n+"()", Options{Catalog: fns})
			var re *RejectError
			if !errors.As(err, &re) || re.Code != pg.CodeInsufficientPrivilege {
				t.Errorf("unreviewed built-in %s: Check = %v, want insufficient_privilege", n, err)
			}
		}
	})

	t.Run("accepted corpus runs read-only", func(t *testing.T) {
		for _, tc := range corpus {
			if tc.wantCode != "" {
				continue
			}
			if _, err := Check(tc.sql, withCatalog(t, tc.opts)); err != nil {
				t.Errorf("%s: rejected: %v", tc.name, err)
				continue
			}
			if _, err := readOnly(ctx, conn, tc.sql); err != nil {
				t.Errorf("%s: accepted but fails on PostgreSQL: %v\n%s", tc.name, err, tc.sql)
			}
		}
	})

	// READ ONLY alone does not stop these; the guard must.
	t.Run("rejected side effects that READ ONLY allows", func(t *testing.T) {
		for _, sql := range []string{
			"SELECT set_config('search_path', 'pg_temp', true)",
			"SELECT pg_advisory_xact_lock(42)",
			"SELECT pg_sleep(0.01)",
			"SELECT pg_read_file('PG_VERSION')",
			"SELECT * FROM pg_ls_dir('.')",
			"SELECT pg_reload_conf()",
			"SELECT txid_current()",
			"SELECT pg_current_xact_id()",
		} {
			if _, err := readOnly(ctx, conn, sql); err != nil {
				t.Errorf("%q did not run under READ ONLY (%v); pick another example", sql, err)
			}
			_, err := Check(sql, withCatalog(t, Options{}))
			var re *RejectError
			if !errors.As(err, &re) || re.Code != pg.CodeInsufficientPrivilege {
				t.Errorf("Check(%q) = %v, want insufficient_privilege", sql, err)
			}
		}
	})

	t.Run("literal correction finds stored rows", func(t *testing.T) {
		sql := "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id AND o.status = 'Shipped' WHERE c.city IN ('los angeles', 'LA') AND c.name <> 'oneil'"
		if n, err := readOnly(ctx, conn, sql); err != nil || n != 0 {
			t.Fatalf("before correction: %d rows, %v; want 0 rows", n, err)
		}
		lits, err := Literals(sql)
		if err != nil {
			t.Fatal(err)
		}
		if len(lits) != 4 {
			t.Fatalf("literals = %+v, want 4", lits)
		}
		fixed := ReplaceLiterals(sql, []Replacement{
			{lits[0], "shipped"}, {lits[1], "Los Angeles"}, {lits[2], "Los Angeles"}, {lits[3], "O'Neil"},
		})
		if _, err := Check(fixed, withCatalog(t, Options{})); err != nil {
			t.Fatalf("corrected SQL rejected: %v", err)
		}
		n, err := readOnly(ctx, conn, fixed)
		if err != nil || n != 1 {
			t.Fatalf("after correction: %d rows, %v; want 1 (Bob)\n%s", n, err, fixed)
		}
	})
}
