package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// checkLines reports which of want are missing from text and which of bad are in it.
func checkLines(t *testing.T, what, text string, want, bad []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
	for _, b := range bad {
		if strings.Contains(text, b) {
			t.Errorf("%s has %q:\n%s", what, b, text)
		}
	}
}

func TestPgbouncerIni(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tls       *pgbouncerTLS
		want, bad []string
	}{
		{"plaintext", nil,
			[]string{"* = host=10.0.0.1 port=5433\n", "listen_port = 6000\n", "pool_mode = session\n", "auth_file = /d/userlist.txt\n"},
			[]string{"tls"}},
		{"tls", &pgbouncerTLS{cert: "/d/server.crt", key: "/d/server.key"},
			[]string{"pool_mode = session\n", "client_tls_sslmode = require\n", "client_tls_cert_file = /d/server.crt\n",
				"client_tls_key_file = /d/server.key\n", "server_tls_sslmode = require\n"},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLines(t, "pgbouncer.ini", pgbouncerIni("/d", 6000, "10.0.0.1", 5433, tc.tls), tc.want, tc.bad)
		})
	}
}

func TestPgdogConf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tls       *pgdogTLS
		want, bad []string
	}{
		{"plaintext", nil,
			[]string{"port = 6000\n", "workers = 1\n", "pooler_mode = \"session\"\n", "default_pool_size = 40\n", "auth_type = \"trust\"\n",
				"tls_verify = \"disabled\"\n", "[[databases]]\nname = \"postgres\"\nhost = \"10.0.0.1\"\nport = 5433\n"},
			[]string{"tls_certificate", "tls_client_required"}},
		{"tls", &pgdogTLS{cert: "/d/server.crt", key: "/d/server.key"},
			[]string{"pooler_mode = \"session\"\n", "tls_certificate = \"/d/server.crt\"\n", "tls_private_key = \"/d/server.key\"\n",
				"tls_client_required = true\n", "tls_verify = \"prefer\"\n"},
			[]string{"\"disabled\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, users := pgdogConf(6000, "10.0.0.1", 5433, "nl_super", "postgres", 40, tc.tls)
			checkLines(t, "pgdog.toml", conf, tc.want, tc.bad)
			checkLines(t, "users.toml", users, []string{"name = \"nl_super\"\n", "database = \"postgres\"\n"}, nil)
		})
	}
}

func TestParseFlagsPeersAndTLS(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "peer")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		targets string
		configs []string // Config.Name of each, in order
		note    string   // in stderr
		err     string
	}{
		{name: "default plaintext", args: []string{"-targets", "direct", "-clients", "1"},
			targets: "direct", configs: []string{"-c 1 -M simple", "-c 1 -M prepared"}},
		{name: "tls on", args: []string{"-targets", "direct", "-clients", "8", "-tls", "on"},
			targets: "direct", configs: []string{"-c 8 -j 2 -M simple TLS", "-c 8 -j 2 -M prepared TLS"}},
		{name: "tls both, plaintext first", args: []string{"-targets", "direct", "-clients", "1,32", "-tls", "both"},
			targets: "direct", configs: []string{"-c 1 -M simple", "-c 1 -M prepared", "-c 32 -j 2 -M simple", "-c 32 -j 2 -M prepared",
				"-c 1 -M simple TLS", "-c 1 -M prepared TLS", "-c 32 -j 2 -M simple TLS", "-c 32 -j 2 -M prepared TLS"}},
		{name: "peers by flag", args: []string{"-targets", "pgbouncer-src,pgdog", "-clients", "1", "-pgbouncer-src", bin, "-pgdog", bin},
			targets: "pgbouncer-src,pgdog", configs: []string{"-c 1 -M simple", "-c 1 -M prepared"}},
		{name: "peers by environment", args: []string{"-targets", "pgbouncer-src,pgdog", "-clients", "1"},
			env:     map[string]string{"PGBOUNCER_SRC_BIN": bin, "PGDOG_BIN": bin},
			targets: "pgbouncer-src,pgdog", configs: []string{"-c 1 -M simple", "-c 1 -M prepared"}},
		{name: "missing peers left out", args: []string{"-targets", "direct,pgbouncer-src,pgdog", "-clients", "1", "-pgdog", "/nonexistent/pgdog"},
			targets: "direct", configs: []string{"-c 1 -M simple", "-c 1 -M prepared"}, note: "target pgbouncer-src left out"},
		{name: "no TLS setup noted", args: []string{"-targets", "direct,pgpool", "-clients", "1", "-tls", "on"},
			targets: "direct,pgpool", configs: []string{"-c 1 -M simple TLS", "-c 1 -M prepared TLS"}, note: "target pgpool has no TLS setup"},
		{name: "bad tls", args: []string{"-tls", "yes"}, err: "-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PGBOUNCER_SRC_BIN", "")
			t.Setenv("PGDOG_BIN", "")
			t.Setenv("PATH", t.TempDir()) // no pgdog on PATH
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			o, err := parseFlags(tc.args, &stderr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one about %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(o.targets, ","); got != tc.targets {
				t.Errorf("targets = %s, want %s", got, tc.targets)
			}
			var names []string
			for _, c := range o.configs {
				names = append(names, c.Name())
			}
			if strings.Join(names, "|") != strings.Join(tc.configs, "|") {
				t.Errorf("configs = %q, want %q", names, tc.configs)
			}
			if !strings.Contains(stderr.String(), tc.note) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.note)
			}
			if strings.Contains(tc.targets, "pgdog") && (o.pgdog != bin || o.pgbouncerSrc != bin) {
				t.Errorf("binaries %q %q, want %q", o.pgdog, o.pgbouncerSrc, bin)
			}
		})
	}
}

func TestTLSHelpers(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		tls  bool
		want string
	}{
		{"postgres://u@127.0.0.1:5432/postgres?sslmode=disable", true, "postgres://u@127.0.0.1:5432/postgres?sslmode=require"},
		{"postgres://u@127.0.0.1:5432/postgres?sslmode=disable", false, "postgres://u@127.0.0.1:5432/postgres?sslmode=disable"},
		{"postgres://u@127.0.0.1:5432/postgres", true, "postgres://u@127.0.0.1:5432/postgres?sslmode=require"},
	} {
		if got := upstreamURLFor(tc.raw, tc.tls); got != tc.want {
			t.Errorf("upstreamURLFor(%q, %v) = %q, want %q", tc.raw, tc.tls, got, tc.want)
		}
	}
	if got := urlFor(6000, true); got != "postgres://"+pgtest.Superuser+"@127.0.0.1:6000/postgres?sslmode=require" {
		t.Errorf("urlFor TLS = %q", got)
	}
	if got := nlproxyTLSArgs(nil); got != nil {
		t.Errorf("nlproxyTLSArgs(nil) = %q", got)
	}
	if got := strings.Join(nlproxyTLSArgs(&tlsFiles{cert: "/c", key: "/k"}), " "); got != "--tls-cert /c --tls-key /k --require-tls" {
		t.Errorf("nlproxyTLSArgs = %q", got)
	}
	for _, tc := range []struct {
		configs []Config
		want    string
	}{
		{[]Config{{}, {}}, "[false]"},
		{[]Config{{TLS: true}}, "[true]"},
		{[]Config{{TLS: true}, {}}, "[false true]"},
	} {
		if got := fmt.Sprint(tlsModes(tc.configs)); got != tc.want {
			t.Errorf("tlsModes = %s, want %s", got, tc.want)
		}
	}
	if epKey("pgbouncer", true) != "pgbouncer+tls" || epKey("pgbouncer", false) != "pgbouncer" {
		t.Error("epKey")
	}
	for _, tc := range []struct {
		target string
		want   bool
	}{{targetDirect, true}, {targetPgbouncer, true}, {targetPgbouncerSrc, true}, {targetPgdog, true}, {targetNlproxyAlt, true},
		{targetPgpool, false}, {targetOdyssey, false}, {targetPgcat, false}} {
		if tlsCapable(tc.target) != tc.want {
			t.Errorf("tlsCapable(%s) = %v", tc.target, !tc.want)
		}
	}
}

// TestReportPeers checks the ratio columns against both PgBouncers, the
// before/after nlproxy-alt's, and a target skipped in a TLS config.
func TestReportPeers(t *testing.T) {
	c := Config{Clients: 1, Threads: 1, Mode: "simple", TLS: true}
	rep := &Report{Targets: []string{targetPgbouncer, targetPgbouncerSrc, targetPgpool, targetNlproxy, targetNlproxyAlt}, Stream: map[string]*StreamStats{}}
	rep.Configs = []*ConfigResult{{Config: c, Name: c.Name(), Targets: map[string]*TargetStats{
		targetPgbouncer: stats(100, 0.01), targetPgbouncerSrc: stats(50, 0.02), targetPgpool: {Skipped: "no TLS setup"},
		targetNlproxy: stats(80, 0.0125), targetNlproxyAlt: stats(200, 0.005)}}}
	var text bytes.Buffer
	rep.WriteText(&text)
	out := text.String()
	for _, s := range []string{"-c 1 -M simple TLS", "nlproxy/pgbouncer TPS", "nlproxy/pgbouncer-src TPS", "nlproxy-alt/pgbouncer TPS",
		"nlproxy-alt/pgbouncer-src TPS", "nlproxy/pgbouncer CPU", "nlproxy/pgbouncer-src CPU", "nlproxy-alt/pgbouncer-src CPU",
		"1.60", "0.80", "0.62", "0.25", "—"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "ERR") {
		t.Errorf("a skipped target shows as an error:\n%s", out)
	}
}

func TestWarmupConfig(t *testing.T) {
	for _, tc := range []struct {
		configs []Config
		tls     bool
		want    Config
	}{
		{nil, false, Config{Clients: 4, Threads: 1, Mode: "simple"}},
		{[]Config{{Clients: 1}, {Clients: 32, Threads: 2}, {Clients: 8}}, true, Config{Clients: 32, Threads: 2, Mode: "simple", TLS: true}},
		{[]Config{{Clients: 1}}, false, Config{Clients: 4, Threads: 1, Mode: "simple"}},
	} {
		if got := warmupConfig(tc.configs, tc.tls); got != tc.want {
			t.Errorf("warmupConfig(%v, %v) = %+v, want %+v", tc.configs, tc.tls, got, tc.want)
		}
	}
}
