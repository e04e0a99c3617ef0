package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"gopkg.in/yaml.v3"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/workload"
)

// verifiedSuggest prints, as YAML for the operator to review and add,
// entries drafted from the store's accepted asks and the workload profile
// of db under dataDir (either may be absent). No literal of any statement
// is printed: verified.Suggest turns each into a :pN parameter.
//
// Every statement is checked against the catalog snapshot of db (the
// store's, else the one under dataDir; none is an error): one naming a
// relation or column that no longer exists is dropped, and so is an ask
// naming one its role may not read, when the configuration names an
// upstream the catalog role can reach to say so (pg_catalog's privilege
// functions; nothing of the database's own code runs).
func verifiedSuggest(ctx context.Context, stdout, stderr io.Writer, st *store.Store, dataDir, db string, existing []verified.Entry, min int64) error {
	names, closeNames, err := suggestNames(ctx, st, dataDir, db)
	if err != nil {
		return err
	}
	defer closeNames()
	var cs []verified.Candidate
	if st != nil {
		pairs, err := st.Pairs(ctx, db)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			if p.Source != memory.PairAccepted {
				continue // the operator's own pairs are examples already
			}
			shape, err := workload.Analyze(p.SQL)
			if err != nil {
				continue
			}
			cs = append(cs, verified.Candidate{Database: db, Question: p.Question, Text: shape.Text, Values: literalValues(p.SQL), Count: 1, Role: p.Role})
		}
	}
	if dataDir != "" {
		p, err := workload.ReadProfile(dataDir, db, workload.Limits{MaxQueries: 1 << 30, MaxAge: -1}, time.Now())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if p != nil {
			for _, q := range p.Queries() {
				cs = append(cs, verified.Candidate{Database: db, Text: q.Text, Count: q.Count})
			}
		}
	}
	ss, dropped := verified.Suggest(cs, existing, min, names.Check)
	if names.Visible == nil {
		fmt.Fprintf(stdout, "# The askers' privileges were not checked: no upstream is configured (NLPROXY_UPSTREAM).\n")
	}
	if len(dropped) > 0 {
		fmt.Fprintf(stderr, "verified suggest: %d statements dropped: what they name is not in the catalog of %s, or not readable by the role that asked\n", len(dropped), db)
		fmt.Fprintf(stdout, "# Dropped, what they name not resolving in the catalog:\n")
		for _, d := range dropped {
			from := "workload"
			if d.Role != "" {
				from = "asks of " + d.Role
			}
			fmt.Fprintf(stdout, "#   seen %d times (%s): %s: %s\n", d.Count, from, d.Reason, strings.Join(strings.Fields(d.Text), " "))
		}
	}
	if len(ss) == 0 {
		fmt.Fprintf(stdout, "# no suggestions for %s (seen at least %d times, not already verified)\n", db, min)
		return nil
	}
	fmt.Fprintf(stdout, "# Suggested verified queries for %s: review each (write the question, name\n"+
		"# the entry, give each :pN parameter a column or write its value back),\n"+
		"# then add it with nlproxy verified add.\n", db)
	for _, s := range ss {
		b, err := yaml.Marshal([]verified.Entry{s.Entry})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n# seen %d times (%s)\n%s", s.Seen, s.Source, b)
	}
	return nil
}

// suggestNames is the catalog check of verified suggest: db's snapshot
// from the store or dataDir, and, when the configuration names an
// upstream, each role's privileges read through the catalog role.
func suggestNames(ctx context.Context, st *store.Store, dataDir, db string) (*verified.Names, func(), error) {
	var snap *catalog.Snapshot
	var err error
	if st != nil {
		if snap, err = st.LoadSnapshot(ctx, db, descindex.Options{}); err != nil {
			snap = nil
		}
	}
	if snap == nil && dataDir != "" {
		if snap, err = catalog.LoadSnapshot(dataDir, db, descindex.Options{}); err != nil {
			snap = nil
		}
	}
	if snap == nil {
		return nil, nil, fmt.Errorf("verified suggest: no catalog snapshot of %s in the catalog store or under %s, so what the suggestions name cannot be checked (nlproxy catalog build, or serve, writes one)", db, dataDir)
	}
	names := &verified.Names{Schema: snap.Schema}
	cfg, err := loadConfig(nil, os.Getenv, io.Discard)
	if err != nil || len(cfg.Upstreams) == 0 {
		return names, func() {}, nil
	}
	connect, err := catalogConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	var conn *pgx.Conn
	names.Visible = func(role string) (*catalog.Schema, error) {
		if conn == nil {
			if conn, err = connect(ctx, db); err != nil {
				conn = nil
				return nil, err
			}
		}
		return snap.Schema.VisibleTo(ctx, conn, role)
	}
	return names, func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}, nil
}

// literalValues are the constants of sql in order, unquoted; only used to
// take the same values out of a question, never printed.
func literalValues(sql string) []string {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return nil
	}
	var out []string
	for _, tk := range res.GetTokens() {
		switch tk.GetToken() {
		case pg_query.Token_SCONST, pg_query.Token_USCONST, pg_query.Token_ICONST, pg_query.Token_FCONST,
			pg_query.Token_BCONST, pg_query.Token_XCONST:
			v := sql[tk.GetStart():tk.GetEnd()]
			v = strings.TrimPrefix(strings.TrimPrefix(v, "E"), "U&")
			out = append(out, strings.ReplaceAll(strings.Trim(v, "'"), "''", "'"))
		}
	}
	return out
}
