package workload

import (
	"hash/maphash"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// keyOf is textKey's key of sql, or the raw text's when textKey is unsure.
func keyOf(seed maphash.Seed, sql string) (key uint64, literalFree bool) {
	var h maphash.Hash
	h.SetSeed(seed)
	if textKey(&h, []byte(sql)) {
		return h.Sum64(), true
	}
	return maphash.String(seed, "raw\x00"+sql), false
}

// TestTextKeyImpliesFingerprint: texts the relay counts as one (equal
// keys) have equal pg_query fingerprints, over every pair of a corpus
// built to confuse a scanner; and the texts that differ only in numbers,
// plain strings and comments do share a key (else the table saves nothing).
func TestTextKeyImpliesFingerprint(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b string
		same bool // want equal keys
	}{
		{"pgbench", "SELECT abalance FROM pgbench_accounts WHERE aid = 48213;", "SELECT abalance FROM pgbench_accounts WHERE aid = 7;", true},
		{"strings", "SELECT a FROM t WHERE b = 'x' AND c = 'it''s'", "SELECT a FROM t WHERE b = 'yy' AND c = ''", true},
		{"numbers", "SELECT a FROM t WHERE b > 1.5e-3 LIMIT 10 OFFSET 0", "SELECT a FROM t WHERE b > 2 LIMIT 99999999999999999999 OFFSET 1_000", true},
		{"comments", "/* traceparent='00-1' */ SELECT a FROM t -- it's\n WHERE b = 1", "/* traceparent='00-2' /* nested */ */ SELECT a FROM t -- x\n WHERE b = 2", true},
		{"utf-8 literal", "SELECT a FROM t WHERE n = 'Zoë'", "SELECT a FROM t WHERE n = 'Ann'", true},
		{"string continued", "SELECT 'a'\n'b'", "SELECT 'c'\n'd'", true},
		{"typed literal", "SELECT date '2024-01-01', interval '1' second(3)", "SELECT date '1999-12-31', interval '2' second(3)", true},
		{"names differ", "SELECT a FROM t1", "SELECT a FROM t2", false},
		{"quoted names differ", `SELECT "a1" FROM t`, `SELECT "a2" FROM t`, false},
		{"a comment hides a quote", "SELECT a FROM t -- don't\n WHERE x = 1", "SELECT a FROM t -- don't\n WHERE y = 1", false},
		{"exponent is no minus", "SELECT 1.5e-3", "SELECT 1.5-3", false},
		{"float precision", "SELECT x::float(10) FROM t", "SELECT x::float(30) FROM t", false},
		{"array bound", "SELECT x::int[3] FROM t", "SELECT x::int[5] FROM t", false},
		{"time precision", "SELECT current_timestamp(3), LOCALTIME ( 2 )", "SELECT current_timestamp(2), LOCALTIME ( 1 )", false},
		{"escape string", `SELECT E'a\'b' FROM t`, `SELECT E'c\'d' FROM t`, false},
		{"unicode escapes", `SELECT U&"a!0041" UESCAPE '!' FROM t`, `SELECT U&"a!0041" UESCAPE '#' FROM t`, false},
		{"bit string", "SELECT B'0101'", "SELECT B'1'", false},
		{"dollar quote", "SELECT $$a$$", "SELECT $$b$$", false},
		{"parameters", "SELECT a FROM t WHERE b = $1", "SELECT a FROM t WHERE b = $2", false},
		{"junk after a number", "SELECT 123abc", "SELECT 123", false},
		{"hex", "SELECT 0x1F", "SELECT 0x2F", false},
		{"not utf-8", "SELECT a FROM t WHERE n = '\xe9'", "SELECT a FROM t WHERE n = 'e'", false},
		{"unterminated", "SELECT 'a", "SELECT 'b", false},
		{"continuation needs a newline", "SELECT 'a'\n'b'", "SELECT 'a' 'b'", false},
		{"negative", "SELECT a FROM t WHERE b = -1", "SELECT a FROM t WHERE b = 1", false},
		{"case", "select a from t", "SELECT a FROM t", false},
		{"multi", "SELECT 1; SELECT a FROM t WHERE b = 2", "SELECT 3; SELECT a FROM t WHERE b = 4", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seed := maphash.MakeSeed()
			ka, _ := keyOf(seed, tt.a)
			kb, _ := keyOf(seed, tt.b)
			if (ka == kb) != tt.same {
				t.Errorf("equal keys %v, want %v", ka == kb, tt.same)
			}
		})
	}
	// Every pair of the corpus: equal keys, equal fingerprints (or both
	// unparsable).
	corpus := []string{
		"SELECT 1", "SELECT 1.5", "SELECT 'a'", "SELECT -1", "SELECT 1e5", "SELECT 1e-5", "SELECT .5", "SELECT 1.",
		"SELECT x::float(10) FROM t", "SELECT x::float(30) FROM t", "SELECT x::FLOAT (53) FROM t", "SELECT x::float(1) FROM t",
		"SELECT x::int[3] FROM t", "SELECT x::int[5] FROM t", "SELECT x::int ARRAY[2] FROM t", "SELECT a[1] FROM t", "SELECT a[2] FROM t",
		"SELECT current_time(1)", "SELECT current_time(2)", "SELECT localtimestamp(3)", "SELECT localtimestamp(4)", "SELECT current_timestamp(0)",
		"SELECT x::varchar(3) FROM t", "SELECT x::varchar(5) FROM t", "SELECT x::numeric(10, 2) FROM t", "SELECT x::numeric(9, 3) FROM t",
		"SELECT a FROM t ORDER BY 1", "SELECT a FROM t ORDER BY 2", "SELECT a FROM t LIMIT 1", "SELECT a FROM t LIMIT 2",
		"SELECT 'a'\n'b'", "SELECT 'c'\n'd'", "SELECT 'a' 'b'", "SELECT 'c' 'd'",
		"SELECT 123abc", "SELECT 456abc", "SELECT 123", "SELECT 1_000", "SELECT 1__0", "SELECT 0x1F", "SELECT 0b1",
		"SELECT a FROM t /* 'x */ WHERE b = 1", "SELECT a FROM t /* 'y */ WHERE b = 2", "SELECT a FROM t /* /* */ 'x' */ WHERE c = 1",
		"SELECT a FROM t -- 'x\nWHERE b = 1", "SELECT a FROM t -- 'y\nWHERE b = 2", "SELECT a FROM t -- 'x\rWHERE c = 'q'",
		"SELECT $1", "SELECT $2", "SELECT a$1 FROM t", "SELECT a$2 FROM t",
		"SELECT t1.a FROM t1", "SELECT t2.a FROM t2", `SELECT "1" FROM t`, `SELECT "2" FROM t`,
		"SELECT 'it''s'", "SELECT 'x'''", "SELECT ''''", "SELECT '\\'", "SELECT '\\' || 'x'",
		"SELECT e'x'", "SELECT n'x'", "SELECT x'1F'", "SELECT b'1'",
		"SELECT a FROM t WHERE b IN (1, 2, 3)", "SELECT a FROM t WHERE b IN (4, 5, 6)", "SELECT a FROM t WHERE b IN (7, 8)",
		"SELECT coalesce(1, a) FROM t", "SELECT coalesce(2, a) FROM t", "SELECT round(1.5)", "SELECT round(2.5)",
		"SELECT 1; SELECT 2", "SELECT 3; SELECT 4", "SELECT a FROM t WHERE b = 1; SELECT 2",
		"SELECT 1.5e-3", "SELECT 1.5-3", "SELECT 2.5e+7", "SELECT 2.5+7",
		"SELECT 1 FROM t WHERE x = 1.2.3", "SELECT 1 FROM t WHERE x = 1..3",
	}
	seed := maphash.MakeSeed()
	type fp struct {
		fp  string
		err bool
	}
	fps := make([]fp, len(corpus))
	keys := make([]uint64, len(corpus))
	for i, sql := range corpus {
		f, err := pg_query.Fingerprint(sql)
		fps[i] = fp{f, err != nil}
		keys[i], _ = keyOf(seed, sql)
	}
	merged := 0
	for i := range corpus {
		for j := i + 1; j < len(corpus); j++ {
			if keys[i] != keys[j] {
				continue
			}
			merged++
			if fps[i] != fps[j] {
				t.Errorf("equal keys, different fingerprints:\n%q %+v\n%q %+v", corpus[i], fps[i], corpus[j], fps[j])
			}
		}
	}
	if merged < 10 {
		t.Errorf("only %d pairs share a key: the key keeps literals", merged)
	}
}

// TestTextKeyAllocates nothing: it runs on the relay for every statement.
func TestTextKeyAllocatesNothing(t *testing.T) {
	r := newRecent(DefaultRecent, false)
	sql := []byte("/* c */ SELECT abalance FROM pgbench_accounts WHERE aid = 48213 AND x = 'y' AND z::float(8) > 1;")
	if n := testing.AllocsPerRun(100, func() { r.key("postgres", "app", sql) }); n != 0 {
		t.Errorf("key allocates %v times", n)
	}
}

// BenchmarkTextKey is the relay's hash of a pgbench -S statement.
func BenchmarkTextKey(b *testing.B) {
	r := newRecent(DefaultRecent, false)
	sql := []byte("SELECT abalance FROM pgbench_accounts WHERE aid = 48213;")
	b.ReportAllocs()
	for b.Loop() {
		r.key("postgres", "app", sql)
	}
}
