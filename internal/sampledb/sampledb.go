// Package sampledb creates a deterministic, realistically messy business
// database (customers, orders, products, …) for tests, demos and benchmarks,
// and a synthetic wide schema for introspection benchmarks.
package sampledb

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Size sets the row counts.
type Size struct {
	Customers, Suppliers, Products, Employees, Orders int
	MaxLinesPerOrder                                  int // 1..MaxLinesPerOrder lines per order
}

var (
	// Small loads in well under 3 s: tests and `make run`.
	Small = Size{Customers: 600, Suppliers: 25, Products: 150, Employees: 40, Orders: 3000, MaxLinesPerOrder: 5}
	// Large has 1,000,000 orders for benchmarks.
	Large = Size{Customers: 100_000, Suppliers: 300, Products: 5000, Employees: 500, Orders: 1_000_000, MaxLinesPerOrder: 4}
)

// seed makes every load identical.
const seed = 20240601

// Sample-data vocabularies. Cities deliberately come in several spellings.
var (
	cityVariants = [][]string{
		{"Los Angeles", "LA", "L.A.", "los angeles", "Los Angeles, CA"},
		{"New York", "NYC", "New York City", "N.Y.C.", "new york"},
		{"San Francisco", "S.F.", "SF", "San Fran"},
		{"Chicago", "chicago", "Chicago IL"},
		{"Seattle"},
		{"Boston", "boston"},
		{"München", "Munich", "Muenchen"},
		{"Köln", "Cologne"},
		{"Berlin"},
		{"Paris"},
		{"London", "london"},
		{"Zürich", "Zurich"},
	}
	cityCountry = []string{"US", "US", "US", "US", "US", "US", "DE", "DE", "DE", "FR", "UK", "CH"}
	// countrySpellings: the same country spelled differently by source system.
	countrySpellings = map[string][]string{
		"US": {"US", "USA", "United States"}, "DE": {"DE", "Germany"}, "FR": {"FR", "France"},
		"UK": {"UK", "GB", "United Kingdom"}, "CH": {"CH", "Switzerland"},
	}
	stateFor   = []string{"CA", "NY", "CA", "IL", "WA", "MA", "BY", "NW", "BE", "", "", "ZH"}
	currencies = []struct {
		code, name string
		rate       float64
	}{{"USD", "US Dollar", 1}, {"EUR", "Euro", 1.08}, {"GBP", "Pound Sterling", 1.27}, {"CHF", "Swiss Franc", 1.12},
		{"JPY", "Yen", 0.0067}, {"CAD", "Canadian Dollar", 0.73}}
	countryCurrency = map[string]string{"US": "USD", "DE": "EUR", "FR": "EUR", "UK": "GBP", "CH": "CHF"}
	firstNames      = []string{"James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David",
		"Elizabeth", "Maria", "Jürgen", "Sophie", "Lukas", "Chloé", "François", "Olivia", "Noah", "Emma", "Liam"}
	lastNames = []string{"Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Müller",
		"Schmidt", "Schneider", "Dubois", "Martin", "Taylor", "O'Brien", "Nguyen", "Kim", "Rossi", "Meier", "Wilson"}
	companyA  = []string{"Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Hooli", "Vandelay", "Wonka", "Tyrell", "Cyberdyne", "Soylent"}
	companyB  = []string{"Corp", "Inc.", "GmbH", "Ltd", "LLC", "Industries", "AG", "S.A.", "& Co.", "Holdings"}
	segments  = []any{"Enterprise", "SMB", "smb", "Consumer", "consumer", nil, nil}
	channels  = []string{"web", "Web", "phone", "store", "partner", "web", "web"}
	statuses  = []string{"pending", "paid", "shipped", "delivered", "cancelled", "returned"}
	titles    = []string{"Sales Rep", "Sales Representative", "Account Manager", "Sr. Account Manager", "Sales Manager", "VP Sales"}
	adjective = []string{"Ergonomic", "Rustic", "Sleek", "Heavy Duty", "Compact", "Deluxe", "Recycled", "Premium", "Basic", "Wireless"}
	material  = []string{"Steel", "Oak", "Plastic", "Aluminium", "Cotton", "Leather", "Bamboo", "Glass"}
	reasons   = []any{"damaged", "Damaged in transit", "wrong item", "not as described", "changed mind", nil}
	// categories: name, parent index (-1: top level).
	categories = []struct {
		name   string
		parent int
	}{{"Furniture", -1}, {"Chairs", 0}, {"Desks", 0}, {"Office Supplies", -1}, {"Paper", 3}, {"Pens & Writing", 3},
		{"Electronics", -1}, {"Monitors", 6}, {"Keyboards", 6}, {"Cables", 6}, {"Kitchen", -1}, {"Coffee", 10}}
	productNoun = []string{"Chair", "Chair", "Desk", "Cabinet", "Paper", "Pen", "Gadget", "Monitor", "Keyboard", "Cable", "Mug", "Coffee"}
	regionRows  = [][]any{{1, "North America", "US"}, {2, "Europe Central", "DE"}, {3, "Western Europe", "FR"},
		{4, "UK & Ireland", "GB"}, {5, "Alpine", "CH"}}
)

var baseTime = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

const ddl = `
CREATE TYPE order_status AS ENUM ('pending', 'paid', 'shipped', 'delivered', 'cancelled', 'returned');
CREATE TABLE regions (
  region_id integer PRIMARY KEY,
  name text NOT NULL UNIQUE,
  country_code character(2) NOT NULL
);
CREATE TABLE currencies (
  code character(3) PRIMARY KEY,
  name text NOT NULL,
  rate_to_usd numeric(12,6)
);
CREATE TABLE exchange_rates (
  rate_id serial PRIMARY KEY,
  currency character(3) NOT NULL,
  rate_date date NOT NULL,
  rate numeric(12,6) NOT NULL,
  UNIQUE (currency, rate_date)
);
CREATE TABLE customers (
  customer_id integer PRIMARY KEY,
  name text NOT NULL,
  email text,
  phone text,
  segment text,
  flag smallint,
  region_id integer,
  created_at timestamp with time zone NOT NULL,
  notes text
);
CREATE TABLE addresses (
  address_id integer PRIMARY KEY,
  customer_id integer NOT NULL,
  kind text NOT NULL DEFAULT 'shipping',
  street text,
  city text,
  state text,
  postal_code text,
  country text
);
CREATE TABLE categories (
  category_id integer PRIMARY KEY,
  name text NOT NULL,
  parent_id integer
);
CREATE TABLE suppliers (
  supplier_id integer PRIMARY KEY,
  company_name text NOT NULL,
  contact_name text,
  country text,
  currency character(3)
);
CREATE TABLE products (
  product_id integer PRIMARY KEY,
  sku text NOT NULL UNIQUE,
  name text NOT NULL,
  category_id integer,
  supplier_id integer,
  list_price numeric(10,2),
  discontinued boolean NOT NULL DEFAULT false,
  weight_kg numeric(8,3)
);
CREATE TABLE employees (
  employee_id integer PRIMARY KEY,
  first_name text NOT NULL,
  last_name text NOT NULL,
  email text,
  title text,
  manager_id integer,
  region_id integer,
  hired_on date
);
CREATE UNIQUE INDEX employees_email_key ON employees (email);
CREATE TABLE orders (
  order_id bigint PRIMARY KEY,
  customer_id integer NOT NULL,
  employee_id integer,
  ordered_at timestamp with time zone NOT NULL,
  status order_status NOT NULL DEFAULT 'pending',
  currency character(3) NOT NULL,
  amt1 numeric(12,2),
  amt2 numeric(12,2),
  ship_address_id integer,
  shipped_at timestamp with time zone,
  channel text
);
CREATE TABLE order_lines (
  order_id bigint NOT NULL,
  line_no smallint NOT NULL,
  product_id integer NOT NULL,
  qty integer NOT NULL,
  unit_price numeric(10,2) NOT NULL,
  discount_pct numeric(5,2),
  PRIMARY KEY (order_id, line_no)
);
CREATE TABLE returns (
  return_id integer PRIMARY KEY,
  order_id bigint NOT NULL,
  line_no smallint NOT NULL,
  returned_on date NOT NULL,
  reason text
);
`

// Foreign keys are added after COPY: one validating join per key is much
// faster than a trigger check per row (1M+ rows for Large).
const foreignKeys = `
ALTER TABLE exchange_rates ADD FOREIGN KEY (currency) REFERENCES currencies (code);
ALTER TABLE customers ADD FOREIGN KEY (region_id) REFERENCES regions;
ALTER TABLE addresses ADD FOREIGN KEY (customer_id) REFERENCES customers;
ALTER TABLE categories ADD FOREIGN KEY (parent_id) REFERENCES categories;
ALTER TABLE suppliers ADD FOREIGN KEY (currency) REFERENCES currencies (code);
ALTER TABLE products ADD FOREIGN KEY (category_id) REFERENCES categories;
ALTER TABLE products ADD FOREIGN KEY (supplier_id) REFERENCES suppliers;
ALTER TABLE employees ADD FOREIGN KEY (manager_id) REFERENCES employees;
ALTER TABLE employees ADD FOREIGN KEY (region_id) REFERENCES regions;
ALTER TABLE orders ADD FOREIGN KEY (customer_id) REFERENCES customers;
ALTER TABLE orders ADD FOREIGN KEY (employee_id) REFERENCES employees;
ALTER TABLE orders ADD FOREIGN KEY (currency) REFERENCES currencies (code);
ALTER TABLE orders ADD FOREIGN KEY (ship_address_id) REFERENCES addresses;
ALTER TABLE order_lines ADD FOREIGN KEY (order_id) REFERENCES orders;
ALTER TABLE order_lines ADD FOREIGN KEY (product_id) REFERENCES products;
ALTER TABLE returns ADD FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no);
`

const postLoad = `
CREATE VIEW customer_order_totals AS
  SELECT c.customer_id, c.name, count(o.order_id) AS order_count,
         sum(o.amt2 * cur.rate_to_usd) AS total_usd
  FROM customers c
  LEFT JOIN orders o ON o.customer_id = c.customer_id
  LEFT JOIN currencies cur ON cur.code = o.currency
  GROUP BY c.customer_id, c.name;
CREATE MATERIALIZED VIEW monthly_sales AS
  SELECT date_trunc('month', ordered_at) AS month, currency, count(*) AS orders, sum(amt2) AS revenue
  FROM orders WHERE status NOT IN ('cancelled', 'returned')
  GROUP BY 1, 2;
COMMENT ON TABLE regions IS 'Sales regions; each customer and sales employee belongs to one.';
COMMENT ON COLUMN regions.country_code IS 'ISO 3166 alpha-2 code of the main country of the region';
COMMENT ON TABLE currencies IS 'Currencies orders and supplier prices are quoted in.';
COMMENT ON COLUMN currencies.code IS 'ISO 4217 currency code, e.g. EUR, USD';
COMMENT ON COLUMN currencies.rate_to_usd IS 'units of USD per one unit of this currency (latest)';
COMMENT ON TABLE exchange_rates IS 'Daily historical exchange rates to USD.';
COMMENT ON TABLE customers IS 'Customer accounts (companies and consumers).';
COMMENT ON COLUMN customers.name IS 'company or person name as entered at sign-up';
COMMENT ON COLUMN customers.segment IS 'market segment; inconsistent case (SMB/smb), often missing';
COMMENT ON COLUMN customers.flag IS '1 = churned (customer cancelled their account), 0 or NULL = active';
COMMENT ON COLUMN customers.created_at IS 'when the account was created';
COMMENT ON COLUMN customers.notes IS 'free-text notes by account managers';
COMMENT ON TABLE addresses IS 'Postal addresses of customers; cities are typed by hand and spelled inconsistently.';
COMMENT ON COLUMN addresses.kind IS 'billing or shipping';
COMMENT ON COLUMN addresses.city IS 'city as typed by the customer (LA, L.A., Los Angeles, NYC, ...)';
COMMENT ON COLUMN addresses.state IS 'state or province code; mostly empty outside the US';
COMMENT ON COLUMN addresses.country IS 'country, spelled in several ways (US, USA, United States)';
COMMENT ON TABLE categories IS 'Product category tree.';
COMMENT ON COLUMN categories.parent_id IS 'parent category; NULL for top-level categories';
COMMENT ON TABLE suppliers IS 'Vendors we buy products from.';
COMMENT ON COLUMN suppliers.currency IS 'currency the supplier invoices in';
COMMENT ON TABLE products IS 'Sellable products (catalog items).';
COMMENT ON COLUMN products.sku IS 'stock keeping unit, unique article number';
COMMENT ON COLUMN products.list_price IS 'list price in USD before discounts';
COMMENT ON COLUMN products.discontinued IS 'true when the product can no longer be ordered';
COMMENT ON TABLE employees IS 'Sales staff.';
COMMENT ON COLUMN employees.manager_id IS 'the employee this employee reports to';
COMMENT ON TABLE orders IS 'Customer orders (one row per order).';
COMMENT ON COLUMN orders.employee_id IS 'sales employee credited with the order';
COMMENT ON COLUMN orders.status IS 'order life-cycle status';
COMMENT ON COLUMN orders.currency IS 'currency code the order was placed in';
COMMENT ON COLUMN orders.amt1 IS 'net total in the order currency, before tax';
COMMENT ON COLUMN orders.amt2 IS 'total in the order currency incl. tax';
COMMENT ON COLUMN orders.ship_address_id IS 'shipping address; NULL for store pick-up';
COMMENT ON COLUMN orders.shipped_at IS 'NULL until the order ships';
COMMENT ON COLUMN orders.channel IS 'sales channel: web, phone, store or partner';
COMMENT ON TABLE order_lines IS 'Order line items.';
COMMENT ON COLUMN order_lines.unit_price IS 'price per unit in the order currency';
COMMENT ON COLUMN order_lines.discount_pct IS 'discount in percent (0-100); NULL = no discount';
COMMENT ON TABLE returns IS 'Returned order lines.';
COMMENT ON VIEW customer_order_totals IS 'Per customer: number of orders and lifetime revenue in USD.';
COMMENT ON MATERIALIZED VIEW monthly_sales IS 'Monthly revenue per currency, excluding cancelled and returned orders (refreshed nightly).';
`

// Load creates the sample schema and data in conn's current database (in
// schema public). It does nothing when the tables already exist, so calling
// it twice is harmless.
func Load(ctx context.Context, conn *pgx.Conn, size Size) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('public.orders') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("sampledb: check: %w", err)
	}
	if exists {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sampledb: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("sampledb: create schema: %w", err)
	}
	// Binary COPY needs the enum's OID registered with the connection.
	typ, err := conn.LoadType(ctx, "order_status")
	if err != nil {
		return fmt.Errorf("sampledb: load enum type: %w", err)
	}
	conn.TypeMap().RegisterType(typ)

	g := newGen(size)
	for _, t := range g.tables() {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, t.src); err != nil {
			return fmt.Errorf("sampledb: copy %s: %w", t.name, err)
		}
	}
	if _, err := tx.Exec(ctx, foreignKeys); err != nil {
		return fmt.Errorf("sampledb: foreign keys: %w", err)
	}
	if _, err := tx.Exec(ctx, postLoad); err != nil {
		return fmt.Errorf("sampledb: views and comments: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sampledb: commit: %w", err)
	}
	// Statistics make row estimates, distinct counts and examples available.
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("sampledb: analyze: %w", err)
	}
	return nil
}

type copyTable struct {
	name string
	cols []string
	src  pgx.CopyFromSource
}

type gen struct {
	size      Size
	addrCount int // addresses: 1 or 2 per customer, known after customers
	custAddr  []int32
}

func newGen(size Size) *gen { return &gen{size: size} }

// rowsFunc adapts a row generator to pgx.CopyFromFunc.
func rowsFunc(n int, row func(i int) []any) pgx.CopyFromSource {
	i := 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		return row(i), nil
	})
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func cents(f float64) float64 { return math.Round(f*100) / 100 }

func orNil(r *rand.Rand, pNull float64, v any) any {
	if r.Float64() < pNull {
		return nil
	}
	return v
}

func (g *gen) tables() []copyTable {
	s := g.size
	r := rand.New(rand.NewPCG(seed, 1))
	var out []copyTable

	out = append(out, copyTable{"regions", []string{"region_id", "name", "country_code"}, pgx.CopyFromRows(regionRows)})
	var cur [][]any
	for _, c := range currencies {
		cur = append(cur, []any{c.code, c.name, c.rate})
	}
	out = append(out, copyTable{"currencies", []string{"code", "name", "rate_to_usd"}, pgx.CopyFromRows(cur)})
	days := 60
	out = append(out, copyTable{"exchange_rates", []string{"currency", "rate_date", "rate"},
		rowsFunc(days*len(currencies), func(i int) []any {
			c := currencies[(i-1)%len(currencies)]
			d := baseTime.AddDate(0, 0, (i-1)/len(currencies))
			return []any{c.code, d, math.Round(c.rate*(1+(r.Float64()-0.5)*0.04)*1e6) / 1e6}
		})})

	out = append(out, copyTable{"customers", []string{"customer_id", "name", "email", "phone", "segment", "flag", "region_id", "created_at", "notes"},
		rowsFunc(s.Customers, func(i int) []any {
			var name string
			if r.IntN(3) == 0 {
				name = pick(r, firstNames) + " " + pick(r, lastNames)
			} else {
				name = pick(r, companyA) + " " + pick(r, companyB)
			}
			var flag any
			switch x := r.IntN(10); {
			case x < 2:
				flag = 1
			case x < 6:
				flag = 0
			}
			return []any{i, name, orNil(r, 0.2, fmt.Sprintf("contact%d@example.com", i)),
				orNil(r, 0.6, fmt.Sprintf("+1-555-%04d", r.IntN(10000))), pick(r, segments), flag,
				orNil(r, 0.1, 1+r.IntN(len(regionRows))), baseTime.Add(time.Duration(r.IntN(365*24)) * time.Hour),
				orNil(r, 0.92, pick(r, []string{"VIP", "prefers phone contact", "late payer", "key account"}))}
		})})

	// Addresses: 1 or 2 per customer, the first one is used for shipping.
	type addr struct{ cust, kind int }
	var addrs []addr
	g.custAddr = make([]int32, s.Customers+1)
	for c := 1; c <= s.Customers; c++ {
		g.custAddr[c] = int32(len(addrs) + 1)
		addrs = append(addrs, addr{c, 0})
		if r.IntN(3) == 0 {
			addrs = append(addrs, addr{c, 1})
		}
	}
	g.addrCount = len(addrs)
	out = append(out, copyTable{"addresses", []string{"address_id", "customer_id", "kind", "street", "city", "state", "postal_code", "country"},
		rowsFunc(len(addrs), func(i int) []any {
			a := addrs[i-1]
			ci := r.IntN(len(cityVariants))
			kind := []string{"shipping", "billing"}[a.kind]
			return []any{i, a.cust, kind, fmt.Sprintf("%d %s St", 1+r.IntN(999), pick(r, lastNames)),
				orNil(r, 0.03, pick(r, cityVariants[ci])), orNil(r, 0.3, stateFor[ci]),
				orNil(r, 0.15, fmt.Sprintf("%05d", r.IntN(99999))), orNil(r, 0.05, pick(r, countrySpellings[cityCountry[ci]]))}
		})})

	out = append(out, copyTable{"categories", []string{"category_id", "name", "parent_id"},
		rowsFunc(len(categories), func(i int) []any {
			c := categories[i-1]
			var parent any
			if c.parent >= 0 {
				parent = c.parent + 1
			}
			return []any{i, c.name, parent}
		})})
	countries := []string{"US", "DE", "FR", "UK", "CH"}
	out = append(out, copyTable{"suppliers", []string{"supplier_id", "company_name", "contact_name", "country", "currency"},
		rowsFunc(s.Suppliers, func(i int) []any {
			cc := pick(r, countries)
			return []any{i, pick(r, companyA) + " " + pick(r, []string{"Supply", "Trading", "Wholesale"}) + " " + pick(r, companyB),
				orNil(r, 0.3, pick(r, firstNames)+" "+pick(r, lastNames)), pick(r, countrySpellings[cc]), countryCurrency[cc]}
		})})
	out = append(out, copyTable{"products", []string{"product_id", "sku", "name", "category_id", "supplier_id", "list_price", "discontinued", "weight_kg"},
		rowsFunc(s.Products, func(i int) []any {
			cat := r.IntN(len(categories))
			return []any{i, fmt.Sprintf("SKU-%05d", i), pick(r, adjective) + " " + pick(r, material) + " " + productNoun[cat],
				cat + 1, orNil(r, 0.05, 1+r.IntN(s.Suppliers)), productPrice(i), r.IntN(12) == 0,
				orNil(r, 0.4, math.Round(r.Float64()*20000)/1000)}
		})})
	out = append(out, copyTable{"employees", []string{"employee_id", "first_name", "last_name", "email", "title", "manager_id", "region_id", "hired_on"},
		rowsFunc(s.Employees, func(i int) []any {
			var mgr any
			if i > 5 {
				mgr = 1 + r.IntN(5)
			}
			return []any{i, pick(r, firstNames), pick(r, lastNames), orNil(r, 0.1, fmt.Sprintf("emp%d@corp.example", i)),
				orNil(r, 0.1, pick(r, titles)), mgr, 1 + (i-1)%len(regionRows), baseTime.AddDate(-r.IntN(10), -r.IntN(12), 0)}
		})})

	out = append(out, copyTable{"orders", []string{"order_id", "customer_id", "employee_id", "ordered_at", "status", "currency", "amt1", "amt2", "ship_address_id", "shipped_at", "channel"},
		rowsFunc(s.Orders, g.orderRow)})
	out = append(out, copyTable{"order_lines", []string{"order_id", "line_no", "product_id", "qty", "unit_price", "discount_pct"},
		g.lineRows()})
	out = append(out, copyTable{"returns", []string{"return_id", "order_id", "line_no", "returned_on", "reason"}, g.returnRows()})
	return out
}

func productPrice(i int) float64 {
	r := rand.New(rand.NewPCG(seed, uint64(i)+1e9))
	return cents(1 + r.ExpFloat64()*80)
}

// line is one order line; lines are derived from a per-order RNG so the
// orders and order_lines passes agree without holding them in memory.
type line struct {
	product, qty int
	price, disc  float64 // disc < 0: NULL
}

type order struct {
	cust, emp     int
	at            time.Time
	status        string
	currency      string
	rate          float64
	channel       string
	lines         []line
	shipNull, ret bool
}

func (g *gen) order(id int) order {
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	s := g.size
	o := order{cust: 1 + r.IntN(s.Customers), emp: 1 + r.IntN(s.Employees)}
	o.at = baseTime.Add(time.Duration(r.Int64N(int64(730 * 24 * time.Hour))))
	o.status = statuses[weighted(r, []int{8, 12, 15, 55, 6, 4})]
	c := currencies[weighted(r, []int{50, 30, 10, 5, 3, 2})]
	o.currency, o.rate = c.code, c.rate
	o.channel = pick(r, channels)
	o.shipNull = r.IntN(10) == 0
	n := 1 + r.IntN(s.MaxLinesPerOrder)
	for range n {
		p := 1 + r.IntN(s.Products)
		l := line{product: p, qty: 1 + r.IntN(5), price: cents(productPrice(p) / c.rate), disc: -1}
		if r.IntN(4) == 0 {
			l.disc = float64(5 * (1 + r.IntN(6)))
		}
		o.lines = append(o.lines, l)
	}
	o.ret = o.status == "returned"
	return o
}

func weighted(r *rand.Rand, w []int) int {
	total := 0
	for _, x := range w {
		total += x
	}
	x := r.IntN(total)
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

func (g *gen) orderRow(id int) []any {
	o := g.order(id)
	net := 0.0
	for _, l := range o.lines {
		d := 0.0
		if l.disc > 0 {
			d = l.disc
		}
		net += float64(l.qty) * l.price * (1 - d/100)
	}
	net = cents(net)
	var emp, ship, shipped, amt1 any = o.emp, g.custAddr[o.cust], nil, net
	if o.channel == "store" || o.shipNull {
		ship = nil
	}
	if id%17 == 0 {
		emp = nil
	}
	if id%23 == 0 {
		amt1 = nil // legacy import without net amounts
	}
	switch o.status {
	case "shipped", "delivered", "returned":
		shipped = o.at.Add(time.Duration(24+id%96) * time.Hour)
	}
	return []any{id, o.cust, emp, o.at, o.status, o.currency, amt1, cents(net * 1.19), ship, shipped, o.channel}
}

func (g *gen) lineRows() pgx.CopyFromSource {
	id, k := 0, 0
	var cur order
	return pgx.CopyFromFunc(func() ([]any, error) {
		for id == 0 || k >= len(cur.lines) {
			if id >= g.size.Orders {
				return nil, nil
			}
			id++
			cur, k = g.order(id), 0
		}
		l := cur.lines[k]
		k++
		var disc any
		if l.disc >= 0 {
			disc = l.disc
		}
		return []any{id, k, l.product, l.qty, l.price, disc}, nil
	})
}

func (g *gen) returnRows() pgx.CopyFromSource {
	id, n := 0, 0
	r := rand.New(rand.NewPCG(seed, 3))
	return pgx.CopyFromFunc(func() ([]any, error) {
		for id < g.size.Orders {
			id++
			o := g.order(id)
			if !o.ret {
				continue
			}
			n++
			return []any{n, id, 1 + r.IntN(len(o.lines)), o.at.AddDate(0, 0, 10+r.IntN(20)), pick(r, reasons)}, nil
		}
		return nil, nil
	})
}
