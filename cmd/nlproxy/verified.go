package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/nlproxy/nlproxy/catalog/store"
	"go.uber.org/zap"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/guard"
)

const verifiedUsage = `Usage:
  nlproxy verified list   [--file FILE] [--catalog-store URL] [--db DATABASE]
  nlproxy verified add    [--file FILE] [--catalog-store URL] --name NAME --db DATABASE --question Q --sql SQL
                          [--paraphrase P]... [--param NAME=TABLE.COLUMN]... [--role ROLE]...
  nlproxy verified remove [--file FILE] [--catalog-store URL] --name NAME --db DATABASE
  nlproxy verified suggest [--file FILE] [--catalog-store URL] [--data-dir DIR] --db DATABASE [--min N]

With --catalog-store (default $NLPROXY_CATALOG_STORE), add and remove write
the catalog store, which every replica reads at each ask; list shows the
file's and the store's entries, a store entry replacing the file's of the
same name. Without it they write FILE.

suggest prints, as YAML to review, entries drafted from statements seen at
least N times among the store's accepted asks and the workload profile under
--data-dir (default $NLPROXY_DATA_DIR). Every literal is a :pN parameter, so
no value of any role is printed; entries already verified are left out.
Each statement is checked against the catalog snapshot of the database (the
store's or the data directory's): one naming a relation or column gone, or
(with NLPROXY_UPSTREAM set) one the asking role may not read, is dropped.

Verified queries are question→SQL entries an operator trusts; 'nlproxy serve
--verified FILE' answers a close match with the entry's SQL (guarded, run as
the asker, parameters bound), and shows a near miss to the model as an
example. A parameter is written :name in the SQL and {name} in the question
and each paraphrase; its value is a value of its column that the question
spells. See docs/asking.md.
`

// runVerified implements `nlproxy verified SUBCOMMAND`.
func runVerified(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("verified needs a subcommand: list, add, remove or suggest")
	}
	sub, args := args[0], args[1:]
	set := flag.NewFlagSet("verified "+sub, flag.ContinueOnError)
	file := set.String("file", "", "YAML file of verified queries")
	storeURL := set.String("catalog-store", os.Getenv("NLPROXY_CATALOG_STORE"), "the catalog store's Postgres URL (default $NLPROXY_CATALOG_STORE): add and remove write it")
	db := set.String("db", "", "database")
	var e verified.Entry
	var params, paraphrases, roles listFlag
	dataDir, minSeen := new(string), new(int64)
	switch sub {
	case "list", "remove":
		if sub == "remove" {
			set.StringVar(&e.Name, "name", "", "name of the entry")
		}
	case "add":
		set.StringVar(&e.Name, "name", "", "name of the entry (lower-case letters, digits, _)")
		set.StringVar(&e.Question, "question", "", "the question it answers; parameters as {name}")
		set.StringVar(&e.SQL, "sql", "", "its SQL; parameters as :name")
		set.Var(&paraphrases, "paraphrase", "another way to ask it; repeatable")
		set.Var(&params, "param", "NAME=TABLE.COLUMN or NAME=SCHEMA.TABLE.COLUMN: a parameter filled from the question; repeatable")
		set.Var(&roles, "role", "a role it may answer (default: every role that may read its tables); repeatable")
	case "suggest":
		dataDir = set.String("data-dir", catalogDataDir(os.Getenv), "directory holding the workload profiles, the one serve uses (env NLPROXY_DATA_DIR)")
		minSeen = set.Int64("min", 2, "times a statement must have been seen")
	case "help", "-h", "--help":
		fmt.Fprint(stdout, verifiedUsage)
		return nil
	default:
		return usageErrorf("unknown verified subcommand %q (want list, add, remove or suggest)", sub)
	}
	if err := parseFlags(set, args, stdout, stderr, "nlproxy verified "+sub+" --file FILE [flags]"); err != nil {
		return err
	}
	if *file == "" && *storeURL == "" && *dataDir == "" {
		return usageErrorf("verified %s: --file or --catalog-store is required", sub)
	}
	if sub == "suggest" && *db == "" {
		return usageErrorf("verified suggest: --db is required")
	}
	var es []verified.Entry
	if *file != "" {
		var err error
		es, err = verified.Read(*file)
		// A file not made yet is fine for add, and beside a store.
		if err != nil && !(errors.Is(err, fs.ErrNotExist) && (sub == "add" || *storeURL != "")) {
			return err
		}
	}
	var st *store.Store
	if *storeURL != "" {
		var err error
		if st, err = store.Open(ctx, *storeURL, store.Options{Logger: zap.NewNop()}); err != nil {
			return err
		}
		defer st.Close()
	}
	switch sub {
	case "suggest":
		if st != nil {
			stored, err := st.AllVerified(ctx)
			if err != nil {
				return err
			}
			es = verified.Merge(es, stored)
		}
		return verifiedSuggest(ctx, stdout, stderr, st, *dataDir, *db, es, *minSeen)
	case "list":
		if st != nil {
			stored, err := st.AllVerified(ctx)
			if err != nil {
				return err
			}
			es = verified.Merge(es, stored)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DATABASE\tNAME\tPARAMS\tROLES\tQUESTION")
		for _, x := range es {
			if *db != "" && x.Database != *db {
				continue
			}
			var ps []string
			for _, p := range x.Params {
				ps = append(ps, p.Name+"="+p.Column)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Database, x.Name, strings.Join(ps, ","), strings.Join(x.Roles, ","), x.Question)
		}
		return tw.Flush()
	case "remove":
		if st != nil {
			ok, err := st.RemoveVerified(ctx, *db, e.Name)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("verified remove: no entry %s in database %s in the catalog store", e.Name, *db)
			}
			return nil
		}
		n := len(es)
		es = slices.DeleteFunc(es, func(x verified.Entry) bool { return x.Name == e.Name && x.Database == *db })
		if len(es) == n {
			return fmt.Errorf("verified remove: no entry %s in database %s", e.Name, *db)
		}
		return verified.Write(*file, es)
	}
	e.Database, e.Paraphrases, e.Roles = *db, paraphrases, roles
	for _, p := range params {
		name, col, ok := strings.Cut(p, "=")
		if !ok {
			return usageErrorf("verified add: --param %q: want NAME=TABLE.COLUMN", p)
		}
		e.Params = append(e.Params, verified.Param{Name: name, Column: col})
	}
	// The SQL must be one read-only statement the guard accepts. Functions
	// are judged when it answers, with the database's function catalog:
	// here every name passes.
	bound := map[string]string{}
	for _, p := range e.Params {
		bound[p.Name] = "x"
	}
	sql, err := verified.Bind(e.SQL, bound)
	if err != nil {
		return err
	}
	if _, err := guard.Check(sql, guard.Options{AllowFunctions: []string{"*"}}); err != nil {
		return fmt.Errorf("verified add: %s: %w", e.Name, err)
	}
	if st != nil {
		// The store replaces an entry of the same name: that is how an
		// operator corrects one all replicas share.
		if err := e.Check(); err != nil {
			return err
		}
		return st.PutVerified(ctx, e)
	}
	es = append(es, e)
	if err := verified.CheckAll(es); err != nil {
		return err
	}
	return verified.Write(*file, es)
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }
