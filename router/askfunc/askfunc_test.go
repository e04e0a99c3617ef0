package askfunc

import (
	"strings"
	"testing"
)

func TestEmbed(t *testing.T) {
	tests := []struct{ stmt, sub, want string }{
		{"SELECT * FROM nlproxy.ask('q')", "SELECT count(*) AS n FROM orders",
			"SELECT * FROM (SELECT count(*) AS n FROM orders) ask"},
		{"SELECT * FROM (SELECT * FROM nlproxy.ask('q')) q LIMIT 1000", "SELECT id FROM orders",
			"SELECT * FROM (SELECT * FROM (SELECT id FROM orders) ask) q LIMIT 1000"},
		{"SELECT c.name FROM customers c JOIN nlproxy.ask('q') AS a(id) ON a.id = c.id WHERE c.name <> 'x'", "WITH o AS (SELECT 1 AS id) SELECT id FROM o",
			"SELECT c.name FROM customers c JOIN (WITH o AS (SELECT 1 AS id) SELECT id FROM o) a(id) ON a.id = c.id WHERE c.name <> 'x'"},
		{"SELECT * FROM LATERAL nlproxy.ask('q') x", "SELECT 1", "SELECT * FROM LATERAL (SELECT 1) x"},
	}
	for _, tt := range tests {
		got, err := Embed(tt.stmt, tt.sub)
		if err != nil || got != tt.want {
			t.Errorf("Embed(%q, %q) = %q, %v; want %q", tt.stmt, tt.sub, got, err, tt.want)
		}
	}
	if _, err := Embed("SELECT * FROM nlproxy.ask('q')", "DELETE FROM t"); err == nil {
		t.Error("Embed of a DELETE succeeded")
	}
	if _, err := Embed("", "SELECT 1"); err == nil {
		t.Error("Embed without a statement succeeded")
	}
}

func TestEmbedRows(t *testing.T) {
	stmt := "SELECT sql FROM nlproxy.ask_sql('q') WHERE llm_calls <> '0'"
	q := "it's \\ odd"
	got, err := EmbedRows(stmt, []string{"sql", "llm_calls"}, [][]*string{{&q, nil}})
	want := `SELECT sql FROM (VALUES (E'it''s \\ odd'::pg_catalog.text, NULL::pg_catalog.text)) ask_sql(sql, llm_calls) WHERE llm_calls <> '0'`
	if err != nil || got != want {
		t.Errorf("EmbedRows = %q, %v; want %q", got, err, want)
	}
	got, err = EmbedRows(stmt, []string{"sql"}, nil)
	if err != nil || !strings.Contains(got, "WHERE false") {
		t.Errorf("EmbedRows without rows = %q, %v", got, err)
	}
}
