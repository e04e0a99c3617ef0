package asktest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// testFailedAskSQL: a failed ask-sql answers with its row, not an ERROR,
// in every form (marker, table function) and protocol (simple, extended):
// the last attempt as sql, the trace, no confidence and the error column;
// its columns are a success's, so a prepared ask-sql describes the same.
// Plain ask: keeps failing with the ERROR, and the proxy still reports the
// ask failed (audit log, metrics).
func testFailedAskSQL(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const q = "the nicknames of the customers"
	const good = "how many customers are there, asked for its columns"
	scriptFailing := func() {
		f.script(q, keywordsReply([]string{"customers", "nickname"}, nil),
			sqlReply("SELECT nme FROM customers"),
			sqlReply("SELECT nickname FROM customers"),
			sqlReply("SELECT nick FROM customers"))
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec}

	// A success's columns, per mode, as the driver sees them.
	f.script(good, keywordsReply([]string{"customers"}, nil), sqlReply("SELECT count(*) FROM customers"))
	want := map[pgx.QueryExecMode][]pgconn.FieldDescription{}
	for _, mode := range modes {
		c := f.connect(t, f.proxy)
		fields, row, err := askRow(ctx, c.Conn, "-- ask-sql: "+good, mode)
		if err != nil || row["error"] != nil || row["sql"] == nil || *row["sql"] != "SELECT count(*) FROM customers" {
			t.Fatalf("%v: successful ask-sql = %v, %v", mode, deref(row), err)
		}
		want[mode] = fields
	}

	forms := []struct{ name, stmt string }{
		{"marker", "-- ask-sql: " + q},
		{"comment marker", "/* ask-sql: " + q + " */"},
		{"table function", "SELECT * FROM nlproxy.ask_sql('" + q + "')"},
	}
	for _, form := range forms {
		for _, mode := range modes {
			scriptFailing() // fixes answer once each: re-arm them
			c := f.connect(t, f.proxy)
			fields, row, err := askRow(ctx, c.Conn, form.stmt, mode)
			if err != nil {
				t.Fatalf("%s %v: err = %v, want the row", form.name, mode, err)
			}
			if !sameFields(fields, want[mode]) {
				t.Errorf("%s %v: columns %v, a success's %v", form.name, mode, fieldNames(fields), fieldNames(want[mode]))
			}
			if row["sql"] == nil || *row["sql"] != "SELECT nick FROM customers" {
				t.Errorf("%s %v: sql = %v, want the last attempt", form.name, mode, deref(row)["sql"])
			}
			e := row["error"]
			if e == nil || !strings.HasPrefix(*e, "42N01: nlproxy: no usable SQL") || !strings.Contains(*e, "\nHINT: Rephrase") || strings.Contains(*e, "ask-sql") {
				t.Errorf("%s %v: error = %v, want 42N01 with its hint, not sending the user to ask-sql", form.name, mode, deref(row)["error"])
			}
			var stages []map[string]any
			if row["trace"] == nil || json.Unmarshal([]byte(*row["trace"]), &stages) != nil || len(stages) == 0 {
				t.Errorf("%s %v: trace = %v", form.name, mode, deref(row)["trace"])
			}
			if row["confidence"] != nil || row["llm_calls"] == nil || *row["llm_calls"] != "4" || row["profile"] == nil || *row["profile"] != "fast" {
				t.Errorf("%s %v: row %v, want no confidence, 4 model calls, profile fast", form.name, mode, deref(row))
			}
			if r := f.lastAsk(); r == nil || r.Outcome() != "failed" || r.Err == nil || r.Err.Code != "42N01" || r.Report == nil || r.Report.LLMCalls != 4 {
				t.Errorf("%s %v: reported ask %+v, want it failed with 42N01", form.name, mode, r)
			}
			assertUsable(ctx, t, c)
		}
	}

	// ask: still fails with the ERROR, in both protocols.
	for _, mode := range modes[:2] {
		scriptFailing()
		c := f.connect(t, f.proxy)
		_, err := queryText(ctx, c.Conn, "-- ask: "+q, mode)
		if code := pgCode(err); code != "42N01" {
			t.Errorf("%v: ask: err = %v, want SQLSTATE 42N01", mode, err)
		}
		assertUsable(ctx, t, c)
	}
}

// askRow runs stmt and returns the columns and the one row by column name
// (nil: NULL).
func askRow(ctx context.Context, conn *pgx.Conn, stmt string, mode pgx.QueryExecMode) ([]pgconn.FieldDescription, map[string]*string, error) {
	rows, err := conn.Query(ctx, stmt, mode)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	fields := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	out := map[string]*string{}
	n := 0
	for rows.Next() {
		n++
		for i, v := range rows.RawValues() {
			if v != nil {
				s := string(v)
				out[fields[i].Name] = &s
			} else {
				out[fields[i].Name] = nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if n != 1 {
		return fields, out, &pgconn.PgError{Message: "want one row"}
	}
	return fields, out, nil
}

// sameFields compares what a driver sees of the columns: names, types and
// formats (not the table they come from, which a table function's
// subquery does not have either).
func sameFields(a, b []pgconn.FieldDescription) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].DataTypeOID != b[i].DataTypeOID || a[i].Format != b[i].Format {
			return false
		}
	}
	return true
}

func fieldNames(fs []pgconn.FieldDescription) []string {
	out := make([]string, len(fs))
	for i, fd := range fs {
		out[i] = fd.Name
	}
	return out
}
