package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestAskAllConfig(t *testing.T) {
	dir := t.TempDir()
	yamlPath := filepath.Join(dir, "nlproxy.yaml")
	if err := os.WriteFile(yamlPath, []byte(`
upstreams:
  - url: postgres://app@db1:5432/app
  - database: sales
    url: postgres://app@db2:5432/sales
engine:
  ask_all:
    databases: [app, sales]
    top_k: 4
    authenticators:
      - url: postgres://nlproxy_auth:pw@/
      - database: sales
        url: postgres://sales_auth:pw2@/
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{name: "yaml", args: []string{"--config", yamlPath}, check: func(t *testing.T, c Config) {
			a := c.Engine.AskAll
			if !reflect.DeepEqual(a.Databases, []string{"app", "sales"}) || a.TopK != 4 || len(a.Authenticators) != 2 || a.Authenticators[1].Database != "sales" {
				t.Errorf("ask_all %+v", a)
			}
		}},
		{name: "flags win over yaml and env", args: []string{"--config", yamlPath, "--authenticator", "postgres://flag_auth:x@/", "--authenticator", "hr=user=hr_auth password=y",
			"--ask-all-databases", "app, hr", "--ask-all-max-steps", "2"},
			env: map[string]string{"NLPROXY_AUTHENTICATOR": "postgres://env_auth@/", "NLPROXY_ASK_ALL_TOP_K": "5"},
			check: func(t *testing.T, c Config) {
				a := c.Engine.AskAll
				want := []UpstreamEntry{{URL: "postgres://flag_auth:x@/"}, {Database: "hr", URL: "user=hr_auth password=y"}}
				if !reflect.DeepEqual(a.Authenticators, want) || !reflect.DeepEqual(a.Databases, []string{"app", "hr"}) || a.TopK != 5 || a.MaxSteps != 2 {
					t.Errorf("ask_all %+v", a)
				}
			}},
		{name: "default databases are the routed ones", args: []string{"--config", yamlPath, "--ask-all-databases", ""}, check: func(t *testing.T, c Config) {
			if got := askAllDatabases(c); !reflect.DeepEqual(got, []string{"app", "sales"}) {
				t.Errorf("databases %q", got)
			}
		}},
		{name: "authenticator without a user", args: []string{"--upstream", "postgres://u@h/d", "--authenticator", "password=x"}, wantErr: "names no user"},
		{name: "authenticator twice", args: []string{"--upstream", "postgres://u@h/d", "--authenticator", "postgres://a@/", "--authenticator", "postgres://b@/"}, wantErr: "given twice"},
		{name: "bad env number", args: []string{"--upstream", "postgres://u@h/d"}, env: map[string]string{"NLPROXY_ASK_ALL_TOP_K": "many"}, wantErr: "NLPROXY_ASK_ALL_TOP_K"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConfig(tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
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

// TestAuthenticatorConnector: the authenticator connects with its own
// credentials to the server the route names, per database; a database
// without an authenticator is ErrNoAuthenticator.
func TestAuthenticatorConnector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	auth := pgtest.UniqueName(t, "auth")
	if err := c.CreateRole(ctx, auth, "auth-pw", false); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"app", "hr"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("PGPASSWORD", "")
	cfg := Config{Upstreams: []UpstreamEntry{{URL: c.URL(pgtest.Superuser, pgtest.SuperuserPassword, "app")}}}
	cfg.Engine.AskAll.Authenticators = []UpstreamEntry{{Database: "app", URL: "postgres://" + auth + ":auth-pw@/"}}
	connect, err := authenticatorConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connect(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	res, err := conn.Exec(ctx, "SELECT current_user::text, current_database()::text, current_setting('application_name')").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0].Rows[0]; string(r[0]) != auth || string(r[1]) != "app" || string(r[2]) != "nlproxy-ask-all" {
		t.Errorf("connected as %s to %s (%s)", r[0], r[1], r[2])
	}
	if _, err := connect(ctx, "hr"); !errors.Is(err, askall.ErrNoAuthenticator) {
		t.Errorf("hr: %v, want ErrNoAuthenticator", err)
	}
	cfg.Engine.AskAll.Authenticators = nil
	if connect, err := authenticatorConnector(cfg); err != nil || connect != nil {
		t.Errorf("without authenticators: %v %v", connect != nil, err)
	}
}
