package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/proxy"
)

func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	yamlPath := filepath.Join(dir, "nlproxy.yaml")
	if err := os.WriteFile(yamlPath, []byte(`
listen: 0.0.0.0:7000
upstreams:
  - url: postgres://a@db1:5432/app
  - database: sales
    url: postgres://b@db2:5432/sales?sslmode=require
idle_timeout: 5m
log_format: json
engine:
  no_literal_correction: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	badYAML := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badYAML, []byte("listen: x\nlisten_adress: typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{
			name: "ask limits and function lists",
			args: []string{"--upstream", "postgres://u@h/d", "--allow-function", "app.score, rank_*", "--allow-function", "f",
				"--deny-function", "audit_*", "--max-asks", "8", "--trial-max-bytes", "4096"},
			env: map[string]string{"NLPROXY_MAX_ASKS_PER_CLIENT": "2"},
			check: func(t *testing.T, c Config) {
				e := c.Engine
				if !reflect.DeepEqual(e.AllowFunctions, []string{"app.score", "rank_*", "f"}) || !reflect.DeepEqual(e.DenyFunctions, []string{"audit_*"}) {
					t.Errorf("function lists: %q %q", e.AllowFunctions, e.DenyFunctions)
				}
				if e.MaxAsks != 8 || e.MaxAsksPerClient != 2 || e.TrialMaxBytes != 4096 {
					t.Errorf("limits: %+v", e)
				}
			},
		},
		{
			name: "question limit by flag",
			args: []string{"--upstream", "postgres://u@h/d", "--max-question-bytes", "100"},
			check: func(t *testing.T, c Config) {
				if c.Engine.MaxQuestionBytes != 100 {
					t.Errorf("max-question-bytes %d", c.Engine.MaxQuestionBytes)
				}
			},
		},
		{
			name: "openai-compatible model server",
			args: []string{"--upstream", "postgres://u@h/d", "--llm-api", "openai", "--ollama-host", "http://127.0.0.1:8080/v1", "--llm-api-key-file", "/run/key"},
			env:  map[string]string{"NLPROXY_LLM_API_KEY": "tok"},
			check: func(t *testing.T, c Config) {
				if e := c.Engine; e.LLMAPI != "openai" || e.LLMAPIKeyFile != "/run/key" || e.LLMAPIKey != "tok" || e.OllamaHost != "http://127.0.0.1:8080/v1" {
					t.Errorf("llm api settings: %+v", e)
				}
			},
		},
		{
			name: "question limit by env",
			args: []string{"--upstream", "postgres://u@h/d"},
			env:  map[string]string{"NLPROXY_MAX_QUESTION_BYTES": "2048"},
			check: func(t *testing.T, c Config) {
				if c.Engine.MaxQuestionBytes != 2048 {
					t.Errorf("max-question-bytes %d", c.Engine.MaxQuestionBytes)
				}
			},
		},
		{
			name:    "question limit must be positive",
			args:    []string{"--upstream", "postgres://u@h/d", "--max-question-bytes", "0"},
			wantErr: "max-question-bytes 0: must be positive",
		},
		{
			name:    "unknown model server api",
			args:    []string{"--upstream", "postgres://u@h/d", "--llm-api", "grpc"},
			wantErr: `llm-api "grpc"`,
		},
		{
			name: "ask limit defaults",
			args: []string{"--upstream", "postgres://u@h/d"},
			check: func(t *testing.T, c Config) {
				if e := c.Engine; e.MaxAsks != 32 || e.MaxAsksPerClient != 4 || e.TrialMaxBytes != 1<<20 || e.MaxQuestionBytes != 16<<10 || e.NoLiteralCorrection {
					t.Errorf("defaults: %+v", e)
				}
			},
		},
		{
			name: "defaults plus one flag upstream",
			args: []string{"--upstream", "postgres://u@h:5432/d"},
			check: func(t *testing.T, c Config) {
				if c.Listen != "127.0.0.1:6432" || c.MaxConns != 1000 || c.MaxMessageSize != 64<<20 || c.RelayLoop != "auto" {
					t.Errorf("defaults not applied: %+v", c)
				}
				want := []UpstreamEntry{{URL: "postgres://u@h:5432/d"}}
				if !reflect.DeepEqual(c.Upstreams, want) {
					t.Errorf("upstreams = %+v, want %+v", c.Upstreams, want)
				}
			},
		},
		{
			name: "yaml file",
			args: []string{"--config", yamlPath},
			check: func(t *testing.T, c Config) {
				if c.Listen != "0.0.0.0:7000" || time.Duration(c.IdleTimeout) != 5*time.Minute || c.LogFormat != "json" {
					t.Errorf("yaml not applied: %+v", c)
				}
				if len(c.Upstreams) != 2 || c.Upstreams[1].Database != "sales" {
					t.Errorf("upstreams = %+v", c.Upstreams)
				}
				if !c.Engine.NoLiteralCorrection {
					t.Errorf("no_literal_correction not applied")
				}
			},
		},
		{
			name: "literal correction off by flag",
			args: []string{"--upstream", "postgres://u@h/d", "--no-literal-correction"},
			check: func(t *testing.T, c Config) {
				if !c.Engine.NoLiteralCorrection {
					t.Errorf("--no-literal-correction not applied")
				}
			},
		},
		{
			name: "literal correction off by env",
			args: []string{"--upstream", "postgres://u@h/d"},
			env:  map[string]string{"NLPROXY_NO_LITERAL_CORRECTION": "true"},
			check: func(t *testing.T, c Config) {
				if !c.Engine.NoLiteralCorrection {
					t.Errorf("NLPROXY_NO_LITERAL_CORRECTION not applied")
				}
			},
		},
		{
			name: "env beats yaml, flag beats env",
			args: []string{"--config=" + yamlPath, "--listen", "127.0.0.1:9999"},
			env: map[string]string{
				"NLPROXY_LISTEN":       "127.0.0.1:8888",
				"NLPROXY_MAX_CONNS":    "12",
				"NLPROXY_IDLE_TIMEOUT": "1s",
				"NLPROXY_UPSTREAM":     "postgres://e@h/x reports=postgres://r@h2/reports",
			},
			check: func(t *testing.T, c Config) {
				if c.Listen != "127.0.0.1:9999" {
					t.Errorf("listen = %q, want the flag's", c.Listen)
				}
				if c.MaxConns != 12 || time.Duration(c.IdleTimeout) != time.Second {
					t.Errorf("env not applied: %+v", c)
				}
				want := []UpstreamEntry{{URL: "postgres://e@h/x"}, {Database: "reports", URL: "postgres://r@h2/reports"}}
				if !reflect.DeepEqual(c.Upstreams, want) {
					t.Errorf("upstreams = %+v, want %+v", c.Upstreams, want)
				}
			},
		},
		{
			name: "keyword DSN is a default route, not database=",
			args: []string{"--upstream", "host=h port=5432 dbname=d", "--upstream", "sales=host=h2 dbname=sales"},
			check: func(t *testing.T, c Config) {
				want := []UpstreamEntry{{URL: "host=h port=5432 dbname=d"}, {Database: "sales", URL: "host=h2 dbname=sales"}}
				if !reflect.DeepEqual(c.Upstreams, want) {
					t.Errorf("upstreams = %+v, want %+v", c.Upstreams, want)
				}
			},
		},
		{name: "no upstream", args: nil, wantErr: "no upstream"},
		{
			name: "profiles",
			args: []string{"--upstream", "postgres://u@h/d", "--profile", "balanced", "--database-profile", "sales=max", "--llm-parallel", "4"},
			env:  map[string]string{"NLPROXY_DATABASE_PROFILES": "hr=fast, ops=Balanced"},
			check: func(t *testing.T, c Config) {
				e := c.Engine
				want := map[string]string{"sales": "max", "hr": "fast", "ops": "balanced"}
				if e.Profile != "balanced" || !reflect.DeepEqual(e.DatabaseProfiles, want) || e.Parallel != 4 {
					t.Errorf("profiles: %q %v parallel %d", e.Profile, e.DatabaseProfiles, e.Parallel)
				}
			},
		},
		{name: "unknown profile", args: []string{"--upstream", "postgres://u@h/d", "--profile", "turbo"}, wantErr: `profile "turbo"`},
		{name: "unknown database profile", args: []string{"--upstream", "postgres://u@h/d", "--database-profile", "sales=turbo"}, wantErr: "sales=turbo"},
		{name: "malformed database profile", args: []string{"--upstream", "postgres://u@h/d", "--database-profile", "sales"}, wantErr: "want database=profile"},
		{name: "two defaults", args: []string{"--upstream", "postgres://a/x", "--upstream", "postgres://b/y"}, wantErr: "more than one default"},
		{name: "cert without key", args: []string{"--upstream", "postgres://a/x", "--tls-cert", "c.pem"}, wantErr: "together"},
		{name: "bad env int", args: []string{"--upstream", "postgres://a/x"}, env: map[string]string{"NLPROXY_MAX_CONNS": "many"}, wantErr: "NLPROXY_MAX_CONNS"},
		{name: "unknown yaml key", args: []string{"--config", badYAML}, wantErr: "listen_adress"},
		{name: "bad log format", args: []string{"--upstream", "postgres://a/x", "--log-format", "xml"}, wantErr: "log-format"},
		{name: "io_uring relay loop", args: []string{"--upstream", "postgres://a/x", "--relay-loop", "io_uring"}, check: func(t *testing.T, c Config) {
			srv, err := newServer(c, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			if srv.RelayLoop != proxy.RelayIOUring {
				t.Errorf("relay loop %q, want io_uring", srv.RelayLoop)
			}
		}},
		{name: "unknown relay loop", args: []string{"--upstream", "postgres://a/x", "--relay-loop", "kqueue"}, wantErr: `relay-loop "kqueue"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			c, err := loadConfig(tt.args, getenv, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}
