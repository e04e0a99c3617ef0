package catalog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RenderOptions tune schema rendering. Zero values take the defaults.
type RenderOptions struct {
	// Examples are values retrieved for the question (value index hits),
	// keyed "table.column" or "schema.table.column"; they are shown before
	// the stored examples.
	Examples map[string][]string
	// MaxExamples caps the examples shown per column (default 3); retrieved
	// examples are always shown, up to MaxRetrieved (default 5).
	MaxExamples  int
	MaxRetrieved int
	// NoStats leaves out distinct/null statistics.
	NoStats bool
	// NoValues leaves out every stored value (retrieved and most common
	// examples), for a model that may see the schema only.
	NoValues bool
	// OtherNamesOnly makes RenderSoft list the tables outside the selection
	// by name only (no columns), for schemas whose full name listing would
	// crowd the prompt.
	OtherNamesOnly bool
	// OtherSchemasOnly makes RenderSoft summarize, in one line per schema,
	// the schemas none of whose tables is selected (their first table
	// names), and list nothing else: for warehouses whose name listing alone
	// would crowd the prompt.
	OtherSchemasOnly bool
	// SearchPath is the asking session's search_path as schema names in
	// order (current_schemas(false)); empty means ["public"]. A table is
	// named unqualified when that name resolves to it on this path, and
	// schema-qualified otherwise (other schemas, and tables a same-named
	// table earlier on the path shadows). Unqualified Selection names and
	// Examples keys resolve the same way (see Schema.TableOnPath).
	SearchPath []string
}

func (o RenderOptions) withDefaults() RenderOptions {
	if o.MaxExamples <= 0 {
		o.MaxExamples = 3
	}
	if o.MaxRetrieved <= 0 {
		o.MaxRetrieved = 5
	}
	if len(o.SearchPath) == 0 {
		o.SearchPath = []string{"public"}
	}
	return o
}

// Selection names tables ("schema.name", or "name" resolved on
// RenderOptions.SearchPath) and, per table, the columns wanted; a nil or
// empty column list means every column.
type Selection map[string][]string

// RenderFull renders every enum and table.
func (s *Schema) RenderFull(opts RenderOptions) string {
	all := make(map[int]map[string]bool, len(s.Tables))
	for i := range s.Tables {
		all[i] = nil
	}
	return s.render(all, false, opts.withDefaults())
}

// RenderSelected renders only the selected tables and columns, always
// keeping the primary key columns of the selected tables and the columns of
// foreign keys that link two selected tables, so joins stay writable.
func (s *Schema) RenderSelected(sel Selection, opts RenderOptions) string {
	opts = opts.withDefaults()
	return s.render(s.resolve(sel, opts.SearchPath), false, opts)
}

// RenderSoft renders details (types, comments, examples, constraints) for
// the selection like RenderSelected, and lists the names of every other
// table and column, so the model still knows what exists.
func (s *Schema) RenderSoft(sel Selection, opts RenderOptions) string {
	opts = opts.withDefaults()
	return s.render(s.resolve(sel, opts.SearchPath), true, opts)
}

// resolve maps the selection onto table indexes → kept column set (nil: all).
// Names that match no table are ignored.
func (s *Schema) resolve(sel Selection, searchPath []string) map[int]map[string]bool {
	out := map[int]map[string]bool{}
	for name, cols := range sel {
		i := s.lookup(name, searchPath)
		if i < 0 {
			continue
		}
		cur, seen := out[i]
		switch {
		case len(cols) == 0:
			out[i] = nil
		case seen && cur == nil: // already all columns
		default:
			if cur == nil {
				cur = map[string]bool{}
				out[i] = cur
			}
			for _, c := range cols {
				cur[c] = true
			}
		}
	}
	return out
}

// tableNames spells the tables of one rendering for one search path.
type tableNames struct {
	s *Schema
	// bare maps an unqualified table name to the table it resolves to:
	// the one in the earliest path schema, else the first in Tables order.
	bare   map[string]int
	onPath map[string]bool // schema → on the search path
}

func (s *Schema) tableNames(searchPath []string) tableNames {
	n := tableNames{s: s, bare: make(map[string]int, len(s.Tables)), onPath: make(map[string]bool, len(searchPath))}
	pos := make(map[string]int, len(searchPath))
	for i, sch := range searchPath {
		if _, dup := pos[sch]; !dup {
			pos[sch] = i
		}
		n.onPath[sch] = true
	}
	rank := func(i int) int {
		if p, ok := pos[s.Tables[i].Schema]; ok {
			return p
		}
		return len(searchPath)
	}
	for i := range s.Tables {
		name := s.Tables[i].Name
		if cur, ok := n.bare[name]; !ok || rank(i) < rank(cur) {
			n.bare[name] = i
		}
	}
	return n
}

// resolvesTo reports whether the unqualified name of table i denotes it.
func (n tableNames) resolvesTo(i int) bool {
	return n.bare[n.s.Tables[i].Name] == i
}

// name is how table i is written: bare when a session with this search
// path would find it by that name, schema-qualified otherwise.
func (n tableNames) name(i int) string {
	t := &n.s.Tables[i]
	if n.onPath[t.Schema] && n.resolvesTo(i) {
		return QuoteIdent(t.Name)
	}
	return t.QualifiedName()
}

func (s *Schema) render(chosen map[int]map[string]bool, soft bool, opts RenderOptions) string {
	names := s.tableNames(opts.SearchPath)
	selectedTable := func(schema, name string) (int, bool) {
		for i := range chosen {
			if s.Tables[i].Schema == schema && s.Tables[i].Name == name {
				return i, true
			}
		}
		return 0, false
	}
	// Keep PK columns and both ends of FKs linking selected tables.
	keep := func(i int, col string) {
		if chosen[i] != nil {
			chosen[i][col] = true
		}
	}
	for i := range chosen {
		t := &s.Tables[i]
		for _, c := range t.PrimaryKey {
			keep(i, c)
		}
		for _, fk := range t.ForeignKeys {
			j, ok := selectedTable(fk.RefSchema, fk.RefTable)
			if !ok {
				continue
			}
			for _, c := range fk.Columns {
				keep(i, c)
			}
			for _, c := range fk.RefColumns {
				keep(j, c)
			}
		}
	}
	kept := func(i int, col string) bool {
		cols, ok := chosen[i]
		return ok && (cols == nil || cols[col])
	}

	var b strings.Builder
	// Enums used by rendered columns.
	var enums []string
	for i := range chosen {
		for _, c := range s.Tables[i].Columns {
			if c.IsEnum && kept(i, c.Name) && !slices.Contains(enums, c.Type) {
				enums = append(enums, c.Type)
			}
		}
	}
	slices.Sort(enums)
	for _, e := range enums {
		labels := s.Enums[e]
		q := make([]string, len(labels))
		for i, l := range labels {
			q[i] = quoteLiteral(l)
		}
		fmt.Fprintf(&b, "CREATE TYPE %s AS ENUM (%s);\n\n", e, strings.Join(q, ", "))
	}

	var others []string
	for i := range s.Tables {
		t := &s.Tables[i]
		if _, ok := chosen[i]; !ok {
			if soft && opts.OtherSchemasOnly {
				continue
			}
			if soft && opts.OtherNamesOnly {
				others = append(others, names.name(i)+TableSummary(t))
			} else if soft {
				cols := make([]string, len(t.Columns))
				for k, c := range t.Columns {
					cols[k] = QuoteIdent(c.Name)
				}
				others = append(others, fmt.Sprintf("-- %s %s (%s)", t.Kind, names.name(i), strings.Join(cols, ", ")))
			}
			continue
		}
		s.renderTable(&b, i, kept, selectedTable, names, soft, opts)
	}
	if soft && opts.OtherSchemasOnly {
		s.renderSchemaSummaries(&b, chosen)
	}
	if len(others) > 0 && opts.OtherNamesOnly {
		b.WriteString("-- Other tables: " + strings.Join(others, ", ") + "\n")
	} else if len(others) > 0 {
		b.WriteString("-- Other tables (names only):\n")
		for _, o := range others {
			b.WriteString(o)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (s *Schema) renderTable(b *strings.Builder, i int, kept func(int, string) bool,
	selectedTable func(string, string) (int, bool), names tableNames, soft bool, opts RenderOptions) {
	t := &s.Tables[i]
	var head []string
	if t.Comment != "" {
		head = append(head, oneLine(t.Comment))
	}
	if t.RowEstimate >= 0 && t.Kind != KindView {
		head = append(head, "(rows≈"+strconv.FormatInt(t.RowEstimate, 10)+")")
	}
	if len(head) > 0 {
		b.WriteString("-- " + strings.Join(head, " ") + "\n")
	}
	kw := "TABLE"
	switch t.Kind {
	case KindView:
		kw = "VIEW"
	case KindMaterialized:
		kw = "MATERIALIZED VIEW"
	}
	fmt.Fprintf(b, "CREATE %s %s (\n", kw, names.name(i))

	type line struct{ body, comment string }
	var lines []line
	var omitted []string
	for _, c := range t.Columns {
		if !kept(i, c.Name) {
			omitted = append(omitted, QuoteIdent(c.Name))
			continue
		}
		body := QuoteIdent(c.Name) + " " + c.Type
		if !c.Nullable {
			body += " NOT NULL"
		}
		if c.Default != "" && !strings.HasPrefix(c.Default, "nextval(") {
			if strings.HasPrefix(c.Default, "GENERATED ") {
				body += " " + c.Default
			} else {
				body += " DEFAULT " + c.Default
			}
		}
		lines = append(lines, line{body, s.columnNote(t, &c, names.resolvesTo(i), opts)})
	}
	if len(t.PrimaryKey) > 0 {
		lines = append(lines, line{"PRIMARY KEY (" + identList(t.PrimaryKey) + ")", ""})
	}
	for _, u := range t.Uniques {
		all := true
		for _, c := range u {
			all = all && kept(i, c)
		}
		if all {
			lines = append(lines, line{"UNIQUE (" + identList(u) + ")", ""})
		}
	}
	for _, fk := range t.ForeignKeys {
		j, ok := selectedTable(fk.RefSchema, fk.RefTable)
		if !ok {
			continue
		}
		lines = append(lines, line{fmt.Sprintf("FOREIGN KEY (%s) REFERENCES %s (%s)",
			identList(fk.Columns), names.name(j), identList(fk.RefColumns)), ""})
	}
	for k, l := range lines {
		b.WriteString("  " + l.body)
		if k < len(lines)-1 {
			b.WriteByte(',')
		}
		if l.comment != "" {
			b.WriteString(" -- " + l.comment)
		}
		b.WriteByte('\n')
	}
	if soft && len(omitted) > 0 {
		b.WriteString("  -- other columns: " + strings.Join(omitted, ", ") + "\n")
	}
	b.WriteString(");\n\n")
}

// columnNote is the CHESS-style column comment: description, example
// values (retrieved first), then simple statistics. Examples keyed
// "table.column" belong to t only when bare (its unqualified name denotes it).
func (s *Schema) columnNote(t *Table, c *Column, bare bool, opts RenderOptions) string {
	var parts []string
	if c.Comment != "" {
		parts = append(parts, oneLine(c.Comment))
	}
	var ex []string
	add := func(v string, limit int) {
		if !opts.NoValues && len(ex) < limit && !slices.Contains(ex, v) {
			ex = append(ex, v)
		}
	}
	keys := []string{t.Schema + "." + t.Name + "." + c.Name}
	if bare {
		keys = append(keys, t.Name+"."+c.Name)
	}
	for _, key := range keys {
		for _, v := range opts.Examples[key] {
			add(v, opts.MaxRetrieved)
		}
	}
	if c.Stats != nil && storedExamplesUseful(t, c) {
		for _, v := range c.Stats.Examples {
			add(v, max(opts.MaxExamples, len(ex)))
		}
	}
	if len(ex) > 0 {
		q := make([]string, len(ex))
		for i, v := range ex {
			q[i] = quoteLiteral(v)
		}
		parts = append(parts, "examples: "+strings.Join(q, ", "))
	}
	if c.Stats != nil && !opts.NoStats && !slices.Equal(t.PrimaryKey, []string{c.Name}) {
		if d := c.Stats.EstimatedDistinct(t.RowEstimate); d > 0 {
			parts = append(parts, "distinct≈"+strconv.FormatInt(d, 10))
		}
		if c.Stats.NullFrac > 0 {
			parts = append(parts, "nulls "+strconv.FormatFloat(c.Stats.NullFrac*100, 'f', 0, 64)+"%")
		}
	}
	return strings.Join(parts, "; ")
}

// storedExamplesUseful leaves out most-common values that tell the model
// nothing: enum labels (already in CREATE TYPE), numeric key columns (ids),
// and non-text columns with many distinct values (amounts, timestamps).
func storedExamplesUseful(t *Table, c *Column) bool {
	switch {
	case c.IsEnum:
		return false
	case textType(c.Type): // codes are worth showing even as keys (currency 'EUR')
		return true
	case t.isKeyColumn(c.Name):
		return false
	}
	d := c.Stats.EstimatedDistinct(t.RowEstimate)
	return d > 0 && d <= 20
}

func textType(typ string) bool {
	for _, p := range []string{"text", "character", "citext", "name"} {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// isKeyColumn reports whether col is part of the primary key or a foreign key.
func (t *Table) isKeyColumn(col string) bool {
	if slices.Contains(t.PrimaryKey, col) {
		return true
	}
	for _, fk := range t.ForeignKeys {
		if slices.Contains(fk.Columns, col) {
			return true
		}
	}
	return false
}

func identList(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = QuoteIdent(c)
	}
	return strings.Join(q, ", ")
}

// maxSummary bounds a table summary in a names-only listing.
const maxSummary = 60

// summaryTables is how many table names a schema's summary line shows.
const summaryTables = 6

// renderSchemaSummaries writes one line per schema none of whose tables is
// chosen: its name, table count and first table names.
func (s *Schema) renderSchemaSummaries(b *strings.Builder, chosen map[int]map[string]bool) {
	var order []string
	tables := map[string][]string{}
	selected := map[string]bool{}
	for i := range s.Tables {
		t := &s.Tables[i]
		if _, ok := chosen[i]; ok {
			selected[t.Schema] = true
		}
		if _, ok := tables[t.Schema]; !ok {
			order = append(order, t.Schema)
		}
		tables[t.Schema] = append(tables[t.Schema], QuoteIdent(t.Name))
	}
	first := true
	for _, ns := range order {
		if selected[ns] {
			continue
		}
		if first {
			b.WriteString("-- Other schemas (not shown):\n")
			first = false
		}
		ts := tables[ns]
		more := ""
		if len(ts) > summaryTables {
			ts, more = ts[:summaryTables], ", …"
		}
		noun := "tables"
		if len(tables[ns]) == 1 {
			noun = "table"
		}
		fmt.Fprintf(b, "-- %s: %d %s: %s%s\n", QuoteIdent(ns), len(tables[ns]), noun, strings.Join(ts, ", "), more)
	}
}

// SchemaSummariesSize estimates, in bytes, the schema summary lines when no
// table is chosen (an upper bound for any selection).
func (s *Schema) SchemaSummariesSize() int {
	var b strings.Builder
	s.renderSchemaSummaries(&b, nil)
	return b.Len()
}

// TableSummary is how a names-only listing describes a table: the first
// sentence of its comment, cut to about 60 bytes at a word, in parentheses
// after a space; "" for a table without a comment.
func TableSummary(t *Table) string {
	c := oneLine(t.Comment)
	if c == "" {
		return ""
	}
	if i := strings.IndexAny(c, ".;\n"); i > 0 {
		c = c[:i]
	}
	if len(c) > maxSummary {
		cut := strings.LastIndexByte(c[:maxSummary], ' ')
		if cut <= 0 {
			cut = maxSummary
		}
		c = strings.TrimRight(c[:cut], " ,:-") + "…"
	}
	return " (" + c + ")"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(oneLine(s), "'", "''") + "'"
}

// QuoteIdent double-quotes an identifier only when Postgres would need it:
// anything other than lower-case letters, digits, _ and $ (not leading), or
// a keyword that is not unreserved (what quote_ident does).
func QuoteIdent(s string) string {
	if !needsQuote(s) {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9') || c == '$':
			if i == 0 {
				return true
			}
		default:
			return true
		}
	}
	_, kw := quotedKeywords[s]
	return kw
}

// quotedKeywords are the reserved, type/function-name and column-name
// keywords of PostgreSQL 17 (the ones quote_ident quotes).
var quotedKeywords = func() map[string]struct{} {
	const words = `all analyse analyze and any array as asc asymmetric both case cast check collate column
constraint create current_catalog current_date current_role current_time current_timestamp current_user
default deferrable desc distinct do else end except false fetch for foreign from grant group having in
initially intersect into lateral leading limit localtime localtimestamp not null offset on only or order
placing primary references returning select session_user some symmetric system_user table then to
trailing true union unique user using variadic when where window with
authorization binary collation concurrently cross current_schema freeze full ilike inner is isnull join
left like natural notnull outer overlaps right similar tablesample verbose
between bigint bit boolean char character coalesce dec decimal exists extract float greatest grouping
inout int integer interval json json_array json_arrayagg json_exists json_object json_objectagg json_query
json_scalar json_serialize json_table json_value least merge_action national nchar none normalize nullif
numeric out overlay position precision real row setof smallint substring time timestamp treat trim values
varchar xmlattributes xmlconcat xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot
xmlserialize xmltable`
	m := map[string]struct{}{}
	for _, w := range strings.Fields(words) {
		m[w] = struct{}{}
	}
	return m
}()
