package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// recordedEnvKeys are the variables applyEnv reads, recorded independently
// of the help text.
func recordedEnvKeys() map[string]bool {
	keys := map[string]bool{}
	cfg := defaultConfig()
	_ = applyEnv(&cfg, func(k string) string { keys[k] = true; return "" })
	return keys
}

func TestCLIExitCodesAndHelp(t *testing.T) {
	t.Setenv("NLPROXY_UPSTREAM", "") // the no-upstream case must not see a developer's setting
	t.Setenv("NLPROXY_CONFIG", "")
	subcommands := []string{"nlproxy [serve]", "nlproxy demo", "nlproxy catalog", "nlproxy version", "nlproxy help"}
	env := recordedEnvKeys()
	var allEnv, demoEnv []string
	for k := range env {
		allEnv = append(allEnv, k)
		if !demoOwnsEnv(k) {
			demoEnv = append(demoEnv, k)
		}
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // each must appear
		notStdout  []string
		stderr     []string // each must appear in main's report or the flag package's output
		emptyOut   bool
		skipReport bool
	}{
		{name: "--help", args: []string{"--help"}, stdout: subcommands},
		{name: "-h", args: []string{"-h"}, stdout: subcommands},
		{name: "help", args: []string{"help"}, stdout: subcommands},
		{name: "help help", args: []string{"help", "help"}, stdout: subcommands},
		{name: "help --help", args: []string{"help", "--help"}, stdout: subcommands},
		{name: "eval compare --help has no empty Flags section", args: []string{"eval", "compare", "--help"},
			stdout: []string{"nlproxy eval compare A.jsonl B.jsonl"}, notStdout: []string{"Flags:"}},
		{name: "every default in serve --help", args: []string{"serve", "--help"},
			stdout: []string{"NLPROXY_ADMIN_RECENT_ASKS) (default 100)", "NLPROXY_ASK_ALL_MAX_STEPS) (default 4)", "NLPROXY_ASK_ALL_TOP_K) (default 3)"}},
		{name: "serve --help", args: []string{"serve", "--help"},
			stdout: append([]string{"nlproxy [serve] [flags]", "-listen", "-upstream", "-catalog-dsn", "NLPROXY_CONFIG", "PGPASSFILE"}, allEnv...)},
		{name: "help serve", args: []string{"help", "serve"}, stdout: append([]string{"-upstream"}, allEnv...)},
		{name: "flags alone mean serve: -listen x --help", args: []string{"--listen", "127.0.0.1:0", "--help"}, stdout: []string{"-upstream"}},
		{name: "demo --help", args: []string{"demo", "-h"},
			stdout:    append([]string{"nlproxy demo [flags]", "-listen", "-log-level", "OLLAMA_HOST", "SIGHUP"}, demoEnv...),
			notStdout: []string{"NLPROXY_UPSTREAM", "NLPROXY_CATALOG_DSN", "NLPROXY_DATA_DIR"}},
		{name: "help demo", args: []string{"help", "demo"}, stdout: []string{"OLLAMA_HOST", "NLPROXY_MODEL"}},
		{name: "catalog --help", args: []string{"catalog", "--help"}, stdout: []string{"catalog build", "catalog show", "catalog lookup"}},
		{name: "catalog build --help", args: []string{"catalog", "build", "--help"}, stdout: []string{"-data-dir", "-dsn", "NLPROXY_DATA_DIR", "PGPASSFILE"}},
		{name: "help catalog lookup", args: []string{"help", "catalog", "lookup"}, stdout: []string{"-limit", "NLPROXY_DATA_DIR"}},
		{name: "version", args: []string{"version"}, stdout: []string{"nlproxy ", "commit "}},
		{name: "--version", args: []string{"--version"}, stdout: []string{"nlproxy ", "commit "}},
		{name: "unknown command", args: []string{"bogus"}, code: 2, emptyOut: true, stderr: []string{`unknown command "bogus"`, "nlproxy help"}},
		{name: "unknown top-level flag", args: []string{"--bogus"}, code: 2, emptyOut: true, stderr: []string{"flag provided but not defined: -bogus", "nlproxy help"}},
		{name: "unknown serve flag", args: []string{"serve", "--bogus"}, code: 2, emptyOut: true, stderr: []string{"-bogus"}},
		{name: "serve stray argument", args: []string{"serve", "--upstream", "postgres://h/db", "extra"}, code: 2, stderr: []string{"unexpected arguments: extra"}},
		{name: "unknown demo flag", args: []string{"demo", "--bogus"}, code: 2, emptyOut: true, stderr: []string{"-bogus"}},
		{name: "demo stray argument", args: []string{"demo", "now"}, code: 2, stderr: []string{`demo takes no arguments, got "now"`}},
		{name: "catalog without subcommand", args: []string{"catalog"}, code: 2, stderr: []string{"build, show or lookup"}},
		{name: "unknown catalog subcommand", args: []string{"catalog", "drop"}, code: 2, stderr: []string{`unknown catalog subcommand "drop"`}},
		{name: "unknown catalog flag", args: []string{"catalog", "show", "--bogus"}, code: 2, emptyOut: true, stderr: []string{"-bogus"}},
		{name: "help for an unknown command", args: []string{"help", "bogus"}, code: 2, stderr: []string{`unknown command "bogus"`}},
		{name: "version with an argument", args: []string{"version", "x"}, code: 2, stderr: []string{"takes no arguments"}},
		{name: "serve without upstream is a config error", args: []string{"serve"}, code: 1, stderr: []string{"no upstream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if got := exitCode(err); got != tt.code {
				t.Fatalf("exit code %d (err %v), want %d\nstdout:\n%s\nstderr:\n%s", got, err, tt.code, stdout.String(), stderr.String())
			}
			out := stdout.String()
			for _, want := range tt.stdout {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			for _, bad := range tt.notStdout {
				if strings.Contains(out, bad) {
					t.Errorf("stdout has %q:\n%s", bad, out)
				}
			}
			if tt.emptyOut && out != "" {
				t.Errorf("stdout = %q, want nothing on a usage error", out)
			}
			if tt.code == 0 && stderr.Len() > 0 {
				t.Errorf("stderr on success: %s", stderr.String())
			}
			report := stderr.String() + reportError(err)
			for _, want := range tt.stderr {
				if !strings.Contains(report, want) {
					t.Errorf("stderr lacks %q:\n%s", want, report)
				}
			}
		})
	}
}

func TestReportError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"success", nil, ""},
		{"help", flagError(errHelp()), ""},
		{"flag error already printed", flagError(errors.New("flag provided but not defined: -x")), "Run 'nlproxy help'"},
		{"usage error", usageErrorf("unknown command %q", "x"), "nlproxy: unknown command \"x\"\nRun 'nlproxy help'"},
		{"runtime error", errors.New("listen: address in use"), "nlproxy: listen: address in use\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reportError(tt.err)
			if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
				t.Errorf("reportError = %q, want prefix %q", got, tt.want)
			}
			if strings.Contains(got, "flag provided") {
				t.Errorf("the flag package's message is printed twice: %q", got)
			}
		})
	}
}

func errHelp() error {
	_, err := loadConfig([]string{"-h"}, func(string) string { return "" }, &bytes.Buffer{})
	return err
}

func TestBuildVersion(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
	}}
	tests := []struct {
		name         string
		ldV, ldC     string
		info         *debug.BuildInfo
		wantV, wantC string
	}{
		{"ldflags win", "v1.2.0-3-gabc-dirty", "abc1234", stamped, "v1.2.0-3-gabc-dirty", "abc1234"},
		{"go build in a checkout", "", "", stamped, "dev", "0123456789ab-dirty"},
		{"go install module@version", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0", "unknown"},
		{"nothing known", "", "", nil, "dev", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, c := buildVersion(tt.ldV, tt.ldC, tt.info)
			if v != tt.wantV || c != tt.wantC {
				t.Errorf("buildVersion = %q, %q; want %q, %q", v, c, tt.wantV, tt.wantC)
			}
		})
	}
}

// TestBuiltCLI runs the binary as built with the Makefile's -ldflags: the
// version stamp reaches `version`/`--version`, and main turns run's errors
// into exit statuses 0, 1 and 2.
func TestBuiltCLI(t *testing.T) {
	bin := buildNLProxy(t)
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"--version"}, 0, "nlproxy " + testVersion + " (commit " + testCommit, ""},
		{[]string{"version"}, 0, "nlproxy " + testVersion + " (commit " + testCommit, ""},
		{[]string{"--help"}, 0, "nlproxy demo [flags]", ""},
		{[]string{"serve", "--help"}, 0, "NLPROXY_UPSTREAM", ""},
		{[]string{"bogus"}, 2, "", `unknown command "bogus"`},
		{[]string{"serve", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"serve", "--upstream", "postgres://h/db", "--log-level", "loud"}, 1, "", "log-level"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = []string{"HOME=" + t.TempDir()}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, want %d; stdout (want %q):\n%s\nstderr (want %q):\n%s",
					code, tt.code, tt.stdout, stdout.String(), tt.stderr, stderr.String())
			}
		})
	}
}
