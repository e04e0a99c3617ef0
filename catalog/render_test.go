package catalog_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
	goldenfile "github.com/nlproxy/nlproxy/internal/golden"
)

func golden(t *testing.T, name, got string) { t.Helper(); goldenfile.Check(t, name, got) }

func TestRenderGolden(t *testing.T) {
	s := introspect(t, "sample", catalog.IntrospectOptions{})
	sel := catalog.Selection{"orders": {"amt2", "status"}, "customers": {"flag"}, "addresses": {"city"}}
	ex := map[string][]string{"addresses.city": {"L.A.", "Los Angeles"}, "public.orders.currency": {"EUR"}}
	cases := []struct {
		name     string
		got      string
		contains []string
		excludes []string
	}{
		{"full", s.RenderFull(catalog.RenderOptions{}),
			[]string{
				"CREATE TYPE order_status AS ENUM ('pending', 'paid', 'shipped', 'delivered', 'cancelled', 'returned');",
				"  amt2 numeric(12,2), -- total in the order currency incl. tax;",
				"  flag smallint, -- 1 = churned",
				"  PRIMARY KEY (order_id, line_no),",
				"  FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no)",
				"  UNIQUE (currency, rate_date),",
				"CREATE VIEW customer_order_totals (",
				"CREATE MATERIALIZED VIEW monthly_sales (",
				"  status order_status NOT NULL DEFAULT 'pending'::order_status,",
			}, nil},
		{"selected", s.RenderSelected(sel, catalog.RenderOptions{Examples: ex}),
			[]string{
				"  order_id bigint NOT NULL,", // PK always kept
				"  customer_id integer NOT NULL,",
				"  address_id integer NOT NULL,",
				"  ship_address_id integer,", // FK linking two selected tables
				"FOREIGN KEY (customer_id) REFERENCES customers (customer_id)",
				"FOREIGN KEY (ship_address_id) REFERENCES addresses (address_id)",
				"examples: 'L.A.', 'Los Angeles', ",
			},
			[]string{"products", "currencies", "amt1", "employee_id", "email", "Other tables"}},
		{"soft", s.RenderSoft(sel, catalog.RenderOptions{Examples: ex}),
			[]string{
				"  -- other columns: employee_id, ordered_at, currency, amt1, shipped_at, channel",
				"-- table products (product_id, sku, name, category_id, supplier_id, list_price, discontinued, weight_kg)",
				"-- view customer_order_totals (",
			},
			[]string{"list_price numeric"}},
		{"soft_names", s.RenderSoft(sel, catalog.RenderOptions{Examples: ex, OtherNamesOnly: true}),
			[]string{"-- Other tables: ", "products", "customer_order_totals"},
			[]string{"(product_id, sku", "list_price numeric", "-- table products"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range tc.contains {
				if !strings.Contains(tc.got, c) {
					t.Errorf("missing %q", c)
				}
			}
			for _, c := range tc.excludes {
				if strings.Contains(tc.got, c) {
					t.Errorf("unexpected %q", c)
				}
			}
			golden(t, tc.name, tc.got)
		})
	}
}

func TestTableSummary(t *testing.T) {
	for _, tt := range []struct{ comment, want string }{
		{"", ""},
		{"Customer orders. One row per order.", " (Customer orders)"},
		{"  Orders\n placed online  ", " (Orders placed online)"},
		{"One row per shipment of an order line to a customer address, with carrier and tracking details", " (One row per shipment of an order line to a customer…)"},
	} {
		if got := catalog.TableSummary(&catalog.Table{Comment: tt.comment}); got != tt.want {
			t.Errorf("TableSummary(%q) = %q, want %q", tt.comment, got, tt.want)
		}
	}
}

func TestQuoteIdent(t *testing.T) {
	cases := map[string]string{
		"orders": "orders", "order": `"order"`, "user": `"user"`, "Order Items": `"Order Items"`,
		"CamelCase": `"CamelCase"`, "a$b": "a$b", "1abc": `"1abc"`, "_x9": "_x9", `we"ird`: `"we""ird"`,
		"": `""`, "name": "name", "text": "text", "timestamp": `"timestamp"`, "left": `"left"`, "état": `"état"`,
	}
	for in, want := range cases {
		if got := catalog.QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestRenderSearchPath renders a database holding orders in public and in
// sales, a quoted mixed-case schema and a cross-schema foreign key, for
// several search paths: a table is bare exactly when its bare name would
// reach it, so the same name never appears twice unqualified.
func TestRenderSearchPath(t *testing.T) {
	db, _ := multiSchemaDB(t)
	s := introspect(t, db, catalog.IntrospectOptions{Schemas: []string{"public", "sales", "Archive"}})
	const (
		publicOrders = "orders (\n  id integer NOT NULL,"
		salesOrders  = "orders (\n  deal_id integer NOT NULL,"
	)
	cases := []struct {
		name     string
		path     []string
		contains []string
		excludes []string
		bare     int // how often "CREATE TABLE orders (" appears
	}{
		{"default (public)", nil,
			[]string{"CREATE TABLE " + publicOrders, "CREATE TABLE sales." + salesOrders, "CREATE TABLE sales.regions (",
				`CREATE TABLE "Archive"."Old Orders" (`, `  "Order Id" integer NOT NULL,`,
				"FOREIGN KEY (customer_id) REFERENCES customers (id)"},
			[]string{"public."}, 1},
		{"sales first", []string{"sales", "public"},
			[]string{"CREATE TABLE " + salesOrders, "CREATE TABLE public." + publicOrders, "CREATE TABLE regions (",
				"CREATE TABLE customers (", "FOREIGN KEY (customer_id) REFERENCES customers (id)"},
			[]string{"sales."}, 1},
		{"public shadows sales", []string{"public", "sales"},
			[]string{"CREATE TABLE " + publicOrders, "CREATE TABLE sales." + salesOrders, "CREATE TABLE regions ("},
			[]string{"public.", "sales.regions"}, 1},
		{"sales only", []string{"sales"},
			[]string{"CREATE TABLE " + salesOrders, "CREATE TABLE public." + publicOrders, "CREATE TABLE public.customers (",
				"FOREIGN KEY (customer_id) REFERENCES public.customers (id)"},
			[]string{"sales.", "REFERENCES customers"}, 1},
		{"quoted schema", []string{"Archive"},
			[]string{`CREATE TABLE "Old Orders" (`, "CREATE TABLE public." + publicOrders, "CREATE TABLE sales." + salesOrders},
			[]string{`"Archive".`}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := s.RenderFull(catalog.RenderOptions{SearchPath: tc.path})
			for _, c := range tc.contains {
				if !strings.Contains(got, c) {
					t.Errorf("missing %q in\n%s", c, got)
				}
			}
			for _, c := range tc.excludes {
				if strings.Contains(got, c) {
					t.Errorf("unexpected %q in\n%s", c, got)
				}
			}
			if n := strings.Count(got, "CREATE TABLE orders ("); n != tc.bare {
				t.Errorf("orders rendered bare %d times, want %d", n, tc.bare)
			}
		})
	}

	// Unqualified selection names and example keys resolve on the path too.
	ex := map[string][]string{"orders.status": {"bare-key"}, "public.orders.status": {"public-key"}}
	sel := catalog.Selection{"orders": nil, "Archive.Old Orders": {"status"}}
	selCases := []struct {
		name     string
		path     []string
		contains []string
		excludes []string
	}{
		{"default path picks public.orders", nil,
			[]string{"CREATE TABLE " + publicOrders, "status text, -- examples: 'public-key', 'bare-key'",
				"-- table sales.orders (deal_id, customer_id, status)", `CREATE TABLE "Archive"."Old Orders" (`},
			[]string{"deal_id integer"}},
		{"sales path picks sales.orders", []string{"sales", "public"},
			[]string{"CREATE TABLE " + salesOrders, "status text, -- examples: 'bare-key'",
				"-- table public.orders (id, customer_id, status, note)"},
			[]string{"public-key", "  id integer"}},
	}
	for _, tc := range selCases {
		t.Run("soft "+tc.name, func(t *testing.T) {
			got := s.RenderSoft(sel, catalog.RenderOptions{SearchPath: tc.path, Examples: ex})
			for _, c := range tc.contains {
				if !strings.Contains(got, c) {
					t.Errorf("missing %q in\n%s", c, got)
				}
			}
			for _, c := range tc.excludes {
				if strings.Contains(got, c) {
					t.Errorf("unexpected %q in\n%s", c, got)
				}
			}
		})
	}
	golden(t, "soft_search_path", s.RenderSoft(sel, catalog.RenderOptions{SearchPath: []string{"sales", "public"}, Examples: ex}))
}

// A warehouse too big to list table by table: each schema none of whose
// tables is selected gets one summary line (its first table names), the
// selected schema's other tables are not listed.
func TestRenderSchemaSummaries(t *testing.T) {
	s := &catalog.Schema{}
	add := func(ns string, n int) {
		for i := 1; i <= n; i++ {
			s.Tables = append(s.Tables, catalog.Table{Schema: ns, Name: fmt.Sprintf("%s_t%d", ns, i), Kind: catalog.KindTable,
				Columns: []catalog.Column{{Name: "id", Type: "integer"}}})
		}
	}
	add("sales", 3)
	add("crm", 8)
	add("hr", 1)
	got := s.RenderSoft(catalog.Selection{"sales.sales_t1": nil}, catalog.RenderOptions{OtherSchemasOnly: true, SearchPath: []string{"sales"}})
	for _, want := range []string{"CREATE TABLE sales_t1 (", "-- Other schemas (not shown):\n",
		"-- crm: 8 tables: crm_t1, crm_t2, crm_t3, crm_t4, crm_t5, crm_t6, …\n", "-- hr: 1 table: hr_t1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, not := range []string{"sales_t2", "-- sales:", "crm_t7"} {
		if strings.Contains(got, not) {
			t.Errorf("unexpected %q in\n%s", not, got)
		}
	}
	if n := s.SchemaSummariesSize(); n < len("-- crm: 8 tables") {
		t.Errorf("SchemaSummariesSize = %d", n)
	}
}
