package engine

import (
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

func TestModelViewWithholdsData(t *testing.T) {
	city := "Springfield"
	rows := &pg.Rows{Columns: []string{"city"}, Values: [][]*string{{&city}}}
	rw := []memory.LiteralRewrite{{Table: "public.t", Column: "city", From: "springfeld", To: "Springfield", Kind: memory.RewriteValue}}
	castErr := &pg.Error{Code: pg.CodeInvalidTextRepresentation, Message: `invalid input syntax for type integer: "Springfield"`, Detail: `Key (city)=(Springfield)`}
	colErr := &pg.Error{Code: pg.CodeUndefinedColumn, Message: `column "citty" does not exist`}
	ex := []prompts.Example{{Question: "orders from Paris", SQL: `SELECT * FROM o WHERE city = 'Paris' AND state = 'Ohio'`}}
	vals := []prompts.ValueMatch{{Table: "t", Column: "city", Value: "Springfield"}}
	for _, tc := range []struct {
		data                           ModelData
		sample, values, rewritten, raw bool
	}{
		{ModelDataRows, true, true, true, true},
		{"", true, true, true, true},
		{ModelDataValues, false, true, true, false},
		{ModelDataSchema, false, false, false, false},
	} {
		t.Run(string(tc.data), func(t *testing.T) {
			v := modelView{tc.data}
			if got := v.sample(rows, 5) != nil; got != tc.sample {
				t.Errorf("sample shown %v, want %v", got, tc.sample)
			}
			if got := len(v.values(vals)) > 0; got != tc.values {
				t.Errorf("values shown %v, want %v", got, tc.values)
			}
			if got := v.renderOptions(nil).NoValues; got == tc.values {
				t.Errorf("render NoValues %v with values %v", got, tc.values)
			}
			sql := v.sql(`SELECT * FROM t WHERE city = 'Springfield'`, rw)
			if got := strings.Contains(sql, "Springfield"); got != tc.rewritten {
				t.Errorf("corrected literal shown %v, want %v: %s", got, tc.rewritten, sql)
			}
			e := v.execError(castErr, "SELECT city::int FROM t")
			if got := strings.Contains(e.Message+e.Detail, "Springfield"); got != tc.raw {
				t.Errorf("data in a server error shown %v, want %v: %+v", got, tc.raw, e)
			}
			if e := v.execError(colErr, "SELECT citty FROM t"); !strings.Contains(e.Message, `"citty"`) {
				t.Errorf("a name the SQL wrote was withheld: %s", e.Message)
			}
			exs := v.examples(ex)
			ohio := strings.Contains(exs[0].SQL, "'Ohio'")
			if ohio != tc.values || !strings.Contains(exs[0].SQL, "'Paris'") {
				t.Errorf("example SQL %s: literal not in its question shown %v, want %v; the question's literal must stay", exs[0].SQL, ohio, tc.values)
			}
		})
	}
}

func TestParseModelData(t *testing.T) {
	for in, want := range map[string]ModelData{"": ModelDataRows, "schema": ModelDataSchema, "VALUES": ModelDataValues, " rows ": ModelDataRows} {
		if got, err := ParseModelData(in); err != nil || got != want {
			t.Errorf("ParseModelData(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseModelData("none"); err == nil {
		t.Error("ParseModelData(none) accepted")
	}
}
