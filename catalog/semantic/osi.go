package semantic

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The part of an OSI (Open Semantic Interchange, Apache Ossie) core-spec
// YAML file read here: semantic_model[] with datasets (source, fields,
// dataset-scoped metrics), relationships and model-scoped metrics.
// Unknown keys (custom_extensions, datatype, …) are ignored, so files of
// later spec versions still load.
type osiFile struct {
	SemanticModel []osiModel `yaml:"semantic_model"`
}

type osiModel struct {
	Name          string            `yaml:"name"`
	Datasets      []osiDataset      `yaml:"datasets"`
	Relationships []osiRelationship `yaml:"relationships"`
	Metrics       []osiMetric       `yaml:"metrics"`
}

type osiDataset struct {
	Name        string      `yaml:"name"`
	Source      string      `yaml:"source"`
	PrimaryKey  []string    `yaml:"primary_key"`
	Description string      `yaml:"description"`
	AIContext   yaml.Node   `yaml:"ai_context"`
	Fields      []osiField  `yaml:"fields"`
	Metrics     []osiMetric `yaml:"metrics"`
}

type osiExpression struct {
	Dialects []struct {
		Dialect    string `yaml:"dialect"`
		Expression string `yaml:"expression"`
	} `yaml:"dialects"`
}

type osiField struct {
	Name        string        `yaml:"name"`
	Expression  osiExpression `yaml:"expression"`
	Description string        `yaml:"description"`
	AIContext   yaml.Node     `yaml:"ai_context"`
}

type osiRelationship struct {
	Name        string   `yaml:"name"`
	From        string   `yaml:"from"`
	To          string   `yaml:"to"`
	FromColumns []string `yaml:"from_columns"`
	ToColumns   []string `yaml:"to_columns"`
}

type osiMetric struct {
	Name        string        `yaml:"name"`
	Expression  osiExpression `yaml:"expression"`
	Description string        `yaml:"description"`
	AIContext   yaml.Node     `yaml:"ai_context"`
}

// osiError names the file and the field ("semantic_model[0].datasets[1].source").
func osiError(path, field, format string, args ...any) error {
	return fmt.Errorf("semantic model %s: %s: %s", path, field, fmt.Sprintf(format, args...))
}

// ReadOSI reads an OSI YAML file.
func ReadOSI(path string) (*Layer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseOSI(path, b)
}

func parseOSI(path string, b []byte) (*Layer, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("semantic model %s: not JSON (a dbt semantic_manifest.json) nor YAML (an OSI file): %w", path, err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("semantic model %s: neither a dbt semantic_manifest.json nor an OSI YAML file (a mapping with semantic_model)", path)
	}
	top := root.Content[0]
	has := func(key string) bool {
		for i := 0; i+1 < len(top.Content); i += 2 {
			if top.Content[i].Value == key {
				return true
			}
		}
		return false
	}
	if !has("semantic_model") {
		if has("semantic_models") {
			return nil, fmt.Errorf("semantic model %s: semantic_model: missing; this looks like a dbt project's YAML: give the target/semantic_manifest.json dbt parse writes", path)
		}
		return nil, osiError(path, "semantic_model", "missing (an OSI file has a list of semantic models under semantic_model)")
	}
	var f osiFile
	if err := top.Decode(&f); err != nil {
		return nil, fmt.Errorf("semantic model %s: %w", path, err)
	}
	if len(f.SemanticModel) == 0 {
		return nil, osiError(path, "semantic_model", "empty")
	}
	l := &Layer{}
	for i, sm := range f.SemanticModel {
		if err := l.addOSIModel(path, fmt.Sprintf("semantic_model[%d]", i), sm); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// osiDS is a dataset as read: where its Model is in Layer.Models (-1: not
// imported), its fields' expressions and its metrics' SQL.
type osiDS struct {
	model   int
	table   string
	fields  map[string]string // field name → ANSI SQL expression
	metrics map[string]*osiMetricRef
}

type osiMetricRef struct {
	at    string   // its field path, for errors
	expr  string   // as written
	sql   string   // resolved
	named []string // the datasets it reads, its own first
	busy  bool     // being resolved: a cycle
	done  bool
}

func (l *Layer) addOSIModel(path, at string, sm osiModel) error {
	if strings.TrimSpace(sm.Name) == "" {
		return osiError(path, at+".name", "missing")
	}
	if len(sm.Datasets) == 0 {
		return osiError(path, at+".datasets", "missing or empty (semantic model %s)", sm.Name)
	}
	ds := map[string]*osiDS{}
	for i, d := range sm.Datasets {
		dat := fmt.Sprintf("%s.datasets[%d]", at, i)
		if strings.TrimSpace(d.Name) == "" {
			return osiError(path, dat+".name", "missing")
		}
		if ds[d.Name] != nil {
			return osiError(path, dat+".name", "dataset %s is defined twice", d.Name)
		}
		if strings.TrimSpace(d.Source) == "" {
			return osiError(path, dat+".source", "missing (dataset %s)", d.Name)
		}
		schema, table, query, err := osiSource(d.Source)
		if err != nil {
			return osiError(path, dat+".source", "%v (dataset %s)", err, d.Name)
		}
		syn, ctx, err := osiSynonyms(d.AIContext)
		if err != nil {
			return osiError(path, dat+".ai_context", "%v", err)
		}
		cur := &osiDS{model: -1, table: table, fields: map[string]string{}, metrics: map[string]*osiMetricRef{}}
		ds[d.Name] = cur
		md := Model{Name: d.Name, Description: withContext(d.Description, ctx), Synonyms: syn, Schema: schema, Table: table}
		for j, fd := range d.Fields {
			fat := fmt.Sprintf("%s.fields[%d]", dat, j)
			if strings.TrimSpace(fd.Name) == "" {
				return osiError(path, fat+".name", "missing")
			}
			expr, ok, err := osiSQL(fd.Expression)
			if err != nil {
				return osiError(path, fat+".expression", "%v (field %s)", err, fd.Name)
			}
			if !ok {
				l.Dropped = append(l.Dropped, fmt.Sprintf("field %s.%s: no ANSI_SQL expression", d.Name, fd.Name))
				continue
			}
			syn, ctx, err := osiSynonyms(fd.AIContext)
			if err != nil {
				return osiError(path, fat+".ai_context", "%v", err)
			}
			cur.fields[fd.Name] = expr
			md.Dimensions = append(md.Dimensions, Field{Name: fd.Name, Description: withContext(fd.Description, ctx), Expr: expr, Synonyms: syn})
		}
		for j, mt := range d.Metrics {
			mat := fmt.Sprintf("%s.metrics[%d]", dat, j)
			if err := osiCheckMetric(path, mat, mt); err != nil {
				return err
			}
			if _, dup := cur.metrics[mt.Name]; dup {
				return osiError(path, mat+".name", "metric %s is defined twice in dataset %s", mt.Name, d.Name)
			}
			cur.metrics[mt.Name] = &osiMetricRef{at: mat}
		}
		if query {
			// A dataset over a query names no table: nothing to describe
			// or join. Its metrics would refer to the query's columns.
			l.Dropped = append(l.Dropped, "dataset "+d.Name+": its source is a query, not a table")
			continue
		}
		cur.model = len(l.Models)
		l.Models = append(l.Models, md)
	}
	for i, r := range sm.Relationships {
		rat := fmt.Sprintf("%s.relationships[%d]", at, i)
		if strings.TrimSpace(r.Name) == "" {
			return osiError(path, rat+".name", "missing")
		}
		from, to := ds[r.From], ds[r.To]
		if from == nil {
			return osiError(path, rat+".from", "%q is no dataset of semantic model %s (relationship %s)", r.From, sm.Name, r.Name)
		}
		if to == nil {
			return osiError(path, rat+".to", "%q is no dataset of semantic model %s (relationship %s)", r.To, sm.Name, r.Name)
		}
		if len(r.FromColumns) == 0 {
			return osiError(path, rat+".from_columns", "missing (relationship %s)", r.Name)
		}
		if len(r.FromColumns) != len(r.ToColumns) {
			return osiError(path, rat+".to_columns", "%d columns for %d from_columns (relationship %s)", len(r.ToColumns), len(r.FromColumns), r.Name)
		}
		if len(r.FromColumns) > 1 {
			// A Join is one column pair: half a composite key would be a
			// wrong join.
			l.Dropped = append(l.Dropped, "relationship "+r.Name+": composite keys are not read")
			continue
		}
		if from.model < 0 || to.model < 0 {
			continue
		}
		// The entity pair Joins reads, named after the relationship (its
		// semantic model's name keeps two models' relationships apart).
		name := sm.Name + "/" + r.Name
		l.Models[to.model].Entities = append(l.Models[to.model].Entities, Entity{Name: name, Type: "primary", Expr: osiColumn(to, r.ToColumns[0])})
		l.Models[from.model].Entities = append(l.Models[from.model].Entities, Entity{Name: name, Type: "foreign", Expr: osiColumn(from, r.FromColumns[0])})
	}
	// Dataset-scoped metrics first: model-scoped ones may refer to them.
	for _, d := range sm.Datasets {
		cur := ds[d.Name]
		for _, mt := range d.Metrics {
			ref := cur.metrics[mt.Name]
			expr, ok, err := osiSQL(mt.Expression)
			if err != nil {
				return osiError(path, ref.at+".expression", "%v (metric %s)", err, mt.Name)
			}
			if !ok || cur.model < 0 {
				delete(cur.metrics, mt.Name)
				l.Dropped = append(l.Dropped, fmt.Sprintf("metric %s.%s: no ANSI_SQL expression over a table", d.Name, mt.Name))
				continue
			}
			ref.expr = expr
		}
	}
	for _, d := range sm.Datasets {
		cur := ds[d.Name]
		for _, mt := range d.Metrics {
			ref, ok := cur.metrics[mt.Name]
			if !ok {
				continue
			}
			sql, named, err := osiResolve(path, ds, d.Name, ref, false)
			if err != nil {
				return err
			}
			syn, ctx, err := osiSynonyms(mt.AIContext)
			if err != nil {
				return osiError(path, ref.at+".ai_context", "%v", err)
			}
			m := Metric{Name: mt.Name, Description: withContext(mt.Description, ctx), Synonyms: syn, Model: &l.Models[cur.model], SQL: sql}
			if err := l.osiOthers(path, ds, &m, ref, named); err != nil {
				return err
			}
			l.Metrics = append(l.Metrics, m)
		}
	}
	for i, mt := range sm.Metrics {
		mat := fmt.Sprintf("%s.metrics[%d]", at, i)
		if err := osiCheckMetric(path, mat, mt); err != nil {
			return err
		}
		expr, ok, err := osiSQL(mt.Expression)
		if err != nil {
			return osiError(path, mat+".expression", "%v (metric %s)", err, mt.Name)
		}
		if !ok {
			l.Dropped = append(l.Dropped, "metric "+mt.Name+": no ANSI_SQL expression")
			continue
		}
		syn, ctx, err := osiSynonyms(mt.AIContext)
		if err != nil {
			return osiError(path, mat+".ai_context", "%v", err)
		}
		ref := &osiMetricRef{at: mat, expr: expr}
		sql, named, err := osiResolve(path, ds, "", ref, false)
		if err != nil {
			return err
		}
		m := Metric{Name: mt.Name, Description: withContext(mt.Description, ctx), Synonyms: syn, SQL: sql}
		// Scoped to the first dataset it names: shown to roles that may
		// read that table (none named: to everyone), and each other one.
		if len(named) > 0 {
			m.Model = &l.Models[ds[named[0]].model]
		}
		if err := l.osiOthers(path, ds, &m, ref, named); err != nil {
			return err
		}
		l.Metrics = append(l.Metrics, m)
	}
	l.linkMetrics()
	return nil
}

// osiOthers makes m, which read the datasets named (its own first), a
// metric over their tables joined when it names more than one: its other
// models, and its SQL with every plain-column field written table.column.
func (l *Layer) osiOthers(path string, ds map[string]*osiDS, m *Metric, ref *osiMetricRef, named []string) error {
	if len(named) < 2 {
		return nil
	}
	for _, n := range named[1:] {
		m.Others = append(m.Others, &l.Models[ds[n].model])
	}
	sql, _, err := osiResolve(path, ds, "", ref, true)
	m.SQL = sql
	return err
}

func osiCheckMetric(path, at string, mt osiMetric) error {
	if strings.TrimSpace(mt.Name) == "" {
		return osiError(path, at+".name", "missing")
	}
	if len(mt.Expression.Dialects) == 0 {
		return osiError(path, at+".expression", "missing (metric %s)", mt.Name)
	}
	return nil
}

// osiColumn is the column a relationship names: a field's column where a
// field of that name is a plain column, else the name itself.
func osiColumn(d *osiDS, name string) string {
	if e, ok := d.fields[name]; ok && plainColumn.MatchString(e) {
		return e
	}
	return foldIdent(name)
}

// osiSQL is an expression's ANSI_SQL form (a dialect left out is
// ANSI_SQL); ok is false when it has only other dialects.
func osiSQL(e osiExpression) (sql string, ok bool, err error) {
	if len(e.Dialects) == 0 {
		return "", false, fmt.Errorf("missing")
	}
	for _, d := range e.Dialects {
		if d.Dialect == "" || strings.EqualFold(d.Dialect, "ANSI_SQL") {
			s := strings.TrimSpace(d.Expression)
			if s == "" {
				return "", false, fmt.Errorf("empty ANSI_SQL expression")
			}
			if plainColumn.MatchString(s) {
				s = foldIdent(s)
			}
			return s, true, nil
		}
	}
	return "", false, nil
}

// foldIdent is an unquoted identifier as PostgreSQL reads it (OSI files
// written for Snowflake name columns in upper case).
func foldIdent(s string) string { return strings.ToLower(s) }

// osiSource splits a dataset's source: "table" (taken to be in public),
// "schema.table" or "database.schema.table" (the database is not read:
// the layer applies to each database nlproxy serves, like a dbt one).
// Unquoted names fold to lower case; a source with spaces or parentheses
// is a query.
func osiSource(src string) (schema, table string, query bool, err error) {
	var parts []string
	var cur strings.Builder
	quoted, wasQuoted := false, false
	s := strings.TrimSpace(src)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && quoted && i+1 < len(s) && s[i+1] == '"':
			cur.WriteByte('"')
			i++
		case c == '"':
			quoted, wasQuoted = !quoted, true
		case quoted:
			cur.WriteByte(c)
		case c == '.':
			parts = append(parts, cur.String())
			cur.Reset()
			wasQuoted = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(':
			return "", "", true, nil
		default:
			if !wasQuoted && c >= 'A' && c <= 'Z' { // ASCII only: UTF-8 bytes stay as they are
				c += 'a' - 'A'
			}
			cur.WriteByte(c)
		}
	}
	if quoted {
		return "", "", false, fmt.Errorf("unterminated quote in %q", src)
	}
	parts = append(parts, cur.String())
	for _, p := range parts {
		if p == "" {
			return "", "", false, fmt.Errorf("empty name in %q", src)
		}
	}
	switch len(parts) {
	case 1:
		return "public", parts[0], false, nil
	case 2:
		return parts[0], parts[1], false, nil
	case 3:
		return parts[1], parts[2], false, nil
	}
	return "", "", false, fmt.Errorf("%q is not [database.]schema.table or a query", src)
}

// osiSynonyms reads ai_context: a mapping's synonyms; its instructions, or
// a plain string, are context for the description (the second result).
func osiSynonyms(n yaml.Node) ([]string, string, error) {
	switch n.Kind {
	case 0:
		return nil, "", nil
	case yaml.ScalarNode:
		return nil, strings.TrimSpace(n.Value), nil
	case yaml.MappingNode:
		var c struct {
			Synonyms     []string `yaml:"synonyms"`
			Instructions string   `yaml:"instructions"`
		}
		if err := n.Decode(&c); err != nil {
			return nil, "", fmt.Errorf("line %d: %v", n.Line, err)
		}
		return c.Synonyms, strings.TrimSpace(c.Instructions), nil
	}
	return nil, "", fmt.Errorf("line %d: a string or a mapping (synonyms, instructions), not a list", n.Line)
}

// withContext adds ai_context's text to a description.
func withContext(desc, ctx string) string {
	if ctx == "" {
		return desc
	}
	if desc == "" {
		return ctx
	}
	return strings.TrimRight(desc, ".") + ". " + ctx
}

// osiResolve writes a metric's SQL over tables: "dataset.field" becomes
// the field's expression and "dataset.metric" the metric's SQL. In a
// dataset-scoped metric (home set) its own fields stay unqualified, as
// dbt's measures are; in a model-scoped one a plain-column field is
// written table.column. first is the first dataset it names.
func osiResolve(path string, ds map[string]*osiDS, home string, ref *osiMetricRef, qualify bool) (sql string, named []string, err error) {
	if ref.done && !qualify {
		return ref.sql, ref.named, nil
	}
	if ref.busy {
		return "", nil, osiError(path, ref.at+".expression", "the metric refers to itself")
	}
	ref.busy = true
	defer func() { ref.busy = false }()
	if home != "" {
		named = []string{home}
	}
	add := func(ns ...string) {
		for _, n := range ns {
			if !slices.Contains(named, n) {
				named = append(named, n)
			}
		}
	}
	var b strings.Builder
	s := ref.expr
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\'' || c == '"' { // literals and quoted names stay as written
			j := i + 1
			for j < len(s) && s[j] != c {
				j++
			}
			j = min(j+1, len(s))
			b.WriteString(s[i:j])
			i = j
			continue
		}
		if !isIdentStart(c) || (i > 0 && (isIdentPart(s[i-1]) || s[i-1] == '.')) {
			b.WriteByte(c)
			i++
			continue
		}
		j := i
		for j < len(s) && isIdentPart(s[j]) {
			j++
		}
		a := s[i:j]
		d := ds[a]
		if d == nil || j >= len(s) || s[j] != '.' || j+1 >= len(s) || !isIdentStart(s[j+1]) {
			// Over several tables, a bare field of the metric's own
			// dataset over the column of its name (COUNT(order_id)) is written
			// table.column too; a call or a qualified name stays.
			if e, ok := ds[home].fieldOf(a); ok && qualify && e == a && (j >= len(s) || s[j] != '.' && s[j] != '(') {
				b.WriteString(modelTable(ds, home) + "." + e)
			} else {
				b.WriteString(a)
			}
			i = j
			continue
		}
		k := j + 1
		for k < len(s) && isIdentPart(s[k]) {
			k++
		}
		name := s[j+1 : k]
		if (k < len(s) && s[k] == '.') || d.model < 0 {
			b.WriteString(s[i:k])
			i = k
			continue
		}
		add(a)
		if e, ok := d.fields[name]; ok {
			switch {
			case home == a && !qualify:
				b.WriteString(atomic(e))
			case plainColumn.MatchString(e):
				b.WriteString(modelTable(ds, a) + "." + e)
			default:
				b.WriteString(atomic(e))
			}
		} else if m, ok := d.metrics[name]; ok && m.expr != "" {
			ms, mn, err := osiResolve(path, ds, a, m, qualify)
			if err != nil {
				return "", nil, err
			}
			add(mn...)
			b.WriteString(atomic(ms))
		} else {
			b.WriteString(s[i:k])
		}
		i = k
	}
	sql = strings.TrimSpace(b.String())
	if !qualify {
		ref.sql, ref.named, ref.done = sql, named, true
	}
	return sql, named, nil
}

// fieldOf is the expression of the dataset's field called name; false
// for a nil dataset (no home) or no such field.
func (d *osiDS) fieldOf(name string) (string, bool) {
	if d == nil {
		return "", false
	}
	e, ok := d.fields[name]
	return e, ok
}

// modelTable is the table of dataset a as SQL names it.
func modelTable(ds map[string]*osiDS, a string) string {
	t := ds[a].table
	if lowerIdent.MatchString(t) {
		return t
	}
	return `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
}

var lowerIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentPart(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// atomic parenthesises an expression unless it is one name or one call.
func atomic(e string) string {
	if plainColumn.MatchString(e) {
		return e
	}
	open := strings.IndexByte(e, '(')
	if open > 0 && plainColumn.MatchString(strings.TrimSpace(e[:open])) && strings.HasSuffix(e, ")") {
		depth := 0
		for i := open; i < len(e); i++ {
			switch e[i] {
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 && i != len(e)-1 {
					return "(" + e + ")"
				}
			}
		}
		if depth == 0 {
			return e
		}
	}
	return "(" + e + ")"
}
