package semantic_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/semantic"
)

// TestOSIMatchesDBT: the OSI file testdata/osi/shop.yaml says what the
// dbt_shop project's semantic.yml says, and both imports give the same
// described tables and columns, metrics (with their SQL and table) and join
// paths. The dbt case runs the real dbt parse (skipped without dbt, failed
// in CI); the OSI case always runs.
func TestOSIMatchesDBT(t *testing.T) {
	wantTables := []string{"public.customers", "public.order_lines", "public.orders", "public.regions"}
	wantColumns := []string{ // the column descriptions, and a phrase each must say
		"public.customers.created_at=account was opened", "public.customers.customer_id=Number of customers",
		"public.customers.flag=is vip", "public.customers.segment=customer segment",
		"public.order_lines.qty=units", "public.orders.amt1=order subtotal", "public.orders.amt2=order total",
		"public.orders.channel=sales channel", "public.orders.order_id=Number of orders",
		"public.orders.ordered_at=ordered at", "public.orders.status=order status", "public.regions.name=region name",
	}
	wantMetrics := []string{ // term, scope, SQL, other tables and join path of each metric's glossary entry
		"average order value|public.orders|SUM(amt2) / NULLIF(COUNT(order_id), 0)||",
		"customers with accounts|public.customers|COUNT(DISTINCT customer_id)||",
		"orders per customer|public.orders|COUNT(orders.order_id) * 1.0 / NULLIF(COUNT(DISTINCT customers.customer_id), 0)|public.customers|public.orders.customer_id=public.customers.customer_id",
		"orders placed|public.orders|COUNT(order_id)||",
		"revenue per customer|public.orders|SUM(orders.amt2) / NULLIF(COUNT(DISTINCT customers.customer_id), 0)|public.customers|public.orders.customer_id=public.customers.customer_id",
		"revenue|public.orders|SUM(amt2)||",
	}
	wantJoins := []string{
		"public.customers.region_id=public.regions.region_id",
		"public.order_lines.order_id=public.orders.order_id",
		"public.orders.customer_id=public.customers.customer_id",
	}
	for _, tc := range []struct {
		name string
		load func(t *testing.T) (*semantic.Layer, error)
	}{
		{"osi", func(t *testing.T) (*semantic.Layer, error) { return semantic.Read("testdata/osi/shop.yaml") }},
		{"dbt", func(t *testing.T) (*semantic.Layer, error) { return semantic.Read(parsed(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.load(t)
			if err != nil {
				t.Fatal(err)
			}
			var tables, columns, metrics, joins []string
			texts := map[string]string{}
			for _, d := range l.Docs() {
				switch d.Kind {
				case descindex.KindTable:
					tables = append(tables, d.Schema+"."+d.Table)
				case descindex.KindColumn:
					k := d.Schema + "." + d.Table + "." + d.Column
					columns = append(columns, k)
					texts[k] = d.Text
				}
			}
			for _, want := range wantColumns {
				k, phrase, _ := strings.Cut(want, "=")
				if !strings.Contains(texts[k], phrase) {
					t.Errorf("%s described as %q, want it to say %q", k, texts[k], phrase)
				}
			}
			for _, m := range l.Metrics {
				d := (&semantic.Layer{Metrics: []semantic.Metric{m}}).Docs()[0]
				var path []string
				for _, j := range m.Joins {
					path = append(path, j.From+"="+j.To)
				}
				metrics = append(metrics, d.Term+"|"+d.Schema+"."+d.Table+"|"+d.SQLHint+"|"+strings.Join(d.Also, ",")+"|"+strings.Join(path, ","))
				if !strings.Contains(d.Text, m.Description) || m.Description == "" {
					t.Errorf("metric %s: text %q lacks its description", m.Name, d.Text)
				}
				// The prompt is told the tables and how they join.
				if len(d.Also) > 0 && !strings.Contains(d.Text, "Over orders and customers joined on orders.customer_id = customers.customer_id.") {
					t.Errorf("metric %s: text %q lacks its tables and join", m.Name, d.Text)
				}
			}
			for _, j := range l.Joins() {
				joins = append(joins, j.From+"="+j.To)
			}
			keys := func(s []string) []string {
				var out []string
				for _, w := range s {
					k, _, _ := strings.Cut(w, "=")
					out = append(out, k)
				}
				return out
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"tables", tables, wantTables}, {"columns", columns, keys(wantColumns)}, {"metrics", metrics, wantMetrics}, {"joins", joins, wantJoins}} {
				slices.Sort(c.got)
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s:\n got %q\nwant %q", c.what, c.got, c.want)
				}
			}
		})
	}
}

// TestOSIDetails: what only OSI says: synonyms reach the description,
// expressions in other dialects are dropped and named, and model-scoped
// metrics are written over tables.
func TestOSIDetails(t *testing.T) {
	l, err := semantic.ReadOSI("testdata/osi/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var flag string
	for _, d := range l.Docs() {
		if d.Kind == descindex.KindColumn && d.Table == "customers" && d.Column == "flag" {
			flag = d.Text
		}
	}
	if !strings.Contains(flag, "premium customer") || !strings.Contains(flag, "key account") {
		t.Errorf("customers.flag described as %q, want its synonyms", flag)
	}
	if !slices.ContainsFunc(l.Dropped, func(s string) bool { return strings.Contains(s, "order_lines.line_label") }) {
		t.Errorf("dropped %q, want the SNOWFLAKE-only field order_lines.line_label", l.Dropped)
	}

	path := writeOSI(t, `
semantic_model:
  - name: m
    datasets:
      - name: o
        source: SALES.Orders
        fields:
          - name: total
            expression: {dialects: [{dialect: ANSI_SQL, expression: amt2}]}
          - name: net
            expression: {dialects: [{expression: "amt2 - tax"}]}
        metrics:
          - name: revenue
            expression: {dialects: [{expression: SUM(o.total)}]}
            description: Money taken.
            ai_context: {synonyms: [turnover], instructions: Excludes tax.}
      - name: c
        source: sales."Customers"
        fields:
          - name: id
            expression: {dialects: [{expression: id}]}
      - name: q
        source: "SELECT 1 AS one"
      - name: u
        source: verkäufe.BÜCHER
        description: Books
        ai_context: sold books
    relationships:
      - name: o_c
        from: o
        to: c
        from_columns: [cust, region]
        to_columns: [id, region]
    metrics:
      - name: revenue_per_customer
        expression: {dialects: [{expression: "o.revenue / COUNT(DISTINCT c.id)"}]}
      - name: net_revenue
        expression: {dialects: [{expression: "SUM(o.net) || 'o.total'"}]}
`)
	l, err = semantic.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	sql := map[string]string{}
	for _, m := range l.Metrics {
		sql[m.Name] = m.SQL + " @" + m.Model.Table
	}
	for name, want := range map[string]string{
		"revenue": "SUM(amt2) @orders",
		// Over two tables: each column written table.column.
		"revenue_per_customer": `SUM(orders.amt2) / COUNT(DISTINCT "Customers".id) @orders`,
		"net_revenue":          "SUM((amt2 - tax)) || 'o.total' @orders",
	} {
		if sql[name] != want {
			t.Errorf("metric %s: %q, want %q", name, sql[name], want)
		}
	}
	var tables []string
	for _, m := range l.Models {
		tables = append(tables, m.Schema+"."+m.Table+": "+m.Description)
	}
	if want := []string{"sales.orders: ", "sales.Customers: ", "verkäufe.bÜcher: Books. sold books"}; !slices.Equal(tables, want) {
		t.Errorf("tables %q, want %q", tables, want)
	}
	if d := (&semantic.Layer{Metrics: l.Metrics[:1]}).Docs()[0]; d.Text != "Money taken. Excludes tax. Also called: turnover." {
		t.Errorf("metric revenue's text %q", d.Text)
	}
	if len(l.Joins()) != 0 {
		t.Errorf("a composite relationship gave joins %v", l.Joins())
	}
	for _, m := range l.Metrics {
		if m.Name == "revenue_per_customer" && (len(m.Others) != 1 || m.Others[0].Table != "Customers" || len(m.Joins) != 0) {
			t.Errorf("revenue_per_customer over %v joined by %v, want Customers, unjoined (its relationship is composite)", m.Others, m.Joins)
		}
	}
	for _, want := range []string{"dataset q", "relationship o_c"} {
		if !slices.ContainsFunc(l.Dropped, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("dropped %q, want %s named", l.Dropped, want)
		}
	}
}

func writeOSI(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "model.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOSIMalformed: a malformed file is refused with an error naming the
// file and the field.
func TestOSIMalformed(t *testing.T) {
	ds := "\n    datasets:\n      - name: o\n        source: public.orders\n"
	for _, tc := range []struct {
		name, body, field string
	}{
		{"not yaml", "semantic_model: [", "not JSON"},
		{"no semantic_model", "version: 0.1.1\n", "semantic_model: missing"},
		{"dbt project yaml", "semantic_models:\n  - name: orders\n", "semantic_manifest.json"},
		{"empty", "semantic_model: []\n", "semantic_model: empty"},
		{"wrong type", "semantic_model: {name: m}\n", "cannot unmarshal"},
		{"model name", "semantic_model:\n  - description: x" + ds, "semantic_model[0].name: missing"},
		{"no datasets", "semantic_model:\n  - name: m\n", "semantic_model[0].datasets: missing"},
		{"dataset source", "semantic_model:\n  - name: m\n    datasets:\n      - name: o\n", "semantic_model[0].datasets[0].source: missing"},
		{"bad source", "semantic_model:\n  - name: m\n    datasets:\n      - name: o\n        source: a.b.c.d\n", "semantic_model[0].datasets[0].source:"},
		{"duplicate dataset", "semantic_model:\n  - name: m" + ds + "      - name: o\n        source: x\n", "semantic_model[0].datasets[1].name: dataset o is defined twice"},
		{"field expression", "semantic_model:\n  - name: m" + ds + "        fields:\n          - name: f\n", "semantic_model[0].datasets[0].fields[0].expression: missing"},
		{"empty expression", "semantic_model:\n  - name: m" + ds + "        fields:\n          - name: f\n            expression: {dialects: [{dialect: ANSI_SQL, expression: ''}]}\n", "fields[0].expression: empty ANSI_SQL expression"},
		{"ai_context list", "semantic_model:\n  - name: m" + ds + "        ai_context: [a, b]\n", "semantic_model[0].datasets[0].ai_context: line 6"},
		{"relationship to", "semantic_model:\n  - name: m" + ds + "    relationships:\n      - {name: r, from: o, to: nope, from_columns: [a], to_columns: [b]}\n", `semantic_model[0].relationships[0].to: "nope" is no dataset`},
		{"relationship columns", "semantic_model:\n  - name: m" + ds + "    relationships:\n      - {name: r, from: o, to: o, from_columns: [a, b], to_columns: [b]}\n", "semantic_model[0].relationships[0].to_columns: 1 columns for 2"},
		{"metric expression", "semantic_model:\n  - name: m" + ds + "    metrics:\n      - name: x\n", "semantic_model[0].metrics[0].expression: missing"},
		{"metric cycle", "semantic_model:\n  - name: m" + ds + "        metrics:\n          - {name: a, expression: {dialects: [{expression: o.b + 1}]}}\n          - {name: b, expression: {dialects: [{expression: o.a + 1}]}}\n", "datasets[0].metrics[0].expression: the metric refers to itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeOSI(t, tc.body)
			_, err := semantic.Read(path)
			if err == nil {
				t.Fatalf("no error for\n%s", tc.body)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q, want it to name %s and %q", err, path, tc.field)
			}
		})
	}
}
