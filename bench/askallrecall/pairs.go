package main

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// Two-database questions as the paper built them: two single-database
// questions with numeric answers combined into "which is larger". The
// model is the fake Ollama server, scripted to plan the right pair and to
// write each question's gold SQL, so what is measured is everything else:
// whether the selection memory puts both databases among the top K, whether
// both SQLs run with the asker's privileges through the authenticator, and
// whether the comparison computed from the results is right. The figures
// are simulated (scripted model), not accuracy.

// Substrings that tell the prompts apart (prompts/templates).
const (
	fakeModel    = "qwen2.5-coder:7b"
	authPassword = "auth-pw"
)

// PairResult is the two-database measurement.
type PairResult struct {
	Numeric         int    `json:"numeric_questions"`
	Pairs           int    `json:"pairs"`
	TopK            int    `json:"top_k"`
	Selected        int    `json:"both_databases_in_top_k"`
	BothRan         int    `json:"both_sqls_ran_as_asker"`
	ComputedCorrect int    `json:"comparison_correct"`
	Restricted      int    `json:"restricted_pairs"`
	PartialSaid     int    `json:"restricted_partial_answers"`
	Leaks           int    `json:"restricted_leaks"`
	RevokedDB       string `json:"revoked_database"`
	// NotSelected are the pairs whose two databases were not both among
	// the candidates: "db1+db2 (top: a, b, c)".
	NotSelected []string `json:"not_selected,omitempty"`
}

type numeric struct {
	q     dataset.Question
	sql   string
	value *big.Rat
	text  string
}

// scalarQuestions are the questions whose (first) gold SQL, free of
// sql-eval's {a, b} alternatives, returns one row with one number.
func scalarQuestions(ctx context.Context, c *pgcluster.Cluster, qs []dataset.Question, golds []string) []numeric {
	var out []numeric
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, conn := range conns {
			conn.Close(ctx)
		}
	}()
	for i, q := range qs {
		sql := strings.TrimSpace(strings.Split(golds[i], ";")[0])
		if sql == "" || strings.ContainsAny(sql, "{}") {
			continue
		}
		conn := conns[q.DB]
		if conn == nil {
			var err error
			if conn, err = c.Connect(ctx, q.DB); err != nil {
				continue
			}
			conns[q.DB] = conn
		}
		rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			continue
		}
		var val []byte
		n, null := 0, true
		for rows.Next() {
			n++
			if v := rows.RawValues(); len(v) == 1 && v[0] != nil {
				val, null = append([]byte(nil), v[0]...), false
			}
		}
		ok := rows.Err() == nil && n == 1 && len(rows.FieldDescriptions()) == 1 && !null
		rows.Close()
		if !ok {
			continue
		}
		r, isNum := new(big.Rat).SetString(string(val))
		if !isNum {
			continue
		}
		out = append(out, numeric{q: q, sql: sql, value: r, text: string(val)})
	}
	return out
}

// makePairs picks max pairs of numeric questions from different databases,
// spread evenly over all such pairs, deterministically.
func makePairs(ns []numeric, max int) [][2]numeric {
	var all [][2]numeric
	for i := range ns {
		for j := i + 1; j < len(ns); j++ {
			if ns[i].q.DB != ns[j].q.DB {
				all = append(all, [2]numeric{ns[i], ns[j]})
			}
		}
	}
	if len(all) <= max {
		return all
	}
	out := make([][2]numeric, 0, max)
	for k := 0; k < max; k++ {
		out = append(out, all[k*len(all)/max])
	}
	return out
}

func runPairs(ctx context.Context, c *pgcluster.Cluster, mgr *catalog.Manager, names []string, qs []dataset.Question, golds []string, maxPairs, topK int) (PairResult, error) {
	res := PairResult{TopK: topK, RevokedDB: names[len(names)-1]}
	ns := scalarQuestions(ctx, c, qs, golds)
	pairs := makePairs(ns, maxPairs)
	res.Pairs = len(pairs)
	res.Numeric = len(ns)
	if len(pairs) == 0 {
		return res, fmt.Errorf("no numeric question pairs")
	}

	// Roles: an authenticator granted two askers; analyst may read every
	// database, limited every database but the revoked one.
	setup := fmt.Sprintf(`CREATE ROLE nlproxy_auth LOGIN NOINHERIT PASSWORD '%s';
CREATE ROLE analyst LOGIN PASSWORD 'x'; CREATE ROLE limited LOGIN PASSWORD 'x';
GRANT analyst TO nlproxy_auth; GRANT limited TO nlproxy_auth;`, authPassword)
	if err := c.Exec(ctx, "postgres", setup); err != nil {
		return res, err
	}
	for _, n := range names {
		grant := "GRANT SELECT ON ALL TABLES IN SCHEMA public TO analyst"
		if n != res.RevokedDB {
			grant += ", limited"
		}
		if err := c.Exec(ctx, n, grant); err != nil {
			return res, err
		}
	}
	if err := c.CreateDatabase(ctx, "home"); err != nil {
		return res, err
	}

	fake, err := fakeollama.Start(fakeollama.Options{Models: []string{fakeModel}, Default: &fakeollama.Rule{Reply: "no JSON here"}})
	if err != nil {
		return res, err
	}
	defer fake.Close()
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: fakeModel, llm.RoleSmall: fakeModel},
		CallTimeout: 30 * time.Second, MaxRetries: -1, Logger: zap.NewNop()})
	if err != nil {
		return res, err
	}
	eng := &engine.Engine{LLM: client, Catalogs: mgr, TrialTimeout: 10 * time.Second}
	asker := &askall.Asker{Engine: eng, LLM: client, Catalogs: mgr, Databases: names, TopK: topK,
		Connect: func(ctx context.Context, database string) (*pgconn.PgConn, error) {
			return pgconn.Connect(ctx, c.URL("nlproxy_auth", authPassword, database))
		}}

	for _, p := range pairs {
		q := fmt.Sprintf("Which question has a larger number as its answer? Q1: %s; Q2: %s", p[0].q.Question, p[1].q.Question)
		plan := fmt.Sprintf(`{"steps": [{"database": %q, "goal": %q}, {"database": %q, "goal": %q}], "combine": "larger"}`,
			p[0].q.DB, p[0].q.Question, p[1].q.DB, p[1].q.Question)
		rules := []fakeollama.Rule{
			{Name: "switch", PromptContains: []string{fakeollama.PromptSwitch}, Reply: `{"needs_data": true, "answer": ""}`},
			{Name: "plan", PromptContains: []string{fakeollama.PromptPlan}, Reply: plan},
			{Name: "answer", PromptContains: []string{fakeollama.PromptAnswer}, Reply: `{"answer": "See the computed comparison."}`},
		}
		for _, n := range p {
			reply := "```sql\n" + n.sql + "\n```"
			rules = append(rules, fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, n.q.Question}, Reply: reply},
				fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer, n.q.Question}, Reply: reply})
		}
		fake.SetRules(rules...)

		var top []string
		for _, cd := range asker.Top(ctx, q) {
			top = append(top, cd.Database)
		}
		if contains(top, p[0].q.DB) && contains(top, p[1].q.DB) {
			res.Selected++
		} else {
			res.NotSelected = append(res.NotSelected, fmt.Sprintf("%s+%s (top: %s)", p[0].q.DB, p[1].q.DB, strings.Join(top, ", ")))
		}

		ans, err := askAs(ctx, c, asker, "analyst", q)
		if err != nil {
			return res, fmt.Errorf("analyst: %w", err)
		}
		ran := len(ans.Steps) == 2 && ans.Role == "analyst"
		for i, st := range ans.Steps {
			if i < 2 && (st.Err != nil || st.Rows == nil || st.Database != p[i].q.DB) {
				ran = false
			}
		}
		if ran {
			res.BothRan++
			if len(ans.Computed) == 1 && ans.Computed[0] == expected(p) {
				res.ComputedCorrect++
			}
		}

		if p[0].q.DB == res.RevokedDB || p[1].q.DB == res.RevokedDB {
			res.Restricted++
			ans, err := askAs(ctx, c, asker, "limited", q)
			if err != nil {
				return res, fmt.Errorf("limited: %w", err)
			}
			if strings.Contains(ans.Text, "Partial answer") || strings.Contains(ans.Text, "Not consulted") {
				res.PartialSaid++
			}
			for _, st := range ans.Steps {
				if st.Database == res.RevokedDB && st.Rows != nil {
					res.Leaks++
				}
			}
		}
	}
	return res, nil
}

// expected is the comparison sentence, computed here independently from
// the values Postgres gave the superuser.
func expected(p [2]numeric) string {
	a, b := p[0], p[1]
	l := func(i int, n numeric) string {
		return fmt.Sprintf("step %d (%s) = %s", i, n.q.DB, strings.TrimSpace(n.text))
	}
	diff := new(big.Rat).Abs(new(big.Rat).Sub(a.value, b.value))
	d := diff.FloatString(12)
	if diff.IsInt() {
		d = diff.Num().String()
	} else {
		d = strings.TrimSuffix(strings.TrimRight(d, "0"), ".")
	}
	switch a.value.Cmp(b.value) {
	case 0:
		return l(1, a) + " and " + l(2, b) + " are equal"
	case 1:
		return l(1, a) + " is larger than " + l(2, b) + ", by " + d
	}
	return l(2, b) + " is larger than " + l(1, a) + ", by " + d
}

func askAs(ctx context.Context, c *pgcluster.Cluster, asker *askall.Asker, role, q string) (*askall.Answer, error) {
	conn, err := pgconn.Connect(ctx, c.URL(role, "x", "home"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	return asker.Ask(ctx, askall.Request{Question: q, Database: "home", User: role, TxStatus: pg.TxIdle, Exec: engine.ConnExecutor{Conn: conn}})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func reportPairs(w io.Writer, r PairResult) {
	fmt.Fprintf(w, "\ntwo-database questions (simulated: scripted model), %d pairs of %d single-number questions, top-%d\n", r.Pairs, r.Numeric, r.TopK)
	fmt.Fprintf(w, "both databases among the candidates  %d/%d\n", r.Selected, r.Pairs)
	for _, m := range r.NotSelected {
		fmt.Fprintf(w, "  not selected: %s\n", m)
	}
	fmt.Fprintf(w, "both SQLs ran as the asker           %d/%d\n", r.BothRan, r.Pairs)
	fmt.Fprintf(w, "comparison computed correctly        %d/%d\n", r.ComputedCorrect, r.Pairs)
	fmt.Fprintf(w, "user without rights on %s: %d pairs, partial answer said %d, rows from %s %d\n",
		r.RevokedDB, r.Restricted, r.PartialSaid, r.RevokedDB, r.Leaks)
}
