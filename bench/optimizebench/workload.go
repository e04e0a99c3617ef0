package main

// query is one slow-but-correct query with its known faster equivalent
// (good), a slower equivalent (slower) and a non-equivalent rewrite
// (wrong). The scripted model also offers one invalid proposal per query.
type query struct {
	name, pattern string
	orig, good    string
	slower, wrong string
}

// setupSQL adds indexes a real schema would have; orders.customer_id and
// order_lines.product_id stay unindexed, as in the sample schema.
const setupSQL = `
CREATE INDEX orders_ordered_at_idx ON orders (ordered_at);
CREATE INDEX customers_email_idx ON customers (email);
ANALYZE;
`

// ballast is an always-true condition that costs a scan of a table the
// query reads anyway (the monitor rejects a rewrite reading a table the
// original does not): what makes the "slower" proposals slower and still
// equivalent.
func ballast(table string) string { return "(SELECT count(*) FROM " + table + ") >= 0" }

func workload() []query {
	return []query{
		{
			name: "count per customer", pattern: "scalar subquery per row",
			orig:   "SELECT c.customer_id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS orders FROM customers c WHERE c.customer_id <= 60 ORDER BY c.customer_id",
			good:   "SELECT c.customer_id, c.name, count(o.order_id) AS orders FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id <= 60 GROUP BY c.customer_id, c.name ORDER BY c.customer_id",
			slower: "SELECT c.customer_id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS orders FROM customers c WHERE c.customer_id <= 60 AND " + ballast("orders") + " ORDER BY c.customer_id",
			wrong:  "SELECT c.customer_id, c.name, count(*) AS orders FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id < 60 GROUP BY c.customer_id, c.name ORDER BY c.customer_id",
		},
		{
			name: "total and last order per customer", pattern: "scalar subquery per row",
			orig:   "SELECT c.customer_id, (SELECT sum(o.amt2) FROM orders o WHERE o.customer_id = c.customer_id) AS total, (SELECT max(o.ordered_at) FROM orders o WHERE o.customer_id = c.customer_id) AS last_order FROM customers c WHERE c.customer_id BETWEEN 100 AND 140 ORDER BY 1",
			good:   "SELECT c.customer_id, sum(o.amt2) AS total, max(o.ordered_at) AS last_order FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id BETWEEN 100 AND 140 GROUP BY c.customer_id ORDER BY 1",
			slower: "SELECT c.customer_id, (SELECT sum(o.amt2) FROM orders o WHERE o.customer_id = c.customer_id) AS total, (SELECT max(o.ordered_at) FROM orders o WHERE o.customer_id = c.customer_id) AS last_order FROM customers c WHERE c.customer_id BETWEEN 100 AND 140 AND " + ballast("orders") + " ORDER BY 1",
			wrong:  "SELECT c.customer_id, sum(o.amt1) AS total, max(o.ordered_at) AS last_order FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id BETWEEN 100 AND 140 GROUP BY c.customer_id ORDER BY 1",
		},
		{
			name: "products priced below their average sale", pattern: "scalar subquery per row",
			orig:   "SELECT p.product_id, p.list_price FROM products p WHERE p.product_id <= 40 AND p.list_price < (SELECT avg(ol.unit_price) FROM order_lines ol WHERE ol.product_id = p.product_id)",
			good:   "SELECT p.product_id, p.list_price FROM products p JOIN (SELECT ol.product_id, avg(ol.unit_price) AS a FROM order_lines ol WHERE ol.product_id <= 40 GROUP BY ol.product_id) x ON x.product_id = p.product_id WHERE p.product_id <= 40 AND p.list_price < x.a",
			slower: "SELECT p.product_id, p.list_price FROM products p WHERE p.product_id <= 40 AND " + ballast("order_lines") + " AND p.list_price < (SELECT avg(ol.unit_price) FROM order_lines ol WHERE ol.product_id = p.product_id)",
			wrong:  "SELECT p.product_id, p.list_price + 0.01 AS list_price FROM products p JOIN (SELECT ol.product_id, avg(ol.unit_price) AS a FROM order_lines ol GROUP BY ol.product_id) x ON x.product_id = p.product_id WHERE p.product_id <= 40 AND p.list_price < x.a",
		},
		{
			name: "latest order of a few customers", pattern: "scalar subquery per row",
			orig:   "SELECT o.customer_id, o.order_id FROM orders o WHERE o.customer_id <= 8 AND o.ordered_at = (SELECT max(o2.ordered_at) FROM orders o2 WHERE o2.customer_id = o.customer_id)",
			good:   "SELECT o.customer_id, o.order_id FROM orders o JOIN (SELECT customer_id, max(ordered_at) AS m FROM orders WHERE customer_id <= 8 GROUP BY customer_id) x ON x.customer_id = o.customer_id AND o.ordered_at = x.m",
			slower: "SELECT o.customer_id, o.order_id FROM orders o WHERE o.customer_id <= 8 AND " + ballast("orders") + " AND o.ordered_at = (SELECT max(o2.ordered_at) FROM orders o2 WHERE o2.customer_id = o.customer_id)",
			wrong:  "SELECT o.customer_id, o.order_id FROM orders o JOIN (SELECT customer_id, min(ordered_at) AS m FROM orders WHERE customer_id <= 8 GROUP BY customer_id) x ON x.customer_id = o.customer_id AND o.ordered_at = x.m",
		},
		{
			name: "orders of one customer or one order id", pattern: "OR across tables",
			orig:   "SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.customer_id = 4242 OR o.order_id = 123456",
			good:   "SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.customer_id = 4242 UNION SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE o.order_id = 123456",
			slower: "SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE (c.customer_id = 4242 OR o.order_id = 123456) AND " + ballast("orders"),
			wrong:  "SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.customer_id = 4242",
		},
		{
			name: "orders by region or channel", pattern: "OR across tables",
			orig:   "SELECT count(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.email = 'nobody@example.invalid' OR o.ordered_at >= '2024-12-30'",
			good:   "SELECT count(*) FROM (SELECT o.order_id FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.email = 'nobody@example.invalid' UNION SELECT o.order_id FROM orders o WHERE o.ordered_at >= '2024-12-30') x",
			slower: "SELECT count(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE (c.email = 'nobody@example.invalid' OR o.ordered_at >= '2024-12-30') AND " + ballast("orders"),
			wrong:  "SELECT count(*) FROM orders o WHERE o.ordered_at >= '2024-12-29'",
		},
		{
			name: "orders in one month (date_trunc)", pattern: "non-sargable predicate",
			orig:   "SELECT count(*), sum(o.amt2) FROM orders o WHERE date_trunc('month', o.ordered_at) = '2023-03-01'",
			good:   "SELECT count(*), sum(o.amt2) FROM orders o WHERE o.ordered_at >= '2023-03-01' AND o.ordered_at < '2023-04-01'",
			slower: "SELECT count(*), sum(o.amt2) FROM orders o WHERE to_char(o.ordered_at, 'YYYY-MM') = '2023-03'",
			wrong:  "SELECT count(*), sum(o.amt2) FROM orders o WHERE o.ordered_at >= '2023-03-01' AND o.ordered_at < '2023-03-31'",
		},
		{
			name: "orders on one day (cast to date)", pattern: "non-sargable predicate",
			orig:   "SELECT o.order_id, o.amt2 FROM orders o WHERE o.ordered_at::date = '2023-06-15'",
			good:   "SELECT o.order_id, o.amt2 FROM orders o WHERE o.ordered_at >= '2023-06-15' AND o.ordered_at < '2023-06-16'",
			slower: "SELECT o.order_id, o.amt2 FROM orders o WHERE to_char(o.ordered_at, 'YYYY-MM-DD') = '2023-06-15'",
			wrong:  "SELECT o.order_id, o.amt2 FROM orders o WHERE o.ordered_at >= '2023-06-15' AND o.ordered_at < '2023-06-17'",
		},
		{
			name: "orders in a year and month (extract)", pattern: "non-sargable predicate",
			orig:   "SELECT count(*) FROM orders o WHERE extract(year FROM o.ordered_at) = 2024 AND extract(month FROM o.ordered_at) = 2",
			good:   "SELECT count(*) FROM orders o WHERE o.ordered_at >= '2024-02-01' AND o.ordered_at < '2024-03-01'",
			slower: "SELECT count(*) FROM orders o WHERE to_char(o.ordered_at, 'YYYY') = '2024' AND to_char(o.ordered_at, 'MM') = '02'",
			wrong:  "SELECT count(*) FROM orders o WHERE o.ordered_at >= '2024-02-01' AND o.ordered_at < '2024-02-29'",
		},
		{
			name: "order by id as text", pattern: "non-sargable predicate",
			orig:   "SELECT o.order_id, o.status FROM orders o WHERE o.order_id::text = '123456'",
			good:   "SELECT o.order_id, o.status FROM orders o WHERE o.order_id = 123456",
			slower: "SELECT o.order_id, o.status FROM orders o WHERE o.order_id::text = '123456' AND " + ballast("orders"),
			wrong:  "SELECT o.order_id, o.status FROM orders o WHERE o.order_id = 123457",
		},
		{
			name: "order by id plus zero", pattern: "non-sargable predicate",
			orig:   "SELECT o.order_id, o.amt2 FROM orders o WHERE o.order_id + 0 = 777",
			good:   "SELECT o.order_id, o.amt2 FROM orders o WHERE o.order_id = 777",
			slower: "SELECT o.order_id, o.amt2 FROM orders o WHERE o.order_id + 0 = 777 AND " + ballast("orders"),
			wrong:  "SELECT o.order_id, o.amt1 AS amt2 FROM orders o WHERE o.order_id = 777",
		},
		{
			name: "customers without orders", pattern: "NOT IN",
			orig:   "SELECT c.customer_id FROM customers c WHERE c.customer_id <= 400 AND c.customer_id NOT IN (SELECT o.customer_id FROM orders o)",
			good:   "SELECT c.customer_id FROM customers c WHERE c.customer_id <= 400 AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)",
			slower: "SELECT c.customer_id FROM customers c WHERE c.customer_id <= 400 AND " + ballast("orders") + " AND c.customer_id NOT IN (SELECT o.customer_id FROM orders o)",
			wrong:  "SELECT c.customer_id FROM customers c WHERE c.customer_id <= 400 AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.status = 'paid')",
		},
		{
			name: "products never returned", pattern: "NOT IN",
			orig:   "SELECT count(*) FROM order_lines ol WHERE ol.order_id <= 3000 AND (ol.order_id, ol.line_no) NOT IN (SELECT r.order_id, r.line_no FROM returns r)",
			good:   "SELECT count(*) FROM order_lines ol WHERE ol.order_id <= 3000 AND NOT EXISTS (SELECT 1 FROM returns r WHERE r.order_id = ol.order_id AND r.line_no = ol.line_no)",
			slower: "SELECT count(*) FROM order_lines ol WHERE ol.order_id <= 3000 AND " + ballast("order_lines") + " AND (ol.order_id, ol.line_no) NOT IN (SELECT r.order_id, r.line_no FROM returns r)",
			wrong:  "SELECT count(*) FROM order_lines ol WHERE ol.order_id <= 3000 AND NOT EXISTS (SELECT 1 FROM returns r WHERE r.order_id = ol.order_id)",
		},
		{
			name: "status counts", pattern: "repeated scans -> FILTER",
			orig:   "SELECT (SELECT count(*) FROM orders WHERE status = 'paid') AS paid, (SELECT count(*) FROM orders WHERE status = 'shipped') AS shipped, (SELECT count(*) FROM orders WHERE status = 'cancelled') AS cancelled, (SELECT sum(amt2) FROM orders WHERE channel = 'web') AS web_total",
			good:   "SELECT count(*) FILTER (WHERE status = 'paid') AS paid, count(*) FILTER (WHERE status = 'shipped') AS shipped, count(*) FILTER (WHERE status = 'cancelled') AS cancelled, sum(amt2) FILTER (WHERE channel = 'web') AS web_total FROM orders",
			slower: "SELECT (SELECT count(*) FROM orders WHERE status = 'paid') AS paid, (SELECT count(*) FROM orders WHERE status = 'shipped') AS shipped, (SELECT count(*) FROM orders WHERE status = 'cancelled') AS cancelled, (SELECT sum(amt2) FROM orders WHERE channel = 'web') AS web_total WHERE " + ballast("orders"),
			wrong:  "SELECT count(*) FILTER (WHERE status = 'paid') AS paid, count(*) FILTER (WHERE status = 'shipped') AS shipped, count(*) FILTER (WHERE status = 'cancelled') AS cancelled, sum(amt2) FILTER (WHERE channel ILIKE 'web') AS web_total FROM orders",
		},
		{
			name: "orders per channel", pattern: "repeated scans -> FILTER",
			orig:   "SELECT 'web' AS channel, count(*) AS n FROM orders WHERE channel = 'web' UNION ALL SELECT 'phone', count(*) FROM orders WHERE channel = 'phone' UNION ALL SELECT 'store', count(*) FROM orders WHERE channel = 'store'",
			good:   "SELECT o.channel, count(*) AS n FROM orders o WHERE o.channel IN ('web', 'phone', 'store') GROUP BY o.channel",
			slower: "SELECT 'web' AS channel, count(*) AS n FROM orders WHERE channel = 'web' AND " + ballast("orders") + " UNION ALL SELECT 'phone', count(*) FROM orders WHERE channel = 'phone' UNION ALL SELECT 'store', count(*) FROM orders WHERE channel = 'store'",
			wrong:  "SELECT lower(o.channel) AS channel, count(*) AS n FROM orders o WHERE lower(o.channel) IN ('web', 'phone', 'store') GROUP BY 1",
		},
		{
			name: "line statistics", pattern: "repeated scans -> FILTER",
			orig:   "SELECT (SELECT sum(qty) FROM order_lines WHERE discount_pct IS NULL) AS full_price_qty, (SELECT sum(qty) FROM order_lines WHERE discount_pct > 0) AS discounted_qty, (SELECT max(unit_price) FROM order_lines) AS top_price",
			good:   "SELECT sum(qty) FILTER (WHERE discount_pct IS NULL) AS full_price_qty, sum(qty) FILTER (WHERE discount_pct > 0) AS discounted_qty, max(unit_price) AS top_price FROM order_lines",
			slower: "SELECT (SELECT sum(qty) FROM order_lines WHERE discount_pct IS NULL) AS full_price_qty, (SELECT sum(qty) FROM order_lines WHERE discount_pct > 0) AS discounted_qty, (SELECT max(unit_price) FROM order_lines) AS top_price WHERE " + ballast("order_lines"),
			wrong:  "SELECT sum(qty) FILTER (WHERE discount_pct IS NULL) AS full_price_qty, sum(qty) FILTER (WHERE discount_pct > 0 AND qty > 1) AS discounted_qty, max(unit_price) AS top_price FROM order_lines",
		},
		{
			name: "customers with partner orders", pattern: "DISTINCT over join",
			orig:   "SELECT DISTINCT c.customer_id, c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE o.channel = 'partner'",
			good:   "SELECT c.customer_id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.channel = 'partner')",
			slower: "SELECT DISTINCT c.customer_id, c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE o.channel = 'partner' AND " + ballast("orders"),
			wrong:  "SELECT c.customer_id, c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE o.channel = 'partner'",
		},
		{
			name: "products ever sold", pattern: "DISTINCT over join",
			orig:   "SELECT DISTINCT p.product_id, p.sku FROM products p JOIN order_lines ol ON ol.product_id = p.product_id WHERE ol.qty >= 3",
			good:   "SELECT p.product_id, p.sku FROM products p WHERE EXISTS (SELECT 1 FROM order_lines ol WHERE ol.product_id = p.product_id AND ol.qty >= 3)",
			slower: "SELECT DISTINCT p.product_id, p.sku FROM products p JOIN order_lines ol ON ol.product_id = p.product_id WHERE ol.qty >= 3 AND " + ballast("order_lines"),
			wrong:  "SELECT p.product_id, p.sku FROM products p WHERE p.product_id % 100 <> 0 AND EXISTS (SELECT 1 FROM order_lines ol WHERE ol.product_id = p.product_id AND ol.qty >= 3)",
		},
		{
			name: "unique rows made DISTINCT", pattern: "redundant DISTINCT",
			orig:   "SELECT DISTINCT o.order_id, o.customer_id, o.amt2 FROM orders o WHERE o.channel = 'web'",
			good:   "SELECT o.order_id, o.customer_id, o.amt2 FROM orders o WHERE o.channel = 'web'",
			slower: "SELECT DISTINCT o.order_id, o.customer_id, o.amt2 FROM orders o WHERE o.channel = 'web' AND " + ballast("orders"),
			wrong:  "SELECT DISTINCT o.customer_id, o.customer_id AS order_id, o.amt2 FROM orders o WHERE o.channel = 'web'",
		},
		{
			name: "recent orders joined to customers", pattern: "redundant join",
			orig:   "SELECT o.order_id, o.amt2 FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE o.ordered_at >= '2024-06-01'",
			good:   "SELECT o.order_id, o.amt2 FROM orders o WHERE o.ordered_at >= '2024-06-01'",
			slower: "SELECT o.order_id, o.amt2 FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE o.ordered_at >= '2024-06-01' AND " + ballast("orders"),
			wrong:  "SELECT o.order_id, o.amt2 FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE o.ordered_at >= '2024-06-01' AND c.region_id IS NOT NULL",
		},
		{
			name: "order totals joined to currencies", pattern: "redundant join",
			orig:   "SELECT o.currency, sum(o.amt2) AS total FROM orders o JOIN currencies cur ON cur.code = o.currency GROUP BY o.currency",
			good:   "SELECT o.currency, sum(o.amt2) AS total FROM orders o GROUP BY o.currency",
			slower: "SELECT o.currency, sum(o.amt2) AS total FROM orders o JOIN currencies cur ON cur.code = o.currency WHERE " + ballast("orders") + " GROUP BY o.currency",
			wrong:  "SELECT o.currency, sum(o.amt1) AS total FROM orders o GROUP BY o.currency",
		},
		{
			name: "web and phone order ids", pattern: "redundant UNION dedup",
			orig:   "SELECT order_id FROM orders WHERE channel = 'web' UNION SELECT order_id FROM orders WHERE channel = 'phone'",
			good:   "SELECT order_id FROM orders WHERE channel IN ('web', 'phone')",
			slower: "SELECT order_id FROM orders WHERE channel = 'web' AND " + ballast("orders") + " UNION SELECT order_id FROM orders WHERE channel = 'phone'",
			wrong:  "SELECT order_id FROM orders WHERE channel IN ('web', 'Web', 'phone')",
		},
		{
			name: "revenue per region", pattern: "aggregate before join (movement)",
			orig:   "SELECT c.region_id, sum(o.amt2) AS revenue FROM orders o JOIN customers c ON c.customer_id = o.customer_id GROUP BY c.region_id",
			good:   "SELECT c.region_id, sum(x.s) AS revenue FROM (SELECT customer_id, sum(amt2) AS s FROM orders GROUP BY customer_id) x JOIN customers c ON c.customer_id = x.customer_id GROUP BY c.region_id",
			slower: "SELECT c.region_id, sum(o.amt2) AS revenue FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE " + ballast("orders") + " GROUP BY c.region_id",
			wrong:  "SELECT c.region_id, sum(x.s) AS revenue FROM (SELECT customer_id, sum(amt2) AS s FROM orders GROUP BY customer_id) x JOIN customers c ON c.customer_id = x.customer_id WHERE c.region_id IS NOT NULL GROUP BY c.region_id",
		},
	}
}
