package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestSecretsStayOutOfLogsAndPages: the API key a model server echoes in
// its 401 body, and the catalog role's password given as a flag, appear in
// no log line, no /metrics or /readyz body and no client's error; the
// password on the command line is reported (by option, never by value).
func TestSecretsStayOutOfLogsAndPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := pgtest.UniqueName(t, "secrets")
	const (
		apiKey      = "sk-echoed-5e1f2a9b7c"
		catPassword = "cat-pw-Qx81Lm"
	)
	catRole := pgtest.UniqueName(t, "cat")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateRole(ctx, catRole, catPassword, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE orders (id int PRIMARY KEY, amount numeric NOT NULL);
GRANT SELECT ON orders TO `+catRole); err != nil {
		t.Fatal(err)
	}
	// A model server that refuses every request and echoes its
	// Authorization header, as a misconfigured gateway would.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"invalid credentials in header Authorization: %s"}}`, r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := startServe(t, "--upstream", c.DSN(db), "--llm-api", "openai", "--ollama-host", echo.URL+"/v1",
		"--llm-api-key-file", keyFile, "--model", opsModel, "--admin-listen", "127.0.0.1:0",
		"--catalog-dsn", fmt.Sprintf("postgres://%s:%s@/", catRole, catPassword))

	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, sp.addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, askErr := conn.Exec(ctx, "-- ask: how many orders are there", pgx.QueryExecModeSimpleProtocol)
	if askErr == nil {
		t.Fatal("the ask succeeded against a model server that refuses every request")
	}
	_, readyz := httpGet(t, "http://"+sp.admin+"/readyz")
	_, metricsText := httpGet(t, "http://"+sp.admin+"/metrics")
	sp.stop()
	logs := sp.logs.String()
	for where, text := range map[string]string{"the log": logs, "/readyz": readyz, "/metrics": metricsText, "the client's error": askErr.Error()} {
		for _, secret := range []string{apiKey, catPassword} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q:\n%s", where, secret, text)
			}
		}
	}
	if !strings.Contains(logs, `"option":"--catalog-dsn"`) || !strings.Contains(logs, "process list") {
		t.Errorf("no warning that --catalog-dsn's password shows in the process list:\n%s", logs)
	}
	if !strings.Contains(logs, "invalid credentials") {
		t.Errorf("the model server's refusal is not logged at all:\n%s", logs)
	}
}

// TestModelHostCredentialsRefused: --ollama-host with user:password@ stops
// serve with a clear error that does not print the password, before
// anything is logged or served.
func TestModelHostCredentialsRefused(t *testing.T) {
	const password = "hostpw-Zr7Yq"
	logs := &syncBuffer{}
	err := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--data-dir", "",
		"--upstream", "postgres://u@127.0.0.1:1/db", "--ollama-host", "http://alice:" + password + "@127.0.0.1:1"}, io.Discard, logs)
	if !errors.Is(err, llm.ErrCredentialsInURL) {
		t.Fatalf("serve: %v, want ErrCredentialsInURL", err)
	}
	if strings.Contains(err.Error()+logs.String(), password) {
		t.Errorf("the password was printed: %v\n%s", err, logs.String())
	}
}

func TestPasswordFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--catalog-dsn", "postgres://cat:pw@/"}, "catalog-dsn"},
		{[]string{"--catalog-dsn=postgres://cat@/"}, ""},
		{[]string{"-catalog-dsn", "user=cat password=pw"}, "catalog-dsn"},
		{[]string{"--authenticator", "sales=postgres://auth:pw@/"}, "authenticator"},
		{[]string{"--authenticator", "postgres://auth@/?password=pw"}, "authenticator"},
		{[]string{"--authenticator", "postgres://auth@/", "--catalog-store", "postgres://st:pw@h/store"}, "catalog-store"},
		{[]string{"--upstream", "postgres://u:pw@h/db"}, ""},
	} {
		if got := strings.Join(passwordFlags(tc.args), ","); got != tc.want {
			t.Errorf("passwordFlags(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
