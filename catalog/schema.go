// Package catalog introspects a PostgreSQL database into a Schema, renders it
// for LLM prompts (CHESS-style CREATE TABLE with per-column comments), and
// keeps per-database snapshots (schema + value index + description index)
// persisted under a data directory and refreshed when the schema changes.
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Table kinds.
const (
	KindTable        = "table"
	KindView         = "view"
	KindMaterialized = "materialized view"
)

// Schema is the introspected shape of one database.
type Schema struct {
	Tables []Table `json:"tables"`
	// Enums maps an enum type, spelled as Column.Type spells it
	// (format_type), to its labels in sort order.
	Enums       map[string][]string `json:"enums,omitempty"`
	Fingerprint string              `json:"fingerprint"`
}

// Table is a table, view or materialized view.
type Table struct {
	Schema      string       `json:"schema"`
	Name        string       `json:"name"`
	Kind        string       `json:"kind"`
	Comment     string       `json:"comment,omitempty"`
	RowEstimate int64        `json:"row_estimate"` // -1: unknown (never analyzed)
	Columns     []Column     `json:"columns"`
	PrimaryKey  []string     `json:"primary_key,omitempty"`
	Uniques     [][]string   `json:"uniques,omitempty"`
	ForeignKeys []ForeignKey `json:"foreign_keys,omitempty"`
}

// Column is one column in attnum order.
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"` // format_type spelling, e.g. "character varying(40)"
	Nullable bool   `json:"nullable"`
	Default  string `json:"default,omitempty"`
	Comment  string `json:"comment,omitempty"`
	IsEnum   bool   `json:"is_enum,omitempty"`
	// Stats come from pg_stats and are only present after ANALYZE.
	Stats *ColumnStats `json:"stats,omitempty"`
}

// ColumnStats are planner statistics of a column.
type ColumnStats struct {
	NullFrac float64 `json:"null_frac"`
	// NDistinct is pg_stats.n_distinct: > 0 a count, < 0 minus the fraction
	// of rows that are distinct.
	NDistinct float64 `json:"n_distinct"`
	// Examples are the most common values (as text), the stored examples a
	// prompt shows when the caller retrieved none.
	Examples []string `json:"examples,omitempty"`
}

// ForeignKey is a (possibly multi-column) foreign key.
type ForeignKey struct {
	Columns    []string `json:"columns"`
	RefSchema  string   `json:"ref_schema"`
	RefTable   string   `json:"ref_table"`
	RefColumns []string `json:"ref_columns"`
}

// QualifiedName is schema.name with identifiers quoted where needed.
func (t *Table) QualifiedName() string {
	return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name)
}

// Table finds a table by "schema.name" or "name" (unquoted spelling). An
// unqualified name matches the first table with that name in Tables order,
// which is the catalog role's search_path order; TableOnPath resolves it
// for another session's search_path.
func (s *Schema) Table(name string) *Table {
	if i := s.lookup(name, nil); i >= 0 {
		return &s.Tables[i]
	}
	return nil
}

// TableOnPath finds a table by "schema.name" or "name" as a session with
// searchPath (schema names in order, as current_schemas(false) returns
// them) would: an unqualified name is the table in the first path schema
// that has it. A name found on no path schema falls back to Table's rule.
func (s *Schema) TableOnPath(name string, searchPath []string) *Table {
	if i := s.lookup(name, searchPath); i >= 0 {
		return &s.Tables[i]
	}
	return nil
}

// lookup returns the index of the table name denotes, or -1. A qualified
// match wins over a table whose own name contains the dot.
func (s *Schema) lookup(name string, searchPath []string) int {
	for i := range s.Tables {
		if t := &s.Tables[i]; len(name) == len(t.Schema)+1+len(t.Name) &&
			strings.HasPrefix(name, t.Schema) && name[len(t.Schema)] == '.' && strings.HasSuffix(name, t.Name) {
			return i
		}
	}
	best, bestPos := -1, len(searchPath)
	for i := range s.Tables {
		t := &s.Tables[i]
		if t.Name != name {
			continue
		}
		if best < 0 {
			best = i // Tables order when no path schema has it
		}
		if pos := slices.Index(searchPath, t.Schema); pos >= 0 && pos < bestPos {
			best, bestPos = i, pos
		}
	}
	return best
}

// Column finds a column by name.
func (t *Table) Column(name string) *Column {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return &t.Columns[i]
		}
	}
	return nil
}

// EstimatedDistinct turns n_distinct into a count using the row estimate;
// 0 when unknown.
func (st *ColumnStats) EstimatedDistinct(rows int64) int64 {
	switch {
	case st == nil:
		return 0
	case st.NDistinct > 0:
		return int64(st.NDistinct)
	case st.NDistinct < 0 && rows > 0:
		return int64(-st.NDistinct*float64(rows) + 0.5)
	}
	return 0
}

// fingerprint hashes the structural parts of the schema: everything an SQL
// writer depends on (objects, columns, types, nullability, defaults, keys,
// enum labels, comments). Row estimates and planner statistics are left
// out on purpose: they drift with every autovacuum and would force rebuilds
// without any change a query could notice.
func fingerprint(s *Schema) string {
	type col struct {
		N, T, D, C string
		Null, E    bool
	}
	type tab struct {
		S, N, K, C string
		Cols       []col
		PK         []string
		U          [][]string
		FK         []ForeignKey
	}
	canon := struct {
		T []tab
		E map[string][]string
	}{E: s.Enums}
	for _, t := range s.Tables {
		ct := tab{S: t.Schema, N: t.Name, K: t.Kind, C: t.Comment, PK: t.PrimaryKey}
		for _, c := range t.Columns {
			ct.Cols = append(ct.Cols, col{N: c.Name, T: c.Type, D: c.Default, C: c.Comment, Null: c.Nullable, E: c.IsEnum})
		}
		ct.U = slices.Clone(t.Uniques)
		slices.SortFunc(ct.U, func(a, b []string) int { return slices.Compare(a, b) })
		ct.FK = slices.Clone(t.ForeignKeys)
		slices.SortFunc(ct.FK, func(a, b ForeignKey) int {
			if c := slices.Compare(a.Columns, b.Columns); c != 0 {
				return c
			}
			return strings.Compare(a.RefSchema+"."+a.RefTable, b.RefSchema+"."+b.RefTable)
		})
		canon.T = append(canon.T, ct)
	}
	slices.SortFunc(canon.T, func(a, b tab) int {
		if c := strings.Compare(a.S, b.S); c != 0 {
			return c
		}
		return strings.Compare(a.N, b.N)
	})
	// encoding/json is deterministic here: struct fields in order, map keys sorted.
	b, err := json.Marshal(canon)
	if err != nil {
		panic("catalog: fingerprint encoding: " + err.Error()) // only plain types: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
