package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/sampledb"
)

// question is one scripted ask: what the fake model answers at each step.
type question struct {
	text      string
	keywords  []string
	entities  []string
	candidate string
	fix       string // the fixer's answer; "" answers with the candidate again
}

// scenario is a database and the questions asked of it.
type scenario struct {
	name     string
	database string
	load     func(ctx context.Context, conn *pgx.Conn) error
	// question returns the i-th ask; texts differ so no two asks are alike.
	question func(i int) question
}

func sampleScenario() scenario {
	statuses := []string{"pending", "paid", "shipped", "delivered", "cancelled", "returned"}
	// Spellings the address table may not hold: the literal correction
	// maps them to stored values.
	cities := []string{"Zuerich", "San Francisco", "Muenchen", "Koeln", "New York", "Seattle", "chicago", "Boston"}
	segments := []string{"Enterprise", "SMB", "Consumer"}
	categories := []string{"Chairs", "Desks", "Paper", "Monitors", "Keyboards", "Coffee"}
	currencies := []string{"USD", "EUR", "GBP", "CHF"}
	templates := []func(i int) question{
		func(i int) question {
			s := statuses[i%len(statuses)]
			return question{text: fmt.Sprintf("how many orders have status %s (#%d)", s, i), keywords: []string{"orders", "status"}, entities: []string{s},
				candidate: fmt.Sprintf("SELECT count(*) FROM orders WHERE status = '%s'", s)}
		},
		func(i int) question {
			k := 3 + i%10
			return question{text: fmt.Sprintf("top %d customers by number of orders (#%d)", k, i), keywords: []string{"customers", "orders"},
				candidate: fmt.Sprintf("SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.name ORDER BY n DESC LIMIT %d", k)}
		},
		func(i int) question {
			y := 2023 + i%2
			return question{text: fmt.Sprintf("revenue per currency in %d (#%d)", y, i), keywords: []string{"revenue", "currency", "orders"}, entities: []string{fmt.Sprint(y)},
				candidate: fmt.Sprintf("SELECT currency, sum(amt2) AS revenue FROM orders WHERE ordered_at >= '%d-01-01' AND ordered_at < '%d-01-01' GROUP BY currency", y, y+1)}
		},
		func(i int) question {
			city := cities[i%len(cities)]
			return question{text: fmt.Sprintf("customers with an address in %s (#%d)", city, i), keywords: []string{"customers", "address", "city"}, entities: []string{city},
				candidate: fmt.Sprintf("SELECT DISTINCT c.name FROM customers c JOIN addresses a ON a.customer_id = c.customer_id WHERE a.city = '%s'", city)}
		},
		func(i int) question {
			k := 5 + i%10
			return question{text: fmt.Sprintf("the %d best selling products (#%d)", k, i), keywords: []string{"products", "order lines", "quantity"},
				candidate: fmt.Sprintf("SELECT p.name, sum(l.qty) AS qty FROM order_lines l JOIN products p ON p.product_id = l.product_id GROUP BY p.name ORDER BY qty DESC LIMIT %d", k)}
		},
		func(i int) question {
			seg := segments[i%len(segments)]
			return question{text: fmt.Sprintf("how many %s customers churned (#%d)", seg, i), keywords: []string{"customers", "churned", "segment"}, entities: []string{seg},
				candidate: fmt.Sprintf("SELECT count(*) FROM customers WHERE flag = 1 AND segment = '%s'", seg)}
		},
		func(i int) question {
			cat := categories[i%len(categories)]
			return question{text: fmt.Sprintf("average list price of %s products (#%d)", cat, i), keywords: []string{"list price", "products", "category"}, entities: []string{cat},
				candidate: fmt.Sprintf("SELECT avg(p.list_price) FROM products p JOIN categories c ON c.category_id = p.category_id WHERE c.name = '%s'", cat)}
		},
		func(i int) question {
			return question{text: fmt.Sprintf("returns per reason since %d (#%d)", 2023+i%2, i), keywords: []string{"returns", "reason"},
				candidate: fmt.Sprintf("SELECT reason, count(*) FROM returns WHERE returned_on >= '%d-01-01' GROUP BY reason", 2023+i%2)}
		},
		func(i int) question {
			cur := currencies[i%len(currencies)]
			// A wrong column: one fixer round.
			return question{text: fmt.Sprintf("total net amount of orders in %s (#%d)", cur, i), keywords: []string{"net amount", "orders", "currency"}, entities: []string{cur},
				candidate: fmt.Sprintf("SELECT sum(net_total) FROM orders WHERE currency = '%s'", cur),
				fix:       fmt.Sprintf("SELECT sum(amt1) FROM orders WHERE currency = '%s'", cur)}
		},
		func(i int) question {
			return question{text: fmt.Sprintf("employees reporting to manager %d (#%d)", 1+i%5, i), keywords: []string{"employees", "manager"},
				candidate: fmt.Sprintf("SELECT e.first_name, e.last_name FROM employees e WHERE e.manager_id = %d", 1+i%5)}
		},
	}
	return scenario{
		name:     "sample",
		database: "shop",
		load:     func(ctx context.Context, conn *pgx.Conn) error { return sampledb.Load(ctx, conn, sampledb.Small) },
		question: func(i int) question { return templates[i%len(templates)](i) },
	}
}

func wideScenario(tables, cols int) scenario {
	// Integer and numeric columns of the synthetic tables (see sampledb.WideSchema).
	var numeric []int
	for c := 3; c <= cols; c++ {
		if c%8 == 1 || c%8 == 2 || c%8 == 7 {
			numeric = append(numeric, c)
		}
	}
	templates := []func(i int) question{
		func(i int) question {
			t, c := 1+(i*7)%tables, numeric[i%len(numeric)]
			return question{text: fmt.Sprintf("total of c%02d in table w%03d (#%d)", c, t, i), keywords: []string{fmt.Sprintf("w%03d", t), fmt.Sprintf("c%02d", c)},
				candidate: fmt.Sprintf("SELECT sum(c%02d) FROM w%03d", c, t)}
		},
		func(i int) question {
			t := 2 + (i*13)%(tables-1)
			return question{text: fmt.Sprintf("rows of w%03d with their parent row in w%03d (#%d)", t, t-1, i), keywords: []string{fmt.Sprintf("w%03d", t), fmt.Sprintf("w%03d", t-1), "parent"},
				candidate: fmt.Sprintf("SELECT a.id, b.id AS parent FROM w%03d a JOIN w%03d b ON b.id = a.parent_id", t, t-1)}
		},
		func(i int) question {
			t := 1 + (i*31)%tables
			return question{text: fmt.Sprintf("how many rows does w%03d have (#%d)", t, i), keywords: []string{fmt.Sprintf("w%03d", t), "rows"},
				candidate: fmt.Sprintf("SELECT count(*) FROM w%03d", t),
			}
		},
		func(i int) question {
			t := 1 + (i*17)%tables
			// A wrong column: one fixer round.
			return question{text: fmt.Sprintf("largest id in table w%03d (#%d)", t, i), keywords: []string{fmt.Sprintf("w%03d", t), "id"},
				candidate: fmt.Sprintf("SELECT max(ident) FROM w%03d", t), fix: fmt.Sprintf("SELECT max(id) FROM w%03d", t)}
		},
	}
	return scenario{
		name:     fmt.Sprintf("wide %d×%d", tables, cols),
		database: "wide",
		load:     func(ctx context.Context, conn *pgx.Conn) error { return sampledb.WideSchema(ctx, conn, tables, cols) },
		question: func(i int) question { return templates[i%len(templates)](i) },
	}
}

// questionOf finds the question in a rendered candidate or fixer prompt.
func questionOf(prompt string) string {
	_, rest, ok := strings.Cut(prompt, "Question:\n")
	if !ok {
		return ""
	}
	q, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(q)
}
