package evalsim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/evalsim"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const model = "qwen2.5-coder:7b"

// fixture: one cluster with the sql-eval databases loaded (names prefixed,
// unique to the run) and the catalog over them.
type fixture struct {
	cluster *pgcluster.Cluster
	ds      *dataset.Dataset
	prefix  string
	cats    *catalog.Manager
	all     []runner.Result // every run's results, for the report
	sim     *evalsim.Sim    // prepared once; each run derives its own
	// modelData is the engine's ModelData for the next proxies ("" the
	// default); fake is the fake Ollama the last proxy talks to.
	modelData engine.ModelData
	fake      *fakeollama.Server
	// verified are the next proxies' verified queries (nil: none).
	verified engine.VerifiedQueries
}

func datasetDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "datasets", "sql-eval")
	if _, err := os.Stat(filepath.Join(dir, "questions.csv")); err != nil {
		t.Fatalf("sql-eval data: %v", err)
	}
	return dir
}

func newFixture(t *testing.T, ds *dataset.Dataset) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{})
	f := &fixture{cluster: cluster, ds: ds, prefix: pgtest.UniqueName(t, "ev") + "_"}
	for _, db := range ds.DBs() {
		if _, err := dataset.Load(ctx, cluster.Connect, ds, db, dataset.LoadOptions{Prefix: f.prefix}); err != nil {
			t.Fatal(err)
		}
	}
	f.cats = &catalog.Manager{Connect: cluster.Connect, Logger: zap.NewNop()}
	t.Cleanup(func() { f.cats.Close() })
	return f
}

// direct opens a session straight to a dataset database (the simulated
// model's own view, for judging candidates).
func (f *fixture) direct(ctx context.Context, db string) (*pgx.Conn, error) {
	return f.cluster.Connect(ctx, f.prefix+db)
}

// proxyFor starts an in-process proxy whose engine talks to a fake Ollama
// answering with sim and learns from w (nil: nothing); each call gets a
// fresh engine (no cache shared between runs). It returns a Connect for
// the runner.
func (f *fixture) proxyFor(t *testing.T, sim *evalsim.Sim, w engine.Workload) func(ctx context.Context, db string) (*pgx.Conn, error) {
	t.Helper()
	return f.proxyWith(t, sim.Rule(), w)
}

// proxyWith is proxyFor with the fake model answering by rule.
func (f *fixture) proxyWith(t *testing.T, rule *fakeollama.Rule, w engine.Workload) func(ctx context.Context, db string) (*pgx.Conn, error) {
	t.Helper()
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{model}, Default: rule})
	f.fake = fake
	client, err := llm.New(llm.Config{
		Host:        fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: time.Minute,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{LLM: client, Catalogs: f.cats, Cache: engine.NewCache(1000, time.Hour), TrialTimeout: 20 * time.Second, Logger: zap.NewNop(), Workload: w, ModelData: f.modelData, Verified: f.verified}
	srv := &proxy.Server{
		Upstreams:  []proxy.Upstream{{Address: f.cluster.Addr(), TLS: proxy.UpstreamTLSDisable}},
		Translator: router.Translator{Engine: eng, StatementTimeout: 30 * time.Second},
		Logger:     zap.NewNop(),
	}
	addr := clienttest.ServeProxy(t, srv)
	return func(ctx context.Context, db string) (*pgx.Conn, error) {
		url := fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, addr, f.prefix+db)
		return pgx.Connect(ctx, url)
	}
}
