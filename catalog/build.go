package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// BuildOptions configure Build.
type BuildOptions struct {
	Introspect   IntrospectOptions
	Values       valueindex.Options
	SkipValues   bool // no value index (schema and descriptions only)
	Descriptions descindex.Options
	Glossary     []descindex.Doc // extra glossary documents for the description index
}

// Build introspects the database on conn and builds its value and
// description indexes. The Querier must be able to begin a transaction for
// the value index (*pgx.Conn and *pgxpool.Pool can).
func Build(ctx context.Context, conn Querier, database string, opts BuildOptions) (*Snapshot, error) {
	s, err := Introspect(ctx, conn, opts.Introspect)
	if err != nil {
		return nil, err
	}
	return BuildFromSchema(ctx, conn, database, s, opts)
}

// BuildFromSchema builds the indexes for an already introspected schema. It
// adjusts the stored examples in s with what the value index learnt (see
// applyValueExamples).
func BuildFromSchema(ctx context.Context, conn Querier, database string, s *Schema, opts BuildOptions) (*Snapshot, error) {
	snap := &Snapshot{Database: database, Schema: s, BuiltAt: time.Now().UTC(), Version: 1}
	fns, err := LoadFunctions(ctx, conn)
	if err != nil {
		return nil, err
	}
	snap.Functions = fns
	if !opts.SkipValues {
		vq, ok := conn.(valueindex.Querier)
		if !ok {
			return nil, fmt.Errorf("catalog: %T cannot run value index queries", conn)
		}
		vals, err := valueindex.Build(ctx, vq, ValueColumns(s), opts.Values)
		if err != nil {
			return nil, fmt.Errorf("catalog: value index: %w", err)
		}
		snap.Values = vals
		applyValueExamples(s, vals, opts.Introspect.withDefaults())
	}
	snap.Descriptions = descindex.New(append(DescriptionDocs(s), opts.Glossary...), opts.Descriptions)
	return snap, nil
}

// applyValueExamples makes the value index the authority on examples:
// columns it skipped as sensitive or identifier/email/phone-like lose their
// pg_stats examples (they would leak into prompts), and indexed columns
// without statistics (never analyzed) get their most frequent values.
func applyValueExamples(s *Schema, vals *valueindex.Index, opts IntrospectOptions) {
	find := func(schema, table, col string) *Column {
		for i := range s.Tables {
			if t := &s.Tables[i]; t.Schema == schema && t.Name == table {
				return t.Column(col)
			}
		}
		return nil
	}
	for _, st := range vals.Stats() {
		switch st.Skipped {
		case valueindex.SkipSensitive, valueindex.SkipNameLike, valueindex.SkipContent:
			if c := find(st.Schema, st.Table, st.Column); c != nil && c.Stats != nil {
				c.Stats.Examples = nil
			}
		}
	}
	if opts.MaxExamples <= 0 {
		return
	}
	for ci, st := range vals.Columns() {
		c := find(st.Schema, st.Table, st.Column)
		if c == nil || c.IsEnum || (c.Stats != nil && len(c.Stats.Examples) > 0) {
			continue
		}
		var ex []string
		for i := 0; i < st.Values && len(ex) < opts.MaxExamples; i++ {
			if v := vals.Value(ci, i); v != "" && len(v) <= opts.MaxExampleLen && !strings.ContainsAny(v, "\n\r") {
				ex = append(ex, v)
			}
		}
		if len(ex) == 0 {
			continue
		}
		if c.Stats == nil {
			c.Stats = &ColumnStats{}
		}
		c.Stats.Examples = ex
	}
}

// ValueColumns lists the columns of tables and materialized views for the
// value index (views are skipped: their values come from base tables).
func ValueColumns(s *Schema) []valueindex.Column {
	var out []valueindex.Column
	for _, t := range s.Tables {
		if t.Kind == KindView {
			continue
		}
		for _, c := range t.Columns {
			vc := valueindex.Column{Schema: t.Schema, Table: t.Name, Name: c.Name, Type: c.Type,
				IsEnum: c.IsEnum, RowEstimate: t.RowEstimate, Comment: c.Comment}
			if c.IsEnum {
				vc.EnumLabels = s.Enums[c.Type]
			}
			out = append(out, vc)
		}
	}
	return out
}

// DescriptionDocs turns every table and column (with its comment, if any)
// into description-index documents; names are searchable even uncommented.
func DescriptionDocs(s *Schema) []descindex.Doc {
	var out []descindex.Doc
	for _, t := range s.Tables {
		out = append(out, descindex.Doc{Kind: descindex.KindTable, Schema: t.Schema, Table: t.Name, Text: t.Comment})
		for _, c := range t.Columns {
			out = append(out, descindex.Doc{Kind: descindex.KindColumn, Schema: t.Schema, Table: t.Name, Column: c.Name, Text: c.Comment})
		}
	}
	return out
}

// Ensure *pgx.Conn satisfies both query interfaces at compile time.
var (
	_ Querier            = (*pgx.Conn)(nil)
	_ valueindex.Querier = (*pgx.Conn)(nil)
)
