package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// Literal correction on a real server: a literal no row matches becomes
// the stored value, each change classified (letter case, whitespace, a
// closest value); a literal the column holds is kept even when the value
// index does not know it (rows written after the catalog was built, here
// inside the asking session's open transaction); NoLiteralCorrection keeps
// every literal.
func TestCorrectLiteralsChecksTheColumn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{})
	db := pgtest.UniqueName(t, "lits")
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Exec(ctx, db, `
CREATE TYPE film_state AS ENUM ('released', 'shelved');
CREATE TABLE films (id int PRIMARY KEY, lang text, code text, city text, flag text, state film_state);
INSERT INTO films VALUES (1, 'Spanish', ' XYZ', 'Los Angeles', 'T', 'released'), (2, 'English', ' ABC', 'New York', 'F', 'shelved'),
  (3, 'French', ' DEF', 'Chicago', 'T', 'released');
ANALYZE films;`); err != nil {
		t.Fatal(err)
	}
	conn, err := cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	snap, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(cluster.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	for _, tt := range []struct {
		name, sql, want string
		kinds           []string
		off             bool
		inTx            string // run on the asking session in an open transaction first
	}{
		{name: "letter case", sql: "SELECT id FROM films WHERE lang = 'spanish'",
			want: "SELECT id FROM films WHERE lang = 'Spanish'", kinds: []string{memory.RewriteCase}},
		{name: "one-letter flag", sql: "SELECT id FROM films WHERE flag = 't'",
			want: "SELECT id FROM films WHERE flag = 'T'", kinds: []string{memory.RewriteCase}},
		{name: "padded code", sql: "SELECT id FROM films WHERE code IN ('XYZ', ' ABC')",
			want: "SELECT id FROM films WHERE code IN (' XYZ', ' ABC')", kinds: []string{memory.RewriteSpace}},
		{name: "closest value", sql: "SELECT id FROM films WHERE city = 'Los Angles'",
			want: "SELECT id FROM films WHERE city = 'Los Angeles'", kinds: []string{memory.RewriteValue}},
		{name: "enum label in another case", sql: "SELECT id FROM films WHERE state = 'Released'",
			want: "SELECT id FROM films WHERE state = 'released'", kinds: []string{memory.RewriteCase}},
		{name: "stored value kept", sql: "SELECT id FROM films WHERE lang = 'French'",
			want: "SELECT id FROM films WHERE lang = 'French'"},
		{name: "stored but not indexed: kept", sql: "SELECT id FROM films WHERE lang = 'spanish'",
			want: "SELECT id FROM films WHERE lang = 'spanish'", inTx: "INSERT INTO films VALUES (9, 'spanish', '', '', '', NULL)"},
		{name: "turned off", sql: "SELECT id FROM films WHERE lang = 'spanish'",
			want: "SELECT id FROM films WHERE lang = 'spanish'", off: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.inTx != "" {
				if err := sess.Exec(ctx, "BEGIN; "+tt.inTx).Close(); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := sess.Exec(ctx, "ROLLBACK").Close(); err != nil {
						t.Fatal(err)
					}
				}()
			}
			e := &Engine{NoLiteralCorrection: tt.off}
			e.applyDefaults()
			a := &ask{snap: snap, schema0: snap.Schema, sess: &session{}, trace: &Trace{}, exec: &ConnExecutor{Conn: sess}}
			got, rws := e.correctLiterals(ctx, a, tt.sql)
			if got != tt.want {
				t.Errorf("SQL %q, want %q (trace %+v)", got, tt.want, a.trace.Stages)
			}
			var kinds []string
			for _, rw := range rws {
				kinds = append(kinds, rw.Kind)
				if !strings.Contains(tt.sql, sqlString(rw.From)) || !strings.Contains(got, sqlString(rw.To)) {
					t.Errorf("rewrite %+v does not match the SQL", rw)
				}
				note := ""
				for _, st := range a.trace.Stages {
					note += st.Note
				}
				if !strings.Contains(note, rw.String()) {
					t.Errorf("trace %q does not list %s", note, rw)
				}
			}
			if !slices.Equal(kinds, tt.kinds) {
				t.Errorf("rewrites %+v, want kinds %v", rws, tt.kinds)
			}
		})
	}
}

func TestRewriteKind(t *testing.T) {
	for _, tt := range []struct{ from, to, want string }{
		{"spanish", "Spanish", memory.RewriteCase}, {"XYZ", " XYZ", memory.RewriteSpace}, {"a  b", "a b", memory.RewriteSpace},
		{"Los Angles", "Los Angeles", memory.RewriteValue}, {"t", "T", memory.RewriteCase},
	} {
		if got := rewriteKind(tt.from, tt.to); got != tt.want {
			t.Errorf("rewriteKind(%q, %q) = %s, want %s", tt.from, tt.to, got, tt.want)
		}
	}
}
