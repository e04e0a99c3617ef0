package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

const catalogUsage = `Usage:
  nlproxy catalog build  --dsn URL [--data-dir D] [--schemas a,b] [--skip-values]
  nlproxy catalog show   --dsn URL [--format ddl|json] [--table t[,t2]] [--schemas a,b]
  nlproxy catalog lookup --dsn URL [--data-dir D] [--limit N] keyword...

build saves a snapshot where 'nlproxy serve' looks for it (--data-dir, default
$NLPROXY_DATA_DIR or the user cache directory); lookup reads it, or builds one
in memory. Run 'nlproxy catalog <subcommand> --help' for its flags.
`

// runCatalog implements `nlproxy catalog SUBCOMMAND`.
func runCatalog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("catalog needs a subcommand: build, show or lookup")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "build":
		return catalogBuild(ctx, args, stdout, stderr)
	case "show":
		return catalogShow(ctx, args, stdout, stderr)
	case "lookup":
		return catalogLookup(ctx, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, catalogUsage)
		return nil
	}
	return usageErrorf("unknown catalog subcommand %q (want build, show or lookup)", sub)
}

// catalogFlags are the flags every subcommand shares.
type catalogFlags struct {
	dsn, schemas string
}

func (c *catalogFlags) register(set *flag.FlagSet) {
	set.StringVar(&c.dsn, "dsn", "", "connection URL of the database to catalog (required)")
	set.StringVar(&c.schemas, "schemas", "", "comma-separated schemas (default: every schema the role may use)")
}

func (c *catalogFlags) introspectOptions() catalog.IntrospectOptions {
	var o catalog.IntrospectOptions
	for _, s := range strings.Split(c.schemas, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Schemas = append(o.Schemas, s)
		}
	}
	return o
}

func (c *catalogFlags) connect(ctx context.Context) (*pgx.Conn, error) {
	if c.dsn == "" {
		return nil, errors.New("--dsn is required")
	}
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// parseFlags parses a catalog subcommand's flags; --help prints them, and
// the environment variables the subcommand reads, to stdout.
func parseFlags(set *flag.FlagSet, args []string, stdout, stderr io.Writer, synopsis string, env ...string) error {
	set.SetOutput(helpOutput(args, stdout, stderr))
	set.Usage = func() { printFlagUsage(set, args, synopsis, env, libpqEnvNote) }
	return flagError(set.Parse(args))
}

// catalogDataDir is where snapshots live unless --data-dir says otherwise:
// the same default `nlproxy serve` uses, so what build writes serve loads.
func catalogDataDir(getenv func(string) string) string {
	if d := getenv("NLPROXY_DATA_DIR"); d != "" {
		return d
	}
	return defaultDataDir()
}

func catalogBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("catalog build", flag.ContinueOnError)
	var cf catalogFlags
	cf.register(set)
	dataDir := set.String("data-dir", catalogDataDir(os.Getenv), "directory holding catalog snapshots, the one serve reads (env NLPROXY_DATA_DIR)")
	skipValues := set.Bool("skip-values", false, "do not build the value index")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy catalog build --dsn URL [flags]", "NLPROXY_DATA_DIR"); err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("no data directory: pass --data-dir or set NLPROXY_DATA_DIR (no user cache directory to default to)")
	}
	conn, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	db := conn.Config().Database
	start := time.Now()
	snap, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{Introspect: cf.introspectOptions(), SkipValues: *skipValues})
	if err != nil {
		return err
	}
	if old, err := catalog.LoadSnapshot(*dataDir, db, descindex.Options{}); err == nil {
		snap.Version = old.Version + 1
	}
	if err := catalog.SaveSnapshot(*dataDir, snap); err != nil {
		return err
	}
	cols := 0
	for _, t := range snap.Schema.Tables {
		cols += len(t.Columns)
	}
	values := 0
	if snap.Values != nil {
		values = snap.Values.Len()
	}
	fmt.Fprintf(stdout, "database %s: %d tables, %d columns, %d enums, %d values, %d descriptions\n",
		db, len(snap.Schema.Tables), cols, len(snap.Schema.Enums), values, snap.Descriptions.Len())
	fmt.Fprintf(stdout, "fingerprint %s, version %d, built in %v\nwrote %s\n",
		snap.Schema.Fingerprint, snap.Version, time.Since(start).Round(time.Millisecond), catalog.SnapshotPath(*dataDir, db))
	return nil
}

func catalogShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("catalog show", flag.ContinueOnError)
	var cf catalogFlags
	cf.register(set)
	format := set.String("format", "ddl", "output format: ddl or json")
	tables := set.String("table", "", "comma-separated tables to show (default: all)")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy catalog show --dsn URL [flags]"); err != nil {
		return err
	}
	if *format != "ddl" && *format != "json" {
		return fmt.Errorf("--format must be ddl or json, not %q", *format)
	}
	conn, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s, err := catalog.Introspect(ctx, conn, cf.introspectOptions())
	if err != nil {
		return err
	}
	var sel catalog.Selection
	if *tables != "" {
		sel = catalog.Selection{}
		for _, t := range strings.Split(*tables, ",") {
			t = strings.TrimSpace(t)
			if s.Table(t) == nil {
				return fmt.Errorf("no table %q", t)
			}
			sel[t] = nil
		}
	}
	if *format == "json" {
		out := s
		if sel != nil {
			out = &catalog.Schema{Enums: s.Enums, Fingerprint: s.Fingerprint}
			for name := range sel {
				out.Tables = append(out.Tables, *s.Table(name))
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if sel == nil {
		_, err = io.WriteString(stdout, s.RenderFull(catalog.RenderOptions{}))
	} else {
		_, err = io.WriteString(stdout, s.RenderSelected(sel, catalog.RenderOptions{}))
	}
	return err
}

func catalogLookup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("catalog lookup", flag.ContinueOnError)
	var cf catalogFlags
	cf.register(set)
	dataDir := set.String("data-dir", catalogDataDir(os.Getenv), "directory holding catalog snapshots, the one serve reads; without a snapshot there, one is built in memory (env NLPROXY_DATA_DIR)")
	limit := set.Int("limit", 10, "matches per keyword")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy catalog lookup --dsn URL [flags] keyword...", "NLPROXY_DATA_DIR"); err != nil {
		return err
	}
	keywords := set.Args()
	if len(keywords) == 0 {
		return errors.New("lookup needs at least one keyword")
	}
	conn, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	db := conn.Config().Database
	var snap *catalog.Snapshot
	err = fs.ErrNotExist // no directory: build in memory, quietly
	if *dataDir != "" {
		snap, err = catalog.LoadSnapshot(*dataDir, db, descindex.Options{})
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "snapshot unusable (%v), building in memory\n", err)
		}
		if snap, err = catalog.Build(ctx, conn, db, catalog.BuildOptions{Introspect: cf.introspectOptions()}); err != nil {
			return err
		}
	}
	if snap.Values != nil {
		fmt.Fprintln(stdout, "values:")
		for _, m := range snap.Values.Lookup(ctx, keywords, valueindex.LookupOptions{Limit: *limit, PerColumn: *limit}) {
			fmt.Fprintf(stdout, "  %.3f  %-20q %s.%s.%s  (keyword %q)\n", m.Score, m.Value, m.Schema, m.Table, m.Column, m.Keyword)
		}
	}
	if snap.Descriptions != nil {
		fmt.Fprintln(stdout, "descriptions:")
		for _, h := range snap.Descriptions.Search(ctx, strings.Join(keywords, " "), *limit) {
			what := h.Schema + "." + h.Table
			if h.Column != "" {
				what += "." + h.Column
			}
			if h.Kind == descindex.KindGlossary {
				what = "glossary " + h.Term
			}
			fmt.Fprintf(stdout, "  %.3f  %-40s %s\n", h.Score, what, h.Text)
		}
	}
	return nil
}
