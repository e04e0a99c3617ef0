package ownconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
)

// values returns every value the snapshot holds (value index and the
// schema's examples), by "schema.table.column".
func values(snap *catalog.Snapshot) map[string][]string {
	out := map[string][]string{}
	if snap.Values != nil {
		for ci, st := range snap.Values.Columns() {
			k := st.Schema + "." + st.Table + "." + st.Column
			for i := 0; i < st.Values; i++ {
				out[k] = append(out[k], snap.Values.Value(ci, i))
			}
		}
	}
	for _, t := range snap.Schema.Tables {
		for _, c := range t.Columns {
			if c.Stats != nil {
				k := t.Schema + "." + t.Name + "." + c.Name
				out[k] = append(out[k], c.Stats.Examples...)
			}
		}
	}
	return out
}

func skips(snap *catalog.Snapshot) map[string]string {
	out := map[string]string{}
	for _, st := range snap.Values.Stats() {
		out[st.Schema+"."+st.Table+"."+st.Column] = st.Skipped
	}
	return out
}

// TestCatalogRunsNoUserCode is finding 1 (the value index ran a user's cast
// as the catalog role) and the catalog-build half of finding 2 (an
// unqualified array_position resolved to bob's): the catalog build, first
// and after DDL-triggered refreshes, as the README's catalog role and as a
// superuser, on a database whose owner put public first on everyone's path,
// calls none of mallory's or bob's functions and holds no value they could
// only have read through one; what is safe to read is still read.
func TestCatalogRunsNoUserCode(t *testing.T) {
	cluster := newCluster(t)
	w := newWorld(t, cluster)
	w.checkDetector(t)
	mallory := "mallory_" + w.tag
	for _, role := range []string{w.cat, pgtest.Superuser} {
		t.Run(map[bool]string{true: "superuser", false: "catalog role"}[role == pgtest.Superuser], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			checks := make(chan string, 16)
			m := &catalog.Manager{
				Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
					return w.connect(ctx, role, false, t)
				},
				OnCheck: func(_, result string, _ *catalog.Snapshot) { checks <- result },
			}
			defer m.Close()
			snap, err := m.Get(ctx, w.db)
			if err != nil {
				t.Fatal(err)
			}
			<-checks
			w.noneRan(t, "the catalog build")
			vals := values(snap)
			for col, vs := range vals {
				for _, v := range vs {
					if strings.Contains(v, "TOPSECRET") {
						t.Errorf("%s holds the secret: %q", col, v)
					}
				}
			}
			has := func(col, v string) bool {
				for _, x := range vals[col] {
					if x == v {
						return true
					}
				}
				return false
			}
			// Read: built-in text, a domain over text (its check is not
			// run by a read), a table whose policy is built-in only.
			for col, v := range map[string]string{
				"public.plain.label":           "visible-" + w.tag,
				mallory + ".words.w":           "domain-value-" + w.tag,
				mallory + ".open_rls.label":    "rls-open-" + w.tag,
				mallory + ".states.state_name": "New York",
			} {
				if !has(col, v) {
					t.Errorf("%s: %q not indexed (have %q; skipped: %q)", col, v, vals[col], skips(snap)[col])
				}
			}
			sk := skips(snap)
			for col, want := range map[string]string{
				mallory + ".notes.label":    valueindex.SkipType,
				mallory + ".notes.title":    valueindex.SkipType,
				mallory + ".guarded.label":  valueindex.SkipUserCode,
				mallory + ".guarded2.label": valueindex.SkipUserCode,
				"vault.secrets.secret":      valueindex.SkipSensitive,
			} {
				if !strings.HasPrefix(sk[col], want) {
					t.Errorf("%s: skipped %q, want %q", col, sk[col], want)
				}
			}
			// A DDL-triggered refresh rebuilds the same way.
			if err := cluster.Exec(ctx, w.db, "SET ROLE "+mallory+"; CREATE TABLE "+mallory+".trigger_"+strings.ReplaceAll(role, "-", "_")+" (x "+mallory+".citext); GRANT SELECT ON ALL TABLES IN SCHEMA "+mallory+" TO PUBLIC"); err != nil {
				t.Fatal(err)
			}
			m.Refresh(w.db)
			if r := <-checks; r != "rebuilt" {
				t.Fatalf("refresh after DDL: %s, want rebuilt", r)
			}
			w.noneRan(t, "the refresh")
		})
	}
}

// TestValueIndexSkipsUserCode calls the value index on what the catalog
// never hands it (a view), on a connection that is not pinned at startup
// (the transaction pins itself), and checks each skip is for user code.
func TestValueIndexSkipsUserCode(t *testing.T) {
	cluster := newCluster(t)
	w := newWorld(t, cluster)
	w.checkDetector(t)
	ctx := context.Background()
	mallory := "mallory_" + w.tag
	conn, err := w.connect(ctx, w.cat, true, t)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cols := []valueindex.Column{
		{Schema: mallory, Table: "v", Name: "label", Type: "text"},
		{Schema: mallory, Table: "notes", Name: "label", Type: "citext"}, // the name says text-like; the OID does not
		{Schema: mallory, Table: "guarded", Name: "label", Type: "text"},
		{Schema: mallory, Table: "states", Name: "state_code", Type: "text"},
		{Schema: mallory, Table: "states", Name: "state_name", Type: "text"},
		{Schema: "public", Table: "plain", Name: "label", Type: "text"},
	}
	ix, err := valueindex.Build(ctx, conn, cols, valueindex.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.noneRan(t, "the value index")
	got := map[string]valueindex.ColumnStat{}
	for _, st := range ix.Stats() {
		got[st.Table+"."+st.Column] = st
	}
	for k, want := range map[string]string{"v.label": valueindex.SkipUserCode, "notes.label": valueindex.SkipType,
		"guarded.label": valueindex.SkipUserCode, "states.state_code": valueindex.SkipType, "plain.label": ""} {
		if s := got[k]; !strings.HasPrefix(s.Skipped, want) || (want == "" && (s.Skipped != "" || s.Values != 2)) {
			t.Errorf("%s: %+v, want skipped %q", k, s, want)
		}
	}
	// Narrowed to the owners an operator trusts, mallory's tables keep no values.
	ix, err = valueindex.Build(ctx, conn, cols[4:], valueindex.Options{Owners: []string{pgtest.Superuser}})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range ix.Stats() {
		want := ""
		if st.Table == "states" {
			want = valueindex.SkipOwner
		}
		if st.Skipped != want {
			t.Errorf("owners: %+v, want skipped %q", st, want)
		}
	}
}

// TestStatsReaderPinned is finding 2's reader: pg_stat_statements lives in
// public (CREATE EXTENSION's default) beside bob's public.pg_roles and
// public.pg_database views and his operators; the reader names the view by
// the extension's schema and everything else pg_catalog-qualified, in a
// pinned read-only transaction, so none of bob's objects is used.
func TestStatsReaderPinned(t *testing.T) {
	if !statStatements(t) {
		needs.Missing(t, "pg_stat_statements is not shipped with the server (install postgresql-contrib)")
	}
	cluster := newCluster(t)
	w := newWorld(t, cluster)
	w.checkDetector(t)
	ctx := context.Background()
	bob := "bob_" + w.tag
	bc, err := w.connect(ctx, bob, true, t)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Exec(ctx, "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'nlproxy_stats_probe'"); err != nil {
		t.Fatal(err)
	}
	bc.Close(ctx)
	for _, raw := range []bool{false, true} {
		src := workload.PgStatStatements{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
			return w.connect(ctx, w.cat, raw, t)
		}}
		rows, err := src.Statements(ctx, w.db)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rows {
			if r.Role == bob && strings.Contains(r.Query, "nlproxy_stats_probe") || r.Role == bob && strings.Contains(r.Query, "pg_class") {
				found = true
			}
		}
		if !found {
			t.Errorf("raw=%v: bob's statement not read (%d rows)", raw, len(rows))
		}
		w.noneRan(t, "the pg_stat_statements reader")
	}
}

// TestPerimeterPinned: the ask(all) perimeter check on an authenticator
// connection (not pinned at startup: it later runs asks as other roles)
// resolves nothing through bob's public.pg_roles, pg_database,
// pg_stat_activity or operators.
func TestPerimeterPinned(t *testing.T) {
	cluster := newCluster(t)
	w := newWorld(t, cluster)
	w.checkDetector(t)
	ctx := context.Background()
	conn, err := pgconn.ConnectConfig(ctx, &w.config(t, w.auth, true).Config)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for login, want := range map[string]string{"mallory_" + w.tag: "", "nobody_" + w.tag: "does not exist"} {
		reason, err := askall.Perimeter(ctx, conn, login)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" && reason != "" || want != "" && !strings.Contains(reason, want) {
			t.Errorf("perimeter(%s) = %q, want %q", login, reason, want)
		}
	}
	w.noneRan(t, "the perimeter check")
	// The check leaves the connection idle, as it found it.
	if st := conn.TxStatus(); st != 'I' {
		t.Errorf("transaction status after the check: %c", st)
	}
}

// TestStoreOwnSchema: the catalog store's statements resolve nothing
// through bob's public functions, and a store schema someone else created
// first is refused (its tables could carry the creator's triggers).
func TestStoreOwnSchema(t *testing.T) {
	cluster := newCluster(t)
	w := newWorld(t, cluster)
	w.checkDetector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := cluster.URL(pgtest.Superuser, pgtest.SuperuserPassword, w.db)
	s, err := store.Open(ctx, dsn, store.Options{Schema: "store_" + w.tag})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddPair(ctx, w.db, memory.Pair{Question: "how many", SQL: "SELECT 1", Source: memory.PairOperator, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ps, err := s.Pairs(ctx, w.db); err != nil || len(ps) != 1 {
		t.Fatalf("pairs = %v, %v", ps, err)
	}
	if err := s.PutEntry(ctx, "k0", memory.CacheEntry{SQL: "SELECT 1", Confidence: -1}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.GetEntry(ctx, "k0"); err != nil || !ok {
		t.Fatalf("translation: %v %v", ok, err)
	}
	w.noneRan(t, "the catalog store")
	// The store holds values in clear: a grant to another role is said.
	if err := cluster.Exec(ctx, w.db, "GRANT USAGE ON SCHEMA store_"+w.tag+" TO mallory_"+w.tag+"; GRANT SELECT ON store_"+w.tag+".pairs TO mallory_"+w.tag); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	s2, err := store.Open(ctx, dsn, store.Options{Schema: "store_" + w.tag, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if l := logs.FilterMessageSnippet("other roles may read the store").All(); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0].ContextMap()["roles"]), "mallory_"+w.tag) {
		t.Errorf("store readable by mallory: warnings %v", logs.All())
	}

	mallory := "mallory_" + w.tag
	trap := "trap_" + w.tag
	if err := cluster.Exec(ctx, w.db, "GRANT CREATE ON DATABASE "+w.db+" TO "+mallory+"; SET ROLE "+mallory+"; CREATE SCHEMA "+trap+"; GRANT ALL ON SCHEMA "+trap+" TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(ctx, dsn, store.Options{Schema: trap})
	if err == nil || !strings.Contains(err.Error(), "not owned") {
		t.Fatalf("a store schema mallory made: err = %v, want refused", err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		t.Fatalf("refusal is a server error, not the ownership check: %v", err)
	}
}
