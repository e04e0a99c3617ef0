package catalog_test

import (
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
