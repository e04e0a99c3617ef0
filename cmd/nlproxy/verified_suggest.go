package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"gopkg.in/yaml.v3"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/workload"
)

// verifiedSuggest prints, as YAML for the operator to review and add,
// entries drafted from the store's accepted asks and the workload profile
// of db under dataDir (either may be absent). No literal of any statement
// is printed: verified.Suggest turns each into a :pN parameter.
func verifiedSuggest(ctx context.Context, stdout io.Writer, st *store.Store, dataDir, db string, existing []verified.Entry, min int64) error {
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
			cs = append(cs, verified.Candidate{Database: db, Question: p.Question, Text: shape.Text, Values: literalValues(p.SQL), Count: 1})
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
	ss := verified.Suggest(cs, existing, min)
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
