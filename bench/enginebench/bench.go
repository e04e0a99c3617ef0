package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const (
	model   = "qwen2.5-coder:7b"
	warmUp  = 10
	numCtx  = llm.DefaultNumCtx
	fenced  = "Sub-questions:\n1. the rows -> %s\n```sql\n%s\n```"
	keyStep = "You pick search terms"
	fixStep = "did not work as it should"
	// engine v2's steps (prompts/templates)
	planStep      = "Plan: describe, step by step"
	syntheticStep = "practice questions"
	decomposeStep = "separate what the question wants returned"
	unitTestsStep = "You write unit tests"
	unitEvalStep  = "against one unit test"
	pairwiseStep  = "decide which one answers the question"
	// Model-assisted schema selection (balanced, max; wide schema only).
	filterStep  = "mark the ones that could help answer"
	tablesStep  = "You choose the tables of a PostgreSQL database"
	columnsStep = "You choose the tables and columns"
)

// result is one scenario's figures.
type result struct {
	Schema       string        `json:"schema"`
	Profile      string        `json:"profile"`
	Tables       int           `json:"tables"`
	Columns      int           `json:"columns"`
	Asks         int           `json:"asks"`
	Failed       int           `json:"failed"`
	CatalogBuild time.Duration `json:"catalog_build_ns"`
	// Per ask: Total is Translate's wall time, SQL the time spent in the
	// executor running trial SQL (BEGIN/ROLLBACK included), Overhead the rest.
	TotalP50, TotalP99       time.Duration
	SQLP50, SQLP99           time.Duration
	OverheadP50, OverheadP99 time.Duration
	OverheadMax              time.Duration
	CallsAvg                 float64 `json:"llm_calls_avg"`
	CallsMax                 int     `json:"llm_calls_max"`
	PromptTokensAvg          float64 `json:"prompt_tokens_per_ask_avg"`
	PromptTokensMax          int     `json:"prompt_tokens_per_ask_max"`
	// Per LLM call, from the prompts the fake server received (bytes/4).
	CallPromptTokensMax int `json:"call_prompt_tokens_max"`
	NumCtx              int `json:"num_ctx_sent"`
	FakeCalls           int `json:"fake_chat_requests"`
	FixedAsks           int `json:"asks_with_fix"`
	// Stages: per-stage time summed within an ask, p50 and p99 over asks
	// (check includes the trial SQL).
	Stages []stageFigure `json:"stages"`
}

type stageFigure struct {
	Name     string
	P50, P99 time.Duration
}

// timedExec is a pgconn-based sealed.Executor, standing in for the proxy's
// session executor, that adds up the time the SQL spends in Postgres.
type timedExec struct {
	conn *pgconn.PgConn
	mu   sync.Mutex
	sql  time.Duration
}

func (e *timedExec) Trial(ctx context.Context, stmt sealed.Statement, lim pg.Limits) (*pg.Rows, error) {
	start := time.Now()
	rows, err := engine.ConnExecutor{Conn: e.conn}.Trial(ctx, stmt, lim)
	// The privilege and session queries are the engine's own work, not the
	// answer's SQL.
	if sql := stmt.SQL(); !strings.Contains(sql, "has_column_privilege") && !strings.Contains(sql, "row_security_active") {
		e.mu.Lock()
		e.sql += time.Since(start)
		e.mu.Unlock()
	}
	return rows, err
}

func (e *timedExec) take() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.sql
	e.sql = 0
	return d
}

// fakeModel answers every step from the scenario's script, instantly.
func fakeModel(s scenario, n int) (*fakeollama.Server, error) {
	script := map[string]question{}
	for i := 0; i < n+warmUp; i++ {
		q := s.question(i)
		script[q.text] = q
	}
	lookup := func(v fakeollama.ChatView) (question, bool) {
		q, ok := script[questionOf(v.Prompt)]
		return q, ok
	}
	return fakeollama.Start(fakeollama.Options{
		Models: []string{model},
		Rules: []fakeollama.Rule{
			{Name: "keywords", PromptContains: []string{keyStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				b, _ := json.Marshal(map[string][]string{"keywords": q.keywords, "entities": nonNil(q.entities)})
				return string(b)
			}},
			{Name: "fix", PromptContains: []string{fixStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				sql := q.fix
				if sql == "" {
					sql = q.candidate
				}
				return fmt.Sprintf(fenced, sql, sql)
			}},
			{Name: "synthetic", PromptContains: []string{syntheticStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				b, _ := json.Marshal(map[string]any{"examples": []map[string]string{{"question": "an example like " + q.text, "sql": q.candidate}}})
				return string(b)
			}},
			{Name: "decompose", PromptContains: []string{decomposeStep}, Reply: `{"targets": ["what is asked"], "conditions": ["the filter", "the order"]}`},
			{Name: "unit-tests", PromptContains: []string{unitTestsStep}, Reply: `{"tests": ["returns every matching row", "no duplicates", "right columns"]}`},
			{Name: "unit-eval", PromptContains: []string{unitEvalStep}, Reply: `{"reasoning": "the first", "passing": [1]}`},
			{Name: "pairwise", PromptContains: []string{pairwiseStep}, Reply: `{"reasoning": "A", "better": "A"}`},
			// Schema selection: the columns of the tables the question's
			// keywords name, those tables, and all their columns.
			{Name: "column-filter", PromptContains: []string{filterStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				var cols []string
				for _, line := range strings.Split(v.Prompt, "\n") {
					ref, _, ok := strings.Cut(strings.TrimPrefix(line, "- "), " (")
					if t, _, dot := strings.Cut(ref, "."); ok && dot && slices.Contains(q.keywords, t) {
						cols = append(cols, ref)
					}
				}
				b, _ := json.Marshal(map[string][]string{"columns": nonNil(cols)})
				return string(b)
			}},
			{Name: "table-selection", PromptContains: []string{tablesStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				b, _ := json.Marshal(map[string]any{"reasoning": "named in the question", "tables": nonNil(q.keywords)})
				return string(b)
			}},
			{Name: "column-selection", PromptContains: []string{columnsStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				b, _ := json.Marshal(map[string]any{"reasoning": "all columns", "tables": nonNil(q.keywords), "columns": map[string][]string{}})
				return string(b)
			}},
			// The query-plan generator answers a narrower reading (its first
			// row only), so results disagree and the selector runs.
			{Name: "plan", PromptContains: []string{planStep}, ReplyFunc: func(v fakeollama.ChatView) string {
				q, _ := lookup(v)
				sql := "SELECT * FROM (" + q.candidate + ") AS first_row LIMIT 1"
				return fmt.Sprintf(fenced, sql, sql)
			}},
			{Name: "candidate", ReplyFunc: func(v fakeollama.ChatView) string {
				q, ok := lookup(v)
				if !ok {
					return "no script for this question"
				}
				return fmt.Sprintf(fenced, q.candidate, q.candidate)
			}},
		},
	})
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func runScenario(ctx context.Context, c *pgcluster.Cluster, s scenario, profile string, n int, load bool) (result, error) {
	res := result{Schema: s.name, Profile: profile, Asks: n, NumCtx: numCtx}
	if load {
		if err := c.CreateDatabase(ctx, s.database); err != nil {
			return res, err
		}
		conn, err := c.Connect(ctx, s.database)
		if err != nil {
			return res, err
		}
		err = s.load(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			return res, fmt.Errorf("load: %w", err)
		}
	}

	fake, err := fakeModel(s, n)
	if err != nil {
		return res, err
	}
	defer fake.Close()
	client, err := llm.New(llm.Config{
		Host:   fake.URL(),
		Models: map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		NumCtx: numCtx,
	})
	if err != nil {
		return res, err
	}
	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return c.Connect(ctx, database)
	}}
	defer cats.Close()
	start := time.Now()
	snap, err := cats.Get(ctx, s.database)
	if err != nil {
		return res, fmt.Errorf("catalog: %w", err)
	}
	res.CatalogBuild = time.Since(start)
	res.Tables = len(snap.Schema.Tables)
	for _, t := range snap.Schema.Tables {
		res.Columns += len(t.Columns)
	}

	cfg, err := pgconn.ParseConfig(c.DSN(s.database))
	if err != nil {
		return res, err
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pc.Close(context.WithoutCancel(ctx))
	ex := &timedExec{conn: pc}
	eng := &engine.Engine{LLM: client, Catalogs: cats, NumCtx: numCtx, DefaultProfile: profile} // Cache nil: every ask runs the pipeline

	var totals, sqls, overheads []time.Duration
	var calls, tokens []int
	stages := map[string][]time.Duration{}
	var stageOrder []string
	for i := 0; i < n+warmUp; i++ {
		q := s.question(i)
		ex.take()
		r, err := eng.Translate(ctx, engine.Request{Question: q.text, Database: s.database, User: pgtest.Superuser, TxStatus: pg.TxIdle, Exec: ex})
		sqlTime := ex.take()
		if i < warmUp {
			if i == 0 {
				fake.Reset() // count requests of measured asks only
			}
			continue
		}
		if err != nil {
			res.Failed++
			fmt.Printf("  ask %q failed: %v\n", q.text, err)
			continue
		}
		if i == warmUp {
			fake.Reset()
		}
		c, p, _ := r.Trace.LLMCalls()
		totals = append(totals, r.Trace.Total)
		sqls = append(sqls, sqlTime)
		overheads = append(overheads, r.Trace.Total-sqlTime)
		calls = append(calls, c)
		tokens = append(tokens, p)
		for _, st := range r.Trace.Stages {
			if st.Name == "fix" {
				res.FixedAsks++
				break
			}
		}
		perAsk := map[string]time.Duration{}
		for _, st := range r.Trace.Stages {
			if _, seen := stages[st.Name]; !seen {
				stageOrder = append(stageOrder, st.Name)
				stages[st.Name] = nil
			}
			perAsk[st.Name] += st.Duration
		}
		for name, d := range perAsk {
			stages[name] = append(stages[name], d)
		}
	}
	res.TotalP50, res.TotalP99 = percentile(totals, 50), percentile(totals, 99)
	res.SQLP50, res.SQLP99 = percentile(sqls, 50), percentile(sqls, 99)
	res.OverheadP50, res.OverheadP99 = percentile(overheads, 50), percentile(overheads, 99)
	res.OverheadMax = percentile(overheads, 100)
	for _, name := range stageOrder {
		res.Stages = append(res.Stages, stageFigure{Name: name, P50: percentile(stages[name], 50), P99: percentile(stages[name], 99)})
	}
	res.CallsAvg, res.CallsMax = avgMax(calls)
	res.PromptTokensAvg, res.PromptTokensMax = avgMax(tokens)
	for _, r := range fake.RequestsTo(fakeollama.RouteChat) {
		res.FakeCalls++
		size := 0
		for _, m := range r.Messages {
			size += len(m.Content)
		}
		res.CallPromptTokensMax = max(res.CallPromptTokensMax, size/4+1)
		if r.NumCtx != numCtx {
			return res, fmt.Errorf("a chat request asked num_ctx %d, want %d", r.NumCtx, numCtx)
		}
	}
	return res, nil
}
