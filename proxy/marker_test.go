package proxy

import "testing"

func TestParseMarker(t *testing.T) {
	tests := []struct {
		in      string
		kind    MarkerKind
		q       string
		profile string
	}{
		{"SELECT 1", MarkerNone, "", ""},
		{"", MarkerNone, "", ""},
		{"   ", MarkerNone, "", ""},
		{"-- ask: how many users?", MarkerAsk, "how many users?", ""},
		{"  \n\t-- ASK: top 5 customers;", MarkerAsk, "top 5 customers", ""},
		{"--ask:x", MarkerAsk, "x", ""},
		{"-- ask-sql: revenue by month", MarkerAskSQL, "revenue by month", ""},
		{"-- Ask-SQL : spaced colon", MarkerAskSQL, "spaced colon", ""},
		{"-- ask: line one\n-- line two\nline three;", MarkerAsk, "line one\n line two\nline three", ""},
		{"-- ask:", MarkerAsk, "", ""},
		{"-- ask: ;", MarkerAsk, "", ""},
		{"-- asking for trouble\nSELECT 1", MarkerNone, "", ""},
		{"-- a comment\nSELECT 1", MarkerNone, "", ""},
		{"/* ask: orders last week */", MarkerAsk, "orders last week", ""},
		{"/* ask: orders */ ;", MarkerAsk, "orders", ""},
		{"/*ask-sql: q1*/", MarkerAskSQL, "q1", ""},
		{"/* ask: */ how many rows;", MarkerAsk, "how many rows", ""},
		// Comments nest, as on the server: the question is all of the outer one.
		{"/* ask: rows /* of t */ today */ please", MarkerAsk, "rows /* of t */ today\nplease", ""},
		{"/* ask: rows /* of t */", MarkerNone, "", ""},
		{"ask$ q", MarkerNone, "", ""},
		// Empty questions, every form: an ask that fails (see TestEmptyQuestion).
		{"/* ask: */;", MarkerAsk, "", ""},
		{"/* ask: */ SELECT 1;", MarkerAsk, "", ""},
		{"ASK;", MarkerAsk, "", ""},
		{"/* ask: count */ by region;", MarkerAsk, "count\nby region", ""},
		{"/* ask: unterminated", MarkerNone, "", ""},
		{"/* app=web */ SELECT 1", MarkerNone, "", ""},
		{"ASK how many orders?", MarkerAsk, "how many orders?", ""},
		{"ask\thow many;", MarkerAsk, "how many", ""},
		{"  Ask   spaced  ;;", MarkerAsk, "spaced", ""},
		{"ASK", MarkerAsk, "", ""},
		{"ASK ;", MarkerAsk, "", ""},
		{"ASKED", MarkerNone, "", ""},
		{"asks x", MarkerNone, "", ""},
		{"ANALYZE t", MarkerNone, "", ""},
		{"- ask: x", MarkerNone, "", ""},
		{"/ ask: x", MarkerNone, "", ""},
		// Profiles.
		{"/* ask(max): top customers */", MarkerAsk, "top customers", "max"},
		{"/* ask-sql(FAST): q */", MarkerAskSQL, "q", "fast"},
		{"-- ask(balanced) : q;", MarkerAsk, "q", "balanced"},
		{"-- ask-sql(all): across shops", MarkerAskSQL, "across shops", "all"},
		{"ASK(max) how many?", MarkerAsk, "how many?", "max"},
		{"ask(max)how many", MarkerAsk, "how many", "max"},
		{"ASK(max)", MarkerAsk, "", "max"},
		{"-- ask(): q", MarkerNone, "", ""},
		{"-- ask(ma x): q", MarkerNone, "", ""},
		{"-- ask(max: q", MarkerNone, "", ""},
		{"/* ask(a_very_long_profile_name_beyond_the_limit): q */", MarkerNone, "", ""},
		{"ASK (max) q", MarkerAsk, "(max) q", ""},
		{"askfor(1)", MarkerNone, "", ""},
		{"-- optimize: SELECT 1;", MarkerOptimize, "SELECT 1", ""},
		{"-- optimize: SELECT a\n-- the total\nFROM t;", MarkerOptimize, "SELECT a\n-- the total\nFROM t", ""},
		{"-- ask: how many\n-- orders", MarkerAsk, "how many\n orders", ""},
		{"--OPTIMIZE : SELECT a\nFROM t", MarkerOptimize, "SELECT a\nFROM t", ""},
		{"/* optimize: SELECT a FROM t WHERE b = 1 */", MarkerOptimize, "SELECT a FROM t WHERE b = 1", ""},
		{"/* optimize: */ SELECT count(*) FROM t;", MarkerOptimize, "SELECT count(*) FROM t", ""},
		{"/* optimize: */", MarkerNone, "", ""},
		{"-- optimized for speed\nSELECT 1", MarkerNone, "", ""},
		{"-- optimizer: SELECT 1", MarkerNone, "", ""},
		{"OPTIMIZE SELECT 1", MarkerNone, "", ""},
	}
	for _, tt := range tests {
		got := ParseMarker(tt.in)
		if got.Kind != tt.kind || got.Question != tt.q || got.Profile != tt.profile {
			t.Errorf("ParseMarker(%q) = {%v %q %q}, want {%v %q %q}", tt.in, got.Kind, got.Question, got.Profile, tt.kind, tt.q, tt.profile)
		}
	}
}

func TestMaybeMarkerConsistent(t *testing.T) {
	// The hot-path pre-check must never say "no" when ParseMarker says "yes".
	for _, in := range []string{"-- ask: a", "/* ask: b */", "ASK c", "  ask d", "\n\n-- ask-sql: e"} {
		if ParseMarker(in).Kind == MarkerNone {
			t.Fatalf("%q should be a marker", in)
		}
		if !maybeMarker([]byte(in)) {
			t.Errorf("maybeMarker(%q) = false", in)
		}
	}
	for _, in := range []string{"SELECT 1", "insert into t values (1)", "\x00", "WITH x AS (SELECT 1) SELECT 1"} {
		if maybeMarker([]byte(in)) {
			t.Errorf("maybeMarker(%q) = true, want fast rejection", in)
		}
	}
}

func BenchmarkParseMarkerOrdinary(b *testing.B) {
	q := "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
	for b.Loop() {
		if ParseMarker(q).Kind != MarkerNone {
			b.Fatal("marker")
		}
	}
}

// BenchmarkMaybeMarker is the check every Query and Parse pays: ordinary SQL
// is decided from its first non-space byte; a leading comment (or a word
// starting with "a") goes on to the full parse (BenchmarkParseMarker*).
func BenchmarkMaybeMarker(b *testing.B) {
	for _, tc := range []struct{ name, sql string }{
		{"select", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"},
		{"indented", "\n    SELECT 1"},
		{"comment", "-- a comment\nSELECT 1"},
	} {
		text := []byte(tc.sql)
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				maybeMarker(text[:min(len(text), 64)])
			}
		})
	}
}

// TestEmptyQuestion: every form of an ask without a question fails with
// the same error, before the model is asked.
func TestEmptyQuestion(t *testing.T) {
	for _, in := range []string{"/* ask: */;", "/* ask: */", "ASK;", "ask", "-- ask:", "/* ask-sql: */ SELECT 1;", "ASK(max);"} {
		m := ParseMarker(in)
		if m.Kind == MarkerNone || m.invalid == nil || m.invalid.Message != "nlproxy: the question is empty" {
			t.Errorf("ParseMarker(%q) = %+v, want the empty-question error", in, m)
		}
	}
	// Text after an empty comment is the question when it is not SQL.
	if m := ParseMarker("/* ask: */ how many orders;"); m.invalid != nil || m.Question != "how many orders" {
		t.Errorf("question after the comment: %+v", m)
	}
}
