package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// composeFile is the part of docker/compose.yaml the checks read.
type composeFile struct {
	Services map[string]struct {
		Image       string                       `yaml:"image"`
		Build       *struct{ Dockerfile string } `yaml:"build"`
		Environment map[string]string            `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Volumes []string `yaml:"volumes"`
		Restart string   `yaml:"restart"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestComposeFile checks docker/compose.yaml without a Docker engine: the
// services, their health checks and start order, named volumes, and that
// every NLPROXY_ variable it sets is one nlproxy reads. Where a compose
// client is installed, `config` must accept the file too.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../../docker/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, name := range []string{"postgres", "ollama", "ollama-pull", "nlproxy"} {
		if _, ok := cf.Services[name]; !ok {
			t.Errorf("no service %q", name)
		}
	}
	known := envKeys()
	for name, svc := range cf.Services {
		if name != "ollama-pull" && svc.Healthcheck == nil {
			t.Errorf("service %s has no healthcheck", name)
		}
		for dep, d := range svc.DependsOn {
			if _, ok := cf.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
			if d.Condition != "service_healthy" && d.Condition != "service_completed_successfully" {
				t.Errorf("%s waits for %s with condition %q", name, dep, d.Condition)
			}
		}
		for _, v := range svc.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(vol, ".") {
				// A bind mount of the repository's docker/ folder.
				if _, err := os.Stat(filepath.Join("../../docker", vol)); err != nil {
					t.Errorf("%s mounts %s: %v", name, vol, err)
				}
				continue
			}
			if _, ok := cf.Volumes[vol]; !ok {
				t.Errorf("%s mounts undeclared volume %s", name, vol)
			}
		}
		if name != "nlproxy" {
			continue
		}
		for k := range svc.Environment {
			if strings.HasPrefix(k, "NLPROXY_") && !slices.Contains(known, k) {
				t.Errorf("nlproxy service sets %s, which nlproxy does not read", k)
			}
		}
		if svc.Build == nil || svc.Build.Dockerfile != "docker/Dockerfile" {
			t.Error("nlproxy service is not built from docker/Dockerfile")
		}
		if dep := svc.DependsOn["ollama-pull"]; dep.Condition != "service_completed_successfully" {
			t.Error("nlproxy does not wait for the model pull")
		}
		if hc := svc.Healthcheck; hc == nil || !slices.Contains(hc.Test, "healthcheck") {
			t.Error("nlproxy's health check does not use `nlproxy healthcheck`")
		}
	}
	if pull := cf.Services["ollama-pull"]; pull.Restart != "no" {
		t.Errorf("ollama-pull restart = %q, want \"no\" (one-shot)", pull.Restart)
	}

	var client []string
	if p, err := exec.LookPath("docker-compose"); err == nil {
		client = []string{p}
	} else if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "compose", "version").Run() == nil {
		client = []string{p, "compose"}
	}
	if client == nil {
		t.Log("no compose client installed: `compose config` not run")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, client[0], append(client[1:], "-f", "../../docker/compose.yaml", "config", "-q")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s config: %v\n%s", strings.Join(client, " "), err, out)
	}
}

// TestDockerfile checks what the image promises: a cgo build through the
// Makefile (the build CI runs natively), version ldflags, a non-root user,
// a health check through the binary, and only variables nlproxy reads.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FROM golang:\S+ AS build$`),
		regexp.MustCompile(`(?m)^RUN make build VERSION="\$\{VERSION\}" COMMIT="\$\{COMMIT\}"`),
		regexp.MustCompile(`(?m)^USER 65532:65532$`),
		regexp.MustCompile(`(?m)^HEALTHCHECK .*\n\s+CMD \["/usr/local/bin/nlproxy", "healthcheck"\]`),
		regexp.MustCompile(`(?m)^VOLUME \["/var/lib/nlproxy"\]`),
	} {
		if !want.MatchString(df) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	if regexp.MustCompile(`CGO_ENABLED=0`).MatchString(df) {
		t.Error("Dockerfile disables cgo; pg_query needs it")
	}
	known := envKeys()
	for _, m := range regexp.MustCompile(`(NLPROXY_[A-Z_]+)=`).FindAllStringSubmatch(df, -1) {
		if !slices.Contains(known, m[1]) {
			t.Errorf("Dockerfile sets %s, which nlproxy does not read", m[1])
		}
	}
	// The Makefile's build target stamps what the Dockerfile passes.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "-X main.version=$(VERSION) -X main.commit=$(COMMIT)") {
		t.Error("Makefile no longer stamps VERSION and COMMIT; the image's version would be empty")
	}
}

func TestHealthcheckCommand(t *testing.T) {
	var ready atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready\ncatalog: still building\n"))
			return
		}
		w.Write([]byte("ready\n"))
	}))
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	env := func(k string) string {
		if k == "NLPROXY_ADMIN_LISTEN" {
			return "0.0.0.0:" + addr[strings.LastIndex(addr, ":")+1:]
		}
		return ""
	}
	var out, errb bytes.Buffer
	err := runHealthcheck(context.Background(), nil, env, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "still building") || exitCode(err) != 1 {
		t.Errorf("not ready: err %v (exit %d)", err, exitCode(err))
	}
	ready.Store(true)
	if err := runHealthcheck(context.Background(), []string{"--url", ts.URL + "/readyz"}, env, &out, &errb); err != nil {
		t.Errorf("ready: %v", err)
	}
	if err := runHealthcheck(context.Background(), []string{"extra"}, env, &out, &errb); exitCode(err) != 2 {
		t.Errorf("stray argument: exit %d, want 2", exitCode(err))
	}
}

// TestComposeCatalogRole runs compose's init SQL on a real Postgres as the
// image would (as POSTGRES_USER, a superuser, in POSTGRES_DB): the catalog
// role the nlproxy service connects as reads the application's tables,
// those created later included, and can write nothing.
func TestComposeCatalogRole(t *testing.T) {
	ctx := context.Background()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	owner, db := pgtest.UniqueName(t, "app"), pgtest.UniqueName(t, "appdb")
	if err := c.CreateRole(ctx, owner, "owner-pass", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+db+" OWNER "+owner); err != nil {
		t.Fatal(err)
	}
	initSQL, err := os.ReadFile("../../docker/initdb/10-catalog-role.sql")
	if err != nil {
		t.Fatal(err)
	}
	app, err := pgx.Connect(ctx, c.URL(owner, "owner-pass", db))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	for _, sql := range []string{"CREATE TABLE before_init (id int)", string(initSQL), "CREATE TABLE after_init (id int)"} {
		if _, err := app.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	// The credentials compose gives nlproxy.
	raw, err := os.ReadFile("../../docker/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatal(err)
	}
	dsn := cf.Services["nlproxy"].Environment["NLPROXY_CATALOG_DSN"]
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil || cfg.User != "nlproxy_catalog" {
		t.Fatalf("NLPROXY_CATALOG_DSN %q: %v", dsn, err)
	}
	cat, err := pgx.Connect(ctx, c.URL(cfg.User, cfg.Password, db))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close(ctx)
	for _, table := range []string{"before_init", "after_init"} {
		var n int
		if err := cat.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Errorf("catalog role reads %s: %v", table, err)
		}
		var pe *pgconn.PgError
		if _, err := cat.Exec(ctx, "INSERT INTO "+table+" VALUES (1)"); !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("catalog role writes %s: %v, want 42501", table, err)
		}
	}
}
