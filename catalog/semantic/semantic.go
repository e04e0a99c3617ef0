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
// expression computing it over its model's table.
type Metric struct {
	Name, Label, Description string
	Synonyms                 []string
	Model                    *Model // the model of its (first) measure or dataset
	SQL                      string
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
			Expr string `json:"expr"`
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
	sqlOf := map[string]string{}
	modelOf := map[string]*Model{}
	for pass := 0; pass < 2; pass++ { // ratio metrics refer to metrics read before or after them
		for _, mt := range m.Metrics {
			if _, done := sqlOf[mt.Name]; done {
				continue
			}
			var sql string
			var model *Model
			switch {
			case mt.TypeParams.Measure != nil:
				if ms, ok := measures[mt.TypeParams.Measure.Name]; ok {
					sql, model = aggregate(ms.m), ms.model
				}
			case mt.TypeParams.Numerator != nil && mt.TypeParams.Denominator != nil:
				n, d := sqlOf[mt.TypeParams.Numerator.Name], sqlOf[mt.TypeParams.Denominator.Name]
				if n != "" && d != "" {
					sql, model = n+" / NULLIF("+d+", 0)", modelOf[mt.TypeParams.Numerator.Name]
				}
			}
			if sql == "" {
				continue
			}
			sqlOf[mt.Name], modelOf[mt.Name] = sql, model
			l.Metrics = append(l.Metrics, Metric{Name: mt.Name, Label: mt.Label, Description: mt.Description, Model: model, SQL: sql})
		}
	}
	return l, nil
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
			Text: strings.TrimSpace(text + also(mt.Synonyms))}
		if mt.Model != nil {
			d.Schema, d.Table = mt.Model.Schema, mt.Model.Table
		}
		out = append(out, d)
	}
	return out
}

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
