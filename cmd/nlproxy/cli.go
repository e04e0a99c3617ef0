package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

const usage = `nlproxy is a PostgreSQL proxy that answers natural-language questions with a
local model and relays everything else.

Usage:
  nlproxy [serve] [flags]                 run the proxy (the default command)
  nlproxy demo [flags]                    throwaway Postgres with a sample database, the proxy in front
  nlproxy mcp --stdio [flags]             serve one AI agent over MCP on stdin/stdout as a role (docs/mcp.md)
  nlproxy catalog build|show|lookup ...   build, print and query the schema and value catalog
  nlproxy workload show|forget ...        what --learn-workload learnt per database; forget some of it
  nlproxy eval load|run|report|compare    measure accuracy on sql-eval or BIRD through the proxy
  nlproxy verified list|add|remove ...    manage the verified queries file (--verified)
  nlproxy healthcheck [--url URL]         exit 0 when the proxy's /readyz answers 200 (container health checks)
  nlproxy version                         print the version and commit (also --version)
  nlproxy help [command]                  this text, or one command's flags and environment

Run 'nlproxy <command> --help' for a command's flags and the environment
variables it reads.
`

// usageError is a mistake on the command line: exit status 2, as the flag
// package's ExitOnError uses. reported means the flag package has already
// printed the message.
type usageError struct {
	err      error
	reported bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// flagError classifies a FlagSet.Parse error: -h/--help stays flag.ErrHelp
// (exit 0); anything else is a usage error the flag package has printed.
func flagError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{err: err, reported: true}
}

// exitCode maps run's error to the process exit status.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	default:
		return 1
	}
}

// reportError is what main prints for err ("" for nothing).
func reportError(err error) string {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ""
	case errors.As(err, &ue) && ue.reported:
		return "Run 'nlproxy help' for the commands, 'nlproxy <command> --help' for their flags.\n"
	case errors.As(err, &ue):
		return "nlproxy: " + err.Error() + "\nRun 'nlproxy help' for the commands, 'nlproxy <command> --help' for their flags.\n"
	default:
		return "nlproxy: " + err.Error() + "\n"
	}
}

// helpRequested reports whether args ask for help (-h, -help, --help before
// a "--"), so help goes to stdout while flag errors go to stderr.
func helpRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// helpOutput is where a FlagSet prints: stdout for help, stderr for errors.
func helpOutput(args []string, stdout, stderr io.Writer) io.Writer {
	if helpRequested(args) {
		return stdout
	}
	return stderr
}

// envKeys lists the environment variables applyEnv reads, in the option
// table's order.
func envKeys() []string {
	var keys []string
	for _, o := range options() {
		if o.Field != nil { // NLPROXY_CONFIG is read before, by loadConfig
			keys = append(keys, o.Env...)
		}
	}
	return keys
}

// printFlagUsage writes a command's usage line, its flags and the
// environment variables it reads — for --help only: after a flag error the
// flag package's one-line message and main's hint are enough.
func printFlagUsage(fs *flag.FlagSet, args []string, synopsis string, env []string, notes string) {
	if !helpRequested(args) {
		return
	}
	w := fs.Output()
	fmt.Fprintf(w, "Usage:\n  %s\n", synopsis)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
	if len(env) > 0 {
		fmt.Fprintf(w, "\nEnvironment (a flag given on the command line wins):\n")
		for _, line := range wrapWords(env, 76) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	if notes != "" {
		fmt.Fprintf(w, "\n%s", notes)
	}
}

// wrapWords joins words with spaces into lines of at most width bytes.
func wrapWords(words []string, width int) []string {
	var lines []string
	var b strings.Builder
	for _, w := range words {
		if b.Len() > 0 && b.Len()+1+len(w) > width {
			lines = append(lines, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	if b.Len() > 0 {
		lines = append(lines, b.String())
	}
	return lines
}

// libpqEnvNote: pgx fills what a connection string leaves out from the libpq
// variables, the password from the password file included.
const libpqEnvNote = `Connections to Postgres also read the libpq variables (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGPASSFILE or ~/.pgpass, PGSSLMODE, …) for what their URL leaves out.
`

// serveUsage is the FlagSet usage of `nlproxy serve`.
func serveUsage(fs *flag.FlagSet, args []string) {
	printFlagUsage(fs, args, "nlproxy [serve] [flags]", append([]string{"NLPROXY_CONFIG"}, envKeys()...),
		"Precedence: flags, then the environment, then the YAML file (--config), then defaults.\n"+libpqEnvNote)
}
