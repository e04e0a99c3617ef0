// Package semantic imports a team's semantic layer: the
// semantic_manifest.json dbt writes (`dbt parse`, MetricFlow semantic
// models and metrics) or an OSI (Open Semantic Interchange, Apache Ossie)
// YAML file, both read into one Layer. Semantic models name tables; their dimensions and
// measures describe columns (often better than the columns' own names:
// amt2 is "order_total"); entities say how tables join; metrics are the
// team's definitions, with the SQL expression that computes them. The
// catalog indexes what it reads as description and glossary documents, so
// linking and generation see it like column comments and glossary terms.
package semantic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/nlproxy/nlproxy/catalog/descindex"
)

// Layer is an imported semantic layer.
type Layer struct {
	Models  []Model
	Metrics []Metric
	// Dropped names what the file defines but the import could not use
	// (an OSI dataset over a query, an expression in no SQL dialect
	// nlproxy reads), for the operator's log.
	Dropped []string
}

// Model is a semantic model over one table.
type Model struct {
	Name, Description string
	Synonyms          []string // other names people use for it (OSI ai_context)
	Schema, Table     string   // the relation it reads (dbt's node_relation, OSI's source)
	Entities          []Entity
	Dimensions        []Field
	Measures          []Measure
}

// Entity is a join key: primary in the model it identifies, foreign in
// the models that refer to it.
type Entity struct {
	Name, Type, Expr string
}

// Field is a dimension: a name, a description and the SQL expression
// (a column name when plain).
type Field struct {
	Name, Description, Expr string
	Synonyms                []string
}

// Measure is an aggregation of an expression.
type Measure struct {
	Field
	Agg string
}

// Metric is a team's definition: its name, label, description and the SQL
// expression computing it over its model's table, or over its models'
// tables joined (a ratio of two models' measures, a derived metric, an OSI
// metric naming two datasets), where it writes each column table.column.
type Metric struct {
	Name, Label, Description string
	Synonyms                 []string
	Model                    *Model // the model of its (first) measure or dataset
	// Others are the other models its SQL reads, in the order it names
	// them; Joins the join path from the entities that links them all to
	// Model (set by the reader; empty when the entities link none).
	Others []*Model
	Joins  []Join
	SQL    string
}

// Join is a join path two models' entities give: From (a foreign entity's
// column) equals To (the primary entity's column), both "schema.table.column".
type Join struct {
	Entity   string
	From, To string
}

// manifest is the part of dbt's semantic_manifest.json read here.
type manifest struct {
	SemanticModels []struct {
		Name         string `json:"name"`
		Description  string `json:"description"`
		NodeRelation struct {
			Alias      string `json:"alias"`
			SchemaName string `json:"schema_name"`
		} `json:"node_relation"`
		Entities []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Expr string `json:"expr"`
		} `json:"entities"`
		Dimensions []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Expr        string `json:"expr"`
		} `json:"dimensions"`
		Measures []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Expr        string `json:"expr"`
			Agg         string `json:"agg"`
		} `json:"measures"`
	} `json:"semantic_models"`
	Metrics []struct {
		Name        string `json:"name"`
		Label       string `json:"label"`
		Description string `json:"description"`
		Type        string `json:"type"`
		TypeParams  struct {
			Measure *struct {
				Name string `json:"name"`
			} `json:"measure"`
			Numerator *struct {
				Name string `json:"name"`
			} `json:"numerator"`
			Denominator *struct {
				Name string `json:"name"`
			} `json:"denominator"`
			Expr    string `json:"expr"`
			Metrics []struct {
				Name  string `json:"name"`
				Alias string `json:"alias"`
			} `json:"metrics"`
		} `json:"type_params"`
	} `json:"metrics"`
}

// Read reads a semantic layer file: dbt's semantic_manifest.json (a .json
// file, or one that starts with "{") or an OSI YAML file (anything else).
func Read(path string) (*Layer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(path), ".json") || bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return parseDBT(path, b)
	}
	return parseOSI(path, b)
}

// ReadDBT reads a semantic_manifest.json.
func ReadDBT(path string) (*Layer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseDBT(path, b)
}

func parseDBT(path string, b []byte) (*Layer, error) {
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("semantic model %s: %w", path, err)
	}
	if len(m.SemanticModels) == 0 {
		return nil, fmt.Errorf("semantic model %s: no semantic_models (is it dbt's target/semantic_manifest.json?)", path)
	}
	l := &Layer{}
	measures := map[string]struct {
		model *Model
		m     Measure
	}{}
	for _, sm := range m.SemanticModels {
		md := Model{Name: sm.Name, Description: sm.Description, Schema: sm.NodeRelation.SchemaName, Table: sm.NodeRelation.Alias}
		if md.Table == "" {
			return nil, fmt.Errorf("semantic model %s: %s has no relation", path, sm.Name)
		}
		for _, e := range sm.Entities {
			md.Entities = append(md.Entities, Entity{Name: e.Name, Type: e.Type, Expr: orName(e.Expr, e.Name)})
		}
		for _, d := range sm.Dimensions {
			md.Dimensions = append(md.Dimensions, Field{Name: d.Name, Description: d.Description, Expr: orName(d.Expr, d.Name)})
		}
		for _, ms := range sm.Measures {
			md.Measures = append(md.Measures, Measure{Field: Field{Name: ms.Name, Description: ms.Description, Expr: orName(ms.Expr, ms.Name)}, Agg: ms.Agg})
		}
		l.Models = append(l.Models, md)
	}
	for i := range l.Models {
		for _, ms := range l.Models[i].Measures {
			measures[ms.Name] = struct {
				model *Model
				m     Measure
			}{&l.Models[i], ms}
		}
	}
	// Each metric's SQL over its own model's table (columns as written) and
	// qualified (table.column), for a metric over several models.
	sqlOf, qualOf := map[string]string{}, map[string]string{}
	modelsOf := map[string][]*Model{}
	for pass := 0; pass < 3; pass++ { // ratio and derived metrics refer to metrics read before or after them
		for _, mt := range m.Metrics {
			if _, done := sqlOf[mt.Name]; done {
				continue
			}
			var sql, qual string
			var models []*Model
			tp := mt.TypeParams
			switch {
			case tp.Measure != nil:
				if ms, ok := measures[tp.Measure.Name]; ok {
					sql, qual, models = aggregate(ms.m), aggregate(qualified(ms.m, ms.model)), []*Model{ms.model}
				}
			case tp.Numerator != nil && tp.Denominator != nil:
				n, d := tp.Numerator.Name, tp.Denominator.Name
				if sqlOf[n] != "" && sqlOf[d] != "" {
					sql, qual = sqlOf[n]+" / NULLIF("+sqlOf[d]+", 0)", qualOf[n]+" / NULLIF("+qualOf[d]+", 0)"
					models = union(modelsOf[n], modelsOf[d])
				}
			case strings.EqualFold(mt.Type, "derived") && strings.TrimSpace(tp.Expr) != "" && len(tp.Metrics) > 0:
				plain, quals := map[string]string{}, map[string]string{}
				ok := true
				for _, in := range tp.Metrics {
					if sqlOf[in.Name] == "" {
						ok = false
						break
					}
					name := orName(in.Alias, in.Name)
					plain[name], quals[name] = sqlOf[in.Name], qualOf[in.Name]
					models = union(models, modelsOf[in.Name])
				}
				if ok {
					sql, qual = substitute(tp.Expr, plain), substitute(tp.Expr, quals)
				}
			}
			if sql == "" {
				continue
			}
			sqlOf[mt.Name], qualOf[mt.Name], modelsOf[mt.Name] = sql, qual, models
			mtr := Metric{Name: mt.Name, Label: mt.Label, Description: mt.Description, Model: models[0], SQL: sql}
			if len(models) > 1 {
				mtr.Others, mtr.SQL = models[1:], qual
			}
			l.Metrics = append(l.Metrics, mtr)
		}
	}
	l.linkMetrics()
	return l, nil
}

// qualified is the measure with its expression written table.column when
// it is a plain column (an expression stays as written).
func qualified(ms Measure, m *Model) Measure {
	if plainColumn.MatchString(ms.Expr) {
		ms.Expr = sqlName(m.Schema+"."+m.Table) + "." + ms.Expr
	}
	return ms
}

// union is a's models then b's not in a.
func union(a, b []*Model) []*Model {
	out := append([]*Model(nil), a...)
	for _, m := range b {
		if !slices.ContainsFunc(out, func(x *Model) bool { return sameTable(x, m) }) {
			out = append(out, m)
		}
	}
	return out
}

func sameTable(a, b *Model) bool { return a.Schema == b.Schema && a.Table == b.Table }

// identifier is a name in a derived metric's expression.
var identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// substitute writes a derived metric's expression with each input metric
// (by name or alias) replaced by its SQL.
func substitute(expr string, sqlOf map[string]string) string {
	return strings.TrimSpace(identifier.ReplaceAllStringFunc(expr, func(w string) string {
		if sql, ok := sqlOf[w]; ok {
			return atomic(sql)
		}
		return w
	}))
}

// linkMetrics sets the join path of each metric over several models: the
// shortest chain of the entities' joins from its model to each other one.
// A model no join reaches keeps the metric over its tables, unlinked.
func (l *Layer) linkMetrics() {
	joins := l.Joins()
	tableOf := func(col string) string { return col[:strings.LastIndexByte(col, '.')] }
	for i := range l.Metrics {
		mt := &l.Metrics[i]
		mt.Joins = nil
		if mt.Model == nil || len(mt.Others) == 0 {
			continue
		}
		from := mt.Model.Schema + "." + mt.Model.Table
		// Breadth first from the metric's model over the join graph.
		via := map[string]int{from: -1}
		queue := []string{from}
		for len(queue) > 0 {
			t := queue[0]
			queue = queue[1:]
			for k, j := range joins {
				a, b := tableOf(j.From), tableOf(j.To)
				if b == t {
					a, b = b, a
				}
				if a != t {
					continue
				}
				if _, seen := via[b]; !seen {
					via[b] = k
					queue = append(queue, b)
				}
			}
		}
		for _, o := range mt.Others {
			var path []Join
			for t := o.Schema + "." + o.Table; ; {
				k, ok := via[t]
				if !ok || k < 0 {
					if !ok {
						path = nil
					}
					break
				}
				j := joins[k]
				path = append(path, j)
				if tableOf(j.To) == t {
					t = tableOf(j.From)
				} else {
					t = tableOf(j.To)
				}
			}
			for _, j := range path {
				if !slices.Contains(mt.Joins, j) {
					mt.Joins = append(mt.Joins, j)
				}
			}
		}
	}
}

func orName(expr, name string) string {
	if strings.TrimSpace(expr) == "" {
		return name
	}
	return strings.TrimSpace(expr)
}

// aggregate is a measure's SQL: dbt's agg names as PostgreSQL writes them.
func aggregate(m Measure) string {
	switch strings.ToLower(m.Agg) {
	case "sum":
		return "SUM(" + m.Expr + ")"
	case "count":
		return "COUNT(" + m.Expr + ")"
	case "count_distinct":
		return "COUNT(DISTINCT " + m.Expr + ")"
	case "average":
		return "AVG(" + m.Expr + ")"
	case "min":
		return "MIN(" + m.Expr + ")"
	case "max":
		return "MAX(" + m.Expr + ")"
	case "sum_boolean":
		return "SUM(CASE WHEN " + m.Expr + " THEN 1 ELSE 0 END)"
	case "median":
		return "percentile_cont(0.5) WITHIN GROUP (ORDER BY " + m.Expr + ")"
	}
	return strings.ToUpper(m.Agg) + "(" + m.Expr + ")"
}

var plainColumn = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// words writes a semantic name as words ("order_total" → "order total"),
// the synonym people ask with.
func words(name string) string { return strings.ReplaceAll(name, "_", " ") }

// also writes synonyms into a description, where retrieval finds them.
func also(synonyms []string) string {
	if len(synonyms) == 0 {
		return ""
	}
	return " Also called: " + strings.Join(synonyms, ", ") + "."
}

// Docs are the layer as description-index documents: each model describes
// its table, each dimension and measure over a plain column describes the
// column under its semantic name (a synonym), each other one and each
// metric is a glossary term scoped to its table, with its SQL.
func (l *Layer) Docs() []descindex.Doc {
	var out []descindex.Doc
	for _, m := range l.Models {
		if m.Description != "" || len(m.Synonyms) > 0 {
			out = append(out, descindex.Doc{Kind: descindex.KindTable, Schema: m.Schema, Table: m.Table,
				Text: strings.TrimSpace(m.Description + " (semantic model " + words(m.Name) + ")" + also(m.Synonyms))})
		}
		field := func(f Field, what, sql string) {
			text := strings.TrimSpace(words(f.Name) + " (" + what + ")" + ": " + f.Description + also(f.Synonyms))
			if plainColumn.MatchString(f.Expr) {
				out = append(out, descindex.Doc{Kind: descindex.KindColumn, Schema: m.Schema, Table: m.Table, Column: f.Expr, Text: text})
				if sql == "" {
					return
				}
			}
			out = append(out, descindex.Doc{Kind: descindex.KindGlossary, Schema: m.Schema, Table: m.Table, Term: words(f.Name), Text: text, SQLHint: orName(sql, f.Expr)})
		}
		for _, d := range m.Dimensions {
			field(d, "dimension", "")
		}
		for _, ms := range m.Measures {
			field(ms.Field, "measure, "+ms.Agg, aggregate(ms))
		}
	}
	for _, mt := range l.Metrics {
		text := mt.Description
		if mt.Label != "" {
			text = mt.Label + ": " + text
		}
		d := descindex.Doc{Kind: descindex.KindGlossary, Term: words(mt.Name), SQLHint: mt.SQL,
			Text: strings.TrimSpace(text + also(mt.Synonyms) + over(mt))}
		if mt.Model != nil {
			d.Schema, d.Table = mt.Model.Schema, mt.Model.Table
		}
		for _, o := range mt.Others {
			d.Also = append(d.Also, o.Schema+"."+o.Table)
		}
		out = append(out, d)
	}
	return out
}

// over says which tables a metric over several models reads and how they
// join, for the prompt (and for linking, which finds the tables it names).
func over(mt Metric) string {
	if mt.Model == nil || len(mt.Others) == 0 {
		return ""
	}
	tables := []string{sqlName(mt.Model.Schema + "." + mt.Model.Table)}
	for _, o := range mt.Others {
		tables = append(tables, sqlName(o.Schema+"."+o.Table))
	}
	s := " Over " + strings.Join(tables, " and ")
	if len(mt.Joins) > 0 {
		var on []string
		for _, j := range mt.Joins {
			on = append(on, sqlName(j.From)+" = "+sqlName(j.To))
		}
		s += " joined on " + strings.Join(on, " and ")
	}
	return s + "."
}

// sqlName drops the public schema from a schema.table(.column) name.
func sqlName(n string) string { return strings.TrimPrefix(n, "public.") }

// Joins are the join paths the entities give: each foreign entity over a
// plain column, to the model whose primary entity of the same name is a
// plain column.
func (l *Layer) Joins() []Join {
	primary := map[string]string{}
	for _, m := range l.Models {
		for _, e := range m.Entities {
			if (e.Type == "primary" || e.Type == "unique" || e.Type == "natural") && plainColumn.MatchString(e.Expr) {
				primary[e.Name] = m.Schema + "." + m.Table + "." + e.Expr
			}
		}
	}
	var out []Join
	for _, m := range l.Models {
		for _, e := range m.Entities {
			to, ok := primary[e.Name]
			if e.Type != "foreign" || !ok || !plainColumn.MatchString(e.Expr) {
				continue
			}
			out = append(out, Join{Entity: e.Name, From: m.Schema + "." + m.Table + "." + e.Expr, To: to})
		}
	}
	return out
}
