// Command optimizebench measures the `optimize:` optimizer (engine/optimize,
// guided cost descent) on a workload of slow-but-correct queries over the
// sample database, each with a known faster equivalent. A scripted fake
// Ollama plays the model: per query it proposes, in a rotating order, one
// invalid statement, one non-equivalent rewrite, one slower equivalent
// rewrite and the known faster rewrite. Which rewrites are offered is
// therefore simulated; every cost, result and time is real Postgres.
//
// Per query it reports the original's and the returned query's planner cost
// and median time, the error monitor's rejections, the LLM calls, and checks
// independently of the optimizer (full results compared row by row, times
// measured again directly) that nothing non-equivalent or slower came back.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const model = "simulated-optimizer:latest"

var sizes = map[string]sampledb.Size{
	"small":  sampledb.Small,
	"medium": {Customers: 20_000, Suppliers: 100, Products: 2000, Employees: 200, Orders: 200_000, MaxLinesPerOrder: 4},
	"large":  sampledb.Large,
}

func main() {
	size := flag.String("size", "medium", "sample database size: small, medium (200k orders) or large (1M orders)")
	runs := flag.Int("check-runs", 7, "direct timing runs per query for the independent regression check")
	only := flag.String("only", "", "run only queries whose name contains this")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	flag.Parse()
	sz, ok := sizes[*size]
	if !ok {
		fmt.Fprintln(os.Stderr, "optimizebench: unknown -size", *size)
		os.Exit(2)
	}
	if err := run(context.Background(), *size, sz, *runs, *only, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "optimizebench:", err)
		os.Exit(1)
	}
}

type result struct {
	Name, Pattern string
	// GoodSpeedup is the known faster rewrite's speedup measured directly
	// when the original was kept: > 1.1 means the optimizer missed it.
	GoodSpeedup           float64
	PairedRatio           float64 // median of returned/original over paired direct runs
	OrigCost, ResultCost  float64
	OrigMS, ResultMS      float64 // the optimizer's medians
	CheckOrigMS, CheckMS  float64 // measured again, directly
	Speedup               float64 // CheckOrigMS / CheckMS
	Returned              string  // "good", "original", or what else came back
	Equivalent            bool    // full results equal, checked directly
	Rejected              map[string]int
	Proposals, LLMCalls   int
	Reason                string
	OptimizeSeconds       float64
	OfferedOrder          []string
	ChosenStep, ChosenPol string
}

func run(ctx context.Context, sizeName string, size sampledb.Size, checkRuns int, only, jsonOut string) error {
	// Ctrl-C or SIGTERM ends the run through the deferred cleanups, so the
	// cluster is removed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	cl, err := pgtest.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer cl.Stop()
	if err := cl.CreateDatabase(ctx, "optbench"); err != nil {
		return err
	}
	conn, err := cl.Connect(ctx, "optbench")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	start := time.Now()
	if err := sampledb.Load(ctx, conn, size); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, setupSQL); err != nil {
		return err
	}
	fmt.Printf("sample database %s loaded in %v\n", sizeName, time.Since(start).Round(time.Second))
	fns, err := catalog.LoadFunctions(ctx, conn)
	if err != nil {
		return err
	}
	opts := guard.Options{Catalog: fns}

	fake, err := fakeollama.Start(fakeollama.Options{Models: []string{model}})
	if err != nil {
		return err
	}
	defer fake.Close()
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: model},
		CallTimeout: 30 * time.Second, MaxRetries: -1, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	opt := &optimize.Optimizer{LLM: client, Guard: opts, Tolerance: 4, MaxCalls: 24, Timeout: 60 * time.Second}
	exec := engine.ConnExecutor{Conn: conn.PgConn()}

	var results []result
	for i, q := range workload() {
		if only != "" && !strings.Contains(q.name, only) {
			continue
		}
		r, err := runQuery(ctx, conn, fake, opt, exec, opts, q, i, checkRuns)
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		results = append(results, r)
		fmt.Printf("%-45s %-8s %7.1fx  %s\n", q.name, r.Returned, r.Speedup, r.Reason)
	}
	report(os.Stdout, sizeName, results)
	if jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if !r.Equivalent {
			return fmt.Errorf("%s: a non-equivalent query was returned", r.Name)
		}
	}
	return nil
}

// proposals is the scripted model's offer for query i: four proposals in
// a rotating order, then the original again (a duplicate) until the
// descent's tolerance ends it.
func proposals(q query, i int) (labels, sqls []string) {
	invalid := []string{
		strings.Replace(q.orig, "SELECT", "SELEC", 1),                    // syntax
		strings.Replace(q.orig, "SELECT ", "SELECT no_such_column, ", 1), // cannot plan
		"DELETE FROM orders WHERE order_id < 0",                          // guard
	}[i%3]
	all := []struct{ label, sql string }{{"invalid", invalid}, {"wrong", q.wrong}, {"slower", q.slower}, {"good", q.good}}
	for k := 0; k < len(all); k++ {
		p := all[(k+i)%len(all)]
		labels, sqls = append(labels, p.label), append(sqls, p.sql)
	}
	return labels, sqls
}

func runQuery(ctx context.Context, conn *pgx.Conn, fake *fakeollama.Server, opt *optimize.Optimizer, exec engine.ConnExecutor, opts guard.Options, q query, i, checkRuns int) (result, error) {
	labels, sqls := proposals(q, i)
	rules := []fakeollama.Rule{{Name: "instruction", PromptContains: []string{"decide the one change"},
		Reply: `{"policy": "merge", "instruction": "Apply the policy that fits the pattern."}`}}
	for k, s := range sqls {
		rules = append(rules, fakeollama.Rule{Name: fmt.Sprintf("rewrite-%d", k), PromptContains: []string{"You rewrite a query"},
			Reply: "Rewritten:\n```sql\n" + s + "\n```", Times: 1})
	}
	rules = append(rules, fakeollama.Rule{Name: "repeat", PromptContains: []string{"You rewrite a query"}, Reply: "```sql\n" + q.orig + "\n```"})
	fake.SetRules(rules...)
	fake.Reset()

	st, err := guard.Seal(q.orig, opts)
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	out, err := opt.Optimize(ctx, exec, st, "")
	if err != nil {
		return result{}, err
	}
	r := result{Name: q.name, Pattern: q.pattern, OrigCost: out.OriginalCost, ResultCost: out.ResultCost,
		OrigMS: ms(out.OriginalTime), ResultMS: ms(out.ResultTime), Rejected: map[string]int{},
		Proposals: len(out.Steps), LLMCalls: out.LLMCalls, Reason: out.Reason, OptimizeSeconds: time.Since(t0).Seconds(), OfferedOrder: labels}
	for v, n := range out.Rejected() {
		r.Rejected[string(v)] = n
	}
	r.Returned = "original"
	if out.Improved {
		r.Returned = "other"
		for k, s := range sqls {
			if out.Result.Display() == s {
				r.Returned = labels[k]
			}
		}
		for _, s := range out.Steps {
			if s.Verdict == optimize.VerdictChosen {
				r.ChosenStep, r.ChosenPol = fmt.Sprintf("%d.%d", s.Run, s.N), s.Policy
			}
		}
	}
	// Independent checks, straight through pgx: the whole results, sorted,
	// and interleaved timings.
	a, err := resultText(ctx, conn, q.orig)
	if err != nil {
		return r, err
	}
	b, err := resultText(ctx, conn, out.Result.SQL())
	if err != nil {
		return r, err
	}
	r.Equivalent = a == b
	var to, tr []time.Duration
	var ratios []float64
	for k := 0; k < checkRuns; k++ {
		d, err := timeQuery(ctx, conn, q.orig)
		if err != nil {
			return r, err
		}
		to = append(to, d)
		d, err = timeQuery(ctx, conn, out.Result.SQL())
		if err != nil {
			return r, err
		}
		tr = append(tr, d)
		ratios = append(ratios, float64(d)/float64(to[len(to)-1]))
	}
	sort.Float64s(ratios)
	r.PairedRatio = ratios[len(ratios)/2]
	r.CheckOrigMS, r.CheckMS = ms(median(to)), ms(median(tr))
	r.Speedup = r.CheckOrigMS / r.CheckMS
	if r.Returned == "original" {
		// The same query measured twice: the ratio is noise. Was the
		// known rewrite faster, though?
		r.Speedup = 1
		var tg []time.Duration
		to = to[:0]
		for k := 0; k < checkRuns; k++ {
			d, err := timeQuery(ctx, conn, q.orig)
			if err != nil {
				return r, err
			}
			to = append(to, d)
			if d, err = timeQuery(ctx, conn, q.good); err != nil {
				return r, err
			}
			tg = append(tg, d)
		}
		r.GoodSpeedup = ms(median(to)) / ms(median(tg))
	}
	return r, nil
}

// resultText is the whole result as sorted lines (a multiset).
func resultText(ctx context.Context, conn *pgx.Conn, sql string) (string, error) {
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var parts []string
		for _, v := range rows.RawValues() {
			if v == nil {
				parts = append(parts, "\\N")
			} else {
				parts = append(parts, string(v))
			}
		}
		lines = append(lines, strings.Join(parts, "\t"))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), rows.Err()
}

func timeQuery(ctx context.Context, conn *pgx.Conn, sql string) (time.Duration, error) {
	start := time.Now()
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
	}
	rows.Close()
	return time.Since(start), rows.Err()
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func report(w *os.File, size string, rs []result) {
	fmt.Fprintf(w, "\n## optimize: workload (%s sample database; proposals scripted = simulated, timings real)\n\n", size)
	fmt.Fprintln(w, "| query | pattern | cost orig -> returned | ms orig -> returned (direct, median) | speedup | returned | rejected | LLM calls |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var logs []float64
	var speeds []float64
	good, nonEq, regress, calls, props := 0, 0, 0, 0, 0
	var missed, notFaster []string
	rejTotal := map[string]int{}
	for _, r := range rs {
		var rej []string
		for v, n := range r.Rejected {
			rej = append(rej, fmt.Sprintf("%s %d", v, n))
			rejTotal[v] += n
		}
		sort.Strings(rej)
		fmt.Fprintf(w, "| %s | %s | %.0f -> %.0f | %.1f -> %.1f | %.1fx | %s | %s | %d |\n", r.Name, r.Pattern, r.OrigCost, r.ResultCost,
			r.CheckOrigMS, r.CheckMS, r.Speedup, r.Returned, strings.Join(rej, ", "), r.LLMCalls)
		logs = append(logs, math.Log(r.Speedup))
		speeds = append(speeds, r.Speedup)
		if r.Returned == "good" {
			good++
		}
		if r.Returned == "original" && r.GoodSpeedup > 1.1 {
			missed = append(missed, fmt.Sprintf("%s (known rewrite %.1fx faster)", r.Name, r.GoodSpeedup))
		}
		if r.Returned == "original" && r.GoodSpeedup <= 1.1 {
			notFaster = append(notFaster, fmt.Sprintf("%s (%.2fx)", r.Name, r.GoodSpeedup))
		}
		if !r.Equivalent {
			nonEq++
		}
		// A regression: the returned query measured slower than the
		// original by more than timing noise (5%), by the median of the
		// paired runs' ratios.
		if r.Returned != "original" && r.PairedRatio > 1.05 {
			regress++
		}
		calls += r.LLMCalls
		props += r.Proposals
	}
	sort.Float64s(speeds)
	gm := 0.0
	for _, l := range logs {
		gm += l
	}
	if len(logs) > 0 {
		gm = math.Exp(gm / float64(len(logs)))
	}
	var rej []string
	for v, n := range rejTotal {
		rej = append(rej, fmt.Sprintf("%s %d", v, n))
	}
	sort.Strings(rej)
	fmt.Fprintf(w, "\n%d queries: known faster rewrite returned for %d; non-equivalent results returned: %d; regressions (returned >5%% slower): %d\n", len(rs), good, nonEq, regress)
	fmt.Fprintf(w, "original kept where the known rewrite was not faster here (measured directly): %s\n", strings.Join(notFaster, "; "))
	fmt.Fprintf(w, "missed (original kept though the known rewrite measured >10%% faster): %s\n", strings.Join(missed, "; "))
	if len(speeds) > 0 {
		fmt.Fprintf(w, "speedup (direct medians): geometric mean %.2fx, min %.2fx, median %.2fx, max %.1fx\n", gm, speeds[0], speeds[len(speeds)/2], speeds[len(speeds)-1])
		fmt.Fprintf(w, "proposals %d, LLM calls %d (%.1f per optimization), rejected by the error monitor: %s\n", props, calls, float64(calls)/float64(len(rs)), strings.Join(rej, ", "))
	}
}
