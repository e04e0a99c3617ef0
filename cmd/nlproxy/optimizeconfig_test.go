package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestOptimizeConfig(t *testing.T) {
	yamlPath := filepath.Join(t.TempDir(), "nlproxy.yaml")
	if err := os.WriteFile(yamlPath, []byte("upstreams: [{url: postgres://h/d}]\nengine:\n  optimize:\n    tolerance: 5\n    runs: 2\n    min_cost: 500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := []string{"--upstream", "postgres://h/d"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    OptimizeConfig
		wantErr string
	}{
		{name: "defaults", args: up, want: OptimizeConfig{Tolerance: optimize.DefaultTolerance, Runs: 1, MaxCalls: optimize.DefaultMaxCalls,
			TimingRuns: optimize.DefaultTimingRuns, MinGain: optimize.DefaultMinGain, MinSaving: Duration(optimize.DefaultMinSaving), MinCost: engine.DefaultOptimizeMinCost}},
		{name: "yaml, env and flags in that order", args: []string{"--config", yamlPath, "--optimize-runs", "3", "--optimize-min-gain", "0.2"},
			env:  map[string]string{"NLPROXY_OPTIMIZE_RUNS": "4", "NLPROXY_OPTIMIZE_MAX_CALLS": "8", "NLPROXY_OPTIMIZE_TIMING_RUNS": "7", "NLPROXY_OPTIMIZE_MIN_SAVING": "5ms"},
			want: OptimizeConfig{Tolerance: 5, Runs: 3, MaxCalls: 8, TimingRuns: 7, MinGain: 0.2, MinSaving: Duration(5 * time.Millisecond), MinCost: 500}},
		{name: "zero tolerance", args: append([]string{"--optimize-tolerance", "0"}, up...), wantErr: "optimize-tolerance 0"},
		{name: "one call is no step", args: append([]string{"--optimize-max-calls", "1"}, up...), wantErr: "a step takes 2 calls"},
		{name: "gain of 100%", args: append([]string{"--optimize-min-gain", "1"}, up...), wantErr: "optimize-min-gain 1"},
		{name: "negative cost", args: append([]string{"--optimize-min-cost", "-1"}, up...), wantErr: "must not be negative"},
		{name: "negative saving", args: append([]string{"--optimize-min-saving", "-1ms"}, up...), wantErr: "optimize-min-saving -1ms"},
		{name: "bad env", args: up, env: map[string]string{"NLPROXY_OPTIMIZE_MIN_GAIN": "lots"}, wantErr: "NLPROXY_OPTIMIZE_MIN_GAIN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Engine.Optimize != tc.want {
				t.Fatalf("optimize config = %+v, want %+v", c.Engine.Optimize, tc.want)
			}
		})
	}
}

// TestOptimizeFlagsReachTheOptimizer runs serve with optimizer flags and a
// fake model whose rewrites always return another count: the number of
// model calls optimize: makes is what the tolerance and call cap allow.
func TestOptimizeFlagsReachTheOptimizer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := pgtest.UniqueName(t, "optflags")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE items (id int PRIMARY KEY, price numeric NOT NULL);
INSERT INTO items SELECT g, g * 2 FROM generate_series(1, 50) g;`); err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{opsModel}})
	fake.SetRules(
		fakeollama.Rule{Name: "instruction", PromptContains: []string{"decide the one change"}, Reply: `{"policy": "removal", "instruction": "Drop the filter."}`},
		fakeollama.Rule{Name: "rewrite", PromptContains: []string{"You rewrite a query so that it runs faster"},
			Reply: "```sql\nSELECT count(*) FROM items WHERE price > 12\n```"},
	)
	for _, tc := range []struct {
		name  string
		args  []string
		calls int // instruction + rewrite per step
	}{
		{"defaults: a run ends after 3 rejected steps", nil, 2 * optimize.DefaultTolerance},
		{"tolerance 1", []string{"--optimize-tolerance", "1"}, 2},
		{"call cap below the tolerance", []string{"--optimize-tolerance", "5", "--optimize-max-calls", "4"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := startServe(t, append([]string{"--upstream", c.DSN(db), "--ollama-host", fake.URL(), "--model", opsModel,
				"--admin-listen", "127.0.0.1:0"}, tc.args...)...)
			defer sp.stop()
			conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, sp.addr, db))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			fake.Reset()
			rows, err := conn.Query(ctx, "-- optimize: SELECT count(*) FROM items WHERE price > 10", pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				t.Fatal(err)
			}
			var verdicts []string
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				verdicts = append(verdicts, fmt.Sprint(vals[2]))
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("optimize: %v\n%s", err, sp.logs.String())
			}
			if got := fake.Hits("instruction") + fake.Hits("rewrite"); got != tc.calls {
				t.Errorf("model calls = %d, want %d (verdicts %q)", got, tc.calls, verdicts)
			}
			// The original, one rejected proposal (then repeats of it) per
			// step, and the original kept.
			if n := len(verdicts); n != 2+tc.calls/2 || verdicts[0] != "original" || verdicts[1] != "result" || verdicts[n-1] != "kept original" {
				t.Errorf("verdicts %q", verdicts)
			}
		})
	}
}
