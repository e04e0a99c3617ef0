package catalog_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func buildSample(t *testing.T) *catalog.Snapshot {
	t.Helper()
	ctx := context.Background()
	conn, err := env.cluster(t).Connect(ctx, "sample")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	snap, err := catalog.Build(ctx, conn, "sample", catalog.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	snap := buildSample(t)
	if snap.Values == nil || snap.Values.Len() == 0 || snap.Descriptions == nil || snap.Descriptions.Len() == 0 {
		t.Fatal("indexes not built")
	}
	dir := t.TempDir()
	if err := catalog.SaveSnapshot(dir, snap); err != nil {
		t.Fatal(err)
	}
	got, err := catalog.LoadSnapshot(dir, "sample", descindex.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Schema, snap.Schema) {
		t.Error("schema differs after round trip")
	}
	if got.Database != "sample" || !got.BuiltAt.Equal(snap.BuiltAt) || got.Version != snap.Version {
		t.Errorf("meta = %q %v %d", got.Database, got.BuiltAt, got.Version)
	}
	if got.Values.Len() != snap.Values.Len() || got.Descriptions.Len() != snap.Descriptions.Len() {
		t.Fatalf("index sizes %d/%d vs %d/%d", got.Values.Len(), got.Descriptions.Len(), snap.Values.Len(), snap.Descriptions.Len())
	}
	// The loaded indexes answer like the built ones.
	kw := []string{"Los Angeles", "EUR"}
	a := snap.Values.Lookup(ctx, kw, valueindex.LookupOptions{})
	b := got.Values.Lookup(ctx, kw, valueindex.LookupOptions{})
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Errorf("value lookups differ: %v vs %v", a, b)
	}
	da := snap.Descriptions.Search(ctx, "churned customers", 3)
	db := got.Descriptions.Search(ctx, "churned customers", 3)
	if len(da) == 0 || !reflect.DeepEqual(da, db) || da[0].Column != "flag" {
		t.Errorf("description search: %+v vs %+v", da, db)
	}
	// Only the final file is left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "sample.nlcat" {
		t.Errorf("data dir holds %v", entries)
	}
}

func TestSnapshotCorruption(t *testing.T) {
	snap := buildSample(t)
	var buf bytes.Buffer
	if err := catalog.WriteSnapshot(&buf, snap); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"flipped byte in value index", mutate(func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }), catalog.ErrCorrupt},
		{"flipped byte in schema", mutate(func(b []byte) []byte { b[100] ^= 0x01; return b }), catalog.ErrCorrupt},
		{"truncated", good[:len(good)-10], catalog.ErrCorrupt},
		{"empty", nil, catalog.ErrCorrupt},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), catalog.ErrCorrupt},
		{"other format version", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[8:], catalog.FormatVersion+1)
			return b
		}), catalog.ErrVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := catalog.ReadSnapshot(bytes.NewReader(tc.data), descindex.Options{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := catalog.ReadSnapshot(bytes.NewReader(good), descindex.Options{}); err != nil {
		t.Fatalf("unmodified: %v", err)
	}
}

func TestSaveSnapshotFailureKeepsOldFile(t *testing.T) {
	snap := buildSample(t)
	dir := t.TempDir()
	if err := catalog.SaveSnapshot(dir, snap); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(catalog.SnapshotPath(dir, "sample"))
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot that cannot be encoded must not touch the existing file.
	if err := catalog.SaveSnapshot(dir, &catalog.Snapshot{Database: "sample"}); err == nil {
		t.Fatal("saving a snapshot without schema succeeded")
	}
	after, _ := os.ReadFile(catalog.SnapshotPath(dir, "sample"))
	if !bytes.Equal(before, after) {
		t.Error("failed save changed the snapshot file")
	}
	// The rename cannot replace a non-empty directory: the temp file is removed.
	other := *snap
	other.Database = "blocked"
	if err := os.MkdirAll(filepath.Join(catalog.SnapshotPath(dir, "blocked"), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := catalog.SaveSnapshot(dir, &other); err == nil {
		t.Fatal("save over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".nlcat" {
			t.Errorf("left behind %s", e.Name())
		}
	}
	// Database names cannot escape the data directory.
	if p := catalog.SnapshotPath(dir, "../evil/x"); filepath.Dir(p) != dir {
		t.Errorf("path %s escapes %s", p, dir)
	}
}

func TestBuildExamplesFollowValueIndex(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "examples")
	newDB(t, dbName, `
CREATE TABLE accounts (id int PRIMARY KEY, password text, email text, plan text);
INSERT INTO accounts SELECT g, 'hunter' || (g % 3), 'u' || (g % 4) || '@x.example', (ARRAY['free','pro','team'])[1 + g % 3]
FROM generate_series(1, 300) g;
ANALYZE accounts;
CREATE TABLE visits (city text);
INSERT INTO visits SELECT (ARRAY['Paris','Paris','Berlin','Rome'])[1 + g % 4] FROM generate_series(1, 100) g;
`)
	conn, err := env.cluster(t).Connect(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	raw, err := catalog.Introspect(ctx, conn, catalog.IntrospectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := mustColumn(t, raw, "accounts", "password").Stats; st == nil || len(st.Examples) == 0 {
		t.Fatal("precondition: pg_stats has password examples")
	}
	snap, err := catalog.Build(ctx, conn, dbName, catalog.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Schema
	for _, col := range []string{"password", "email"} {
		if st := mustColumn(t, s, "accounts", col).Stats; st == nil || len(st.Examples) != 0 {
			t.Errorf("accounts.%s examples = %+v, want none (sensitive/email-like)", col, st)
		}
	}
	if st := mustColumn(t, s, "accounts", "plan").Stats; st == nil || len(st.Examples) != 3 {
		t.Errorf("accounts.plan stats = %+v", st)
	}
	// Never analyzed: examples come from the value index, most frequent first.
	if st := mustColumn(t, s, "visits", "city").Stats; st == nil || !slices.Equal(st.Examples, []string{"Paris", "Berlin", "Rome"}) {
		t.Errorf("visits.city stats = %+v", st)
	}
	if s.Fingerprint != raw.Fingerprint {
		t.Error("examples changed the fingerprint")
	}
	out := s.RenderFull(catalog.RenderOptions{})
	if strings.Contains(out, "hunter") || !strings.Contains(out, "city text -- examples: 'Paris', 'Berlin', 'Rome'") {
		t.Errorf("render:\n%s", out)
	}
}
