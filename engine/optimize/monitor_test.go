package optimize

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

func TestParsePlan(t *testing.T) {
	const plan = `[{"Plan": {"Node Type": "Aggregate", "Total Cost": 1830.25, "Plan Rows": 1, "Plans": [
		{"Node Type": "Hash Join", "Join Type": "Left", "Total Cost": 1700.5, "Plan Rows": 3000, "Hash Cond": "(o.customer_id = c.id)", "Plans": [
			{"Node Type": "Seq Scan", "Relation Name": "orders", "Alias": "o", "Total Cost": 55, "Plan Rows": 3000, "Filter": "(amount > 0)"},
			{"Node Type": "Index Scan", "Relation Name": "customers", "Alias": "customers", "Index Name": "customers_pkey", "Total Cost": 8.3, "Plan Rows": 1}]}]}}]`
	cost, text, err := parsePlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	if cost != 1830.25 {
		t.Errorf("cost = %v", cost)
	}
	want := "Aggregate (cost 1830.25, rows 1)\n" +
		"  Left Hash Join (cost 1700.50, rows 3000) Hash Cond: (o.customer_id = c.id)\n" +
		"    Seq Scan on orders o (cost 55.00, rows 3000) Filter: (amount > 0)\n" +
		"    Index Scan on customers using customers_pkey (cost 8.30, rows 1)"
	if text != want {
		t.Errorf("plan text:\n%s\nwant:\n%s", text, want)
	}
	for _, bad := range []string{"", "[]", "{", `{"Plan": {}}`} {
		if _, _, err := parsePlan(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSameShape(t *testing.T) {
	tests := []struct {
		cols  []string
		types []uint32
		want  string
	}{
		{[]string{"id", "n"}, []uint32{23, 20}, ""},
		{[]string{"id"}, []uint32{23}, "returns 1 columns, the original 2"},
		{[]string{"id", "count"}, []uint32{23, 20}, `column 2 is named "count"`},
		{[]string{"id", "n"}, []uint32{23, 23}, `column "n" has type OID 23, the original's 20`},
	}
	for _, tt := range tests {
		got := sameShape([]string{"id", "n"}, []uint32{23, 20}, tt.cols, tt.types)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%v %v: %q, want %q", tt.cols, tt.types, got, tt.want)
		}
	}
}

func TestFirstDiff(t *testing.T) {
	s := func(v string) *string { return &v }
	a := [][]*string{{s("1"), nil}, {s("2"), s("x")}}
	tests := []struct {
		b    [][]*string
		want int
	}{
		{[][]*string{{s("1"), nil}, {s("2"), s("x")}}, -1},
		{[][]*string{{s("2"), s("x")}, {s("1"), nil}}, 0},
		{[][]*string{{s("1"), s("")}, {s("2"), s("x")}}, 0}, // NULL is not ''
		{[][]*string{{s("1"), nil}}, 1},
	}
	for i, tt := range tests {
		if got := firstDiff(a, tt.b); got != tt.want {
			t.Errorf("case %d: %d, want %d", i, got, tt.want)
		}
	}
}

func TestMedianAndSummary(t *testing.T) {
	if m := median([]time.Duration{5, 1, 3}); m != 3 {
		t.Errorf("median = %v", m)
	}
	if m := median([]time.Duration{4, 1, 3, 2}); m != 2 {
		t.Errorf("even median = %v", m)
	}
	o := Outcome{Improved: true, OriginalCost: 100, ResultCost: 10, OriginalTime: 40 * time.Millisecond, ResultTime: 4 * time.Millisecond,
		Steps: []Step{{Verdict: VerdictResult}, {Verdict: VerdictGuard}, {Verdict: VerdictChosen}, {Verdict: VerdictDuplicate}}, LLMCalls: 8}
	got := o.Summary()
	for _, want := range []string{"10.0x faster", "planner cost 100.00 -> 10.00", "4 proposals, 8 LLM calls", "2 rejected (guard 1, result 1)"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if !VerdictChosen.Valid() || VerdictResult.Valid() || VerdictDuplicate.Valid() {
		t.Error("Valid")
	}
}

func TestModelFailure(t *testing.T) {
	secret := &llm.Error{Op: "chat", Kind: llm.ErrUnreachable, Err: errors.New("dial tcp 10.1.2.3:11434: connection refused")}
	if got := modelFailure(secret); strings.Contains(got, "10.1.2.3") || !strings.Contains(got, "unreachable") {
		t.Errorf("modelFailure = %q", got)
	}
	if got := modelFailure(fmt.Errorf("x: %w", errors.New("engine: the profile's model budget is spent"))); !strings.Contains(got, "budget") {
		t.Errorf("budget: %q", got)
	}
}
