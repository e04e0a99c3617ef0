package llm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestExtractSQL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"bare", "SELECT 1", "SELECT 1"},
		{"trailing semicolon and space", "  select * from t;  \n", "select * from t"},
		{"sql fence with prose", "Here is the query:\n```sql\nSELECT name\nFROM users\nWHERE id = 1;\n```\nThis returns the name.", "SELECT name\nFROM users\nWHERE id = 1"},
		{"uppercase SQL fence", "```SQL\nSELECT 2;\n```", "SELECT 2"},
		{"postgresql fence", "```postgresql\nSELECT 3\n```", "SELECT 3"},
		{"untagged fence", "```\nSELECT 4\n```", "SELECT 4"},
		{"last of several fences wins (self-correction)", "```sql\nSELECT wrong FROM t;\n```\nWait, that is wrong. Corrected:\n```sql\nSELECT right FROM t;\n```", "SELECT right FROM t"},
		{"schema echo before answer", "Given:\n```sql\nCREATE TABLE t (a int);\n```\nAnswer:\n```sql\nSELECT a FROM t;\n```", "SELECT a FROM t"},
		{"last fence has no statement, earlier one used", "```sql\nSELECT a FROM t;\n```\n```sql\n-- nothing here\n```", "SELECT a FROM t"},
		{"sql fence preferred over untagged", "```sql\nSELECT a FROM t\n```\n```\nSELECT b FROM u\n```", "SELECT a FROM t"},
		{"python fence ignored", "```python\nprint('SELECT x')\n```\nSELECT y FROM z;", "SELECT y FROM z"},
		{"inline fence", "```sql SELECT 5 FROM t```", "SELECT 5 FROM t"},
		{"unterminated fence (cut off)", "```sql\nSELECT a,\n  b\nFROM t", "SELECT a,\n  b\nFROM t"},
		{"think block", "<think>\nThe user wants SELECT secrets; let me think.\n</think>\n```sql\nSELECT count(*) FROM orders;\n```", "SELECT count(*) FROM orders"},
		{"THINK uppercase", "<THINK>SELECT nope</THINK>SELECT yes FROM t", "SELECT yes FROM t"},
		{"orphan closing think", "Okay, SELECT x maybe...\n</think>\n\nSELECT id FROM t;", "SELECT id FROM t"},
		{"think then tags", "<think>hmm</think><sql>SELECT a FROM b</sql>", "SELECT a FROM b"},
		{"sql tag unterminated", "<sql>\nSELECT a FROM b;", "SELECT a FROM b"},
		{"leading comment in fence", "```sql\n-- count users\nSELECT count(*) FROM users;\n```", "SELECT count(*) FROM users"},
		{"with cte", "```sql\nWITH x AS (SELECT 1 AS a)\nSELECT a FROM x;\n```", "WITH x AS (SELECT 1 AS a)\nSELECT a FROM x"},
		{"with recursive lowercase in prose", "answer:\nwith recursive r(n) as (select 1 union all select n+1 from r where n < 3) select * from r", "with recursive r(n) as (select 1 union all select n+1 from r where n < 3) select * from r"},
		{"semicolon inside string literal", "SELECT 'a;b' AS x FROM t; SELECT 2", "SELECT 'a;b' AS x FROM t"},
		{"escaped quote and quoted ident", `SELECT 'it''s; ok', "we;ird" FROM t;`, `SELECT 'it''s; ok', "we;ird" FROM t`},
		{"dollar quote", "SELECT $q$a;b$q$ FROM t; junk", "SELECT $q$a;b$q$ FROM t"},
		{"comment with semicolon", "SELECT a -- why; not\nFROM t;", "SELECT a -- why; not\nFROM t"},
		{"block comment with semicolon", "SELECT /* ; */ a FROM t;", "SELECT /* ; */ a FROM t"},
		{"SQL: prefix", "SQL: SELECT a FROM t", "SELECT a FROM t"},
		{"SQLQuery prefix and trailing prose after blank line", "SQLQuery: SELECT a FROM t\n\nThis query lists a.", "SELECT a FROM t"},
		{"inline backtick", "The query is `SELECT count(*) FROM t` which counts rows.", "SELECT count(*) FROM t"},
		{"title-case prose skipped", "Select the users table first.\nWith that in mind:\nSELECT * FROM users;", "SELECT * FROM users"},
		{"prose With is not a CTE", "With this schema the answer is:\nSELECT 1 FROM t", "SELECT 1 FROM t"},
		{"parenthesized union", "```sql\n(SELECT a FROM t) UNION (SELECT a FROM u);\n```", "(SELECT a FROM t) UNION (SELECT a FROM u)"},
		{"json answer", `{"sql": "SELECT a FROM t;", "explanation": "x"}`, "SELECT a FROM t"},
		{"json fenced answer", "```json\n{\"query\": \"SELECT 1 FROM t\"}\n```", "SELECT 1 FROM t"},
		{"markdown quote", "> SELECT a FROM t", "SELECT a FROM t"},
		{"upper-case keyword preferred in prose", "Note: select statements only.\nSELECT a FROM t", "SELECT a FROM t"},
		{"lower-case when nothing else", "here:\nselect a from t", "select a from t"},
		{"CRLF", "```sql\r\nSELECT a\r\nFROM t;\r\n```\r\n", "SELECT a\r\nFROM t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExtractSQL(tt.in)
			if err != nil {
				t.Fatalf("ExtractSQL(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ExtractSQL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExtractSQLRejects(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"only whitespace", "  \n\t"},
		{"only thinking", "<think>SELECT 1 FROM t</think>"},
		{"unterminated thinking", "<think>I will write SELECT 1 FROM t"},
		{"prose only", "I cannot answer that question with the given schema."},
		{"title-case prose", "Select a table and With care."},
		{"refusal in fence", "```\nI don't know\n```"},
		{"bare keyword", "SELECT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExtractSQL(tt.in)
			if err == nil {
				t.Fatalf("ExtractSQL(%q) = %q, want error", tt.in, got)
			}
			if !errors.Is(err, ErrBadOutput) {
				t.Fatalf("error %v is not ErrBadOutput", err)
			}
		})
	}
}

// A write in a SQL fence is passed on, so the guard rejects it with a reason
// (and the fixer is told why) rather than the ask failing as "no SQL".
func TestExtractSQLPassesNonQueryFenceToGuard(t *testing.T) {
	for in, want := range map[string]string{
		"```sql\nDELETE FROM t;\n```":                  "DELETE FROM t",
		"Here:\n```sql\nDROP TABLE orders\n```\nDone.": "DROP TABLE orders",
	} {
		got, err := ExtractSQL(in)
		if err != nil || got != want {
			t.Errorf("ExtractSQL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestStripThink(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a<think>x</think>b", "ab"},
		{"<think>x</think>a<thinking>y</thinking>b", "ab"},
		{"a<think>never closed", "a"},
		{"pre</think>post", "post"},
		{"< think >x</ think >y", "y"},
		{"<reasoning>r</reasoning>\n ok ", "ok"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := StripThink(tt.in); got != tt.want {
			t.Errorf("StripThink(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

type keywords struct {
	Keywords []string `json:"keywords"`
	Tables   []string `json:"tables,omitempty"`
	Ok       bool     `json:"ok"`
}

func TestExtractJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want keywords
	}{
		{"clean", `{"keywords":["a","b"]}`, keywords{Keywords: []string{"a", "b"}}},
		{"prose around", "Sure! Here you go:\n{\"keywords\": [\"x\"]}\nHope this helps.", keywords{Keywords: []string{"x"}}},
		{"json fence", "```json\n{\"keywords\": [\"y\"]}\n```", keywords{Keywords: []string{"y"}}},
		{"last json fence wins", "```json\n{\"keywords\": [\"draft\"]}\n```\nBetter:\n```json\n{\"keywords\": [\"final\"]}\n```", keywords{Keywords: []string{"final"}}},
		{"think with braces", "<think>maybe {\"keywords\": [\"no\"]}</think>{\"keywords\": [\"yes\"]}", keywords{Keywords: []string{"yes"}}},
		{"trailing commas", "{\"keywords\": [\"a\", \"b\",], \"tables\": [\"t\",],}", keywords{Keywords: []string{"a", "b"}, Tables: []string{"t"}}},
		{"line comments", "{\n  // the words\n  \"keywords\": [\"a\"], // done\n}", keywords{Keywords: []string{"a"}}},
		{"block comment", "{/* c */\"keywords\": [\"a\"]}", keywords{Keywords: []string{"a"}}},
		{"python literals", "{\"keywords\": [], \"ok\": True, \"tables\": None}", keywords{Keywords: []string{}, Ok: true}},
		{"braces inside strings", `{"keywords": ["a}b", "c{", "d\"]"]}`, keywords{Keywords: []string{"a}b", "c{", `d"]`}}},
		{"comment markers inside strings", `{"keywords": ["http://x//y", "/*z*/"]}`, keywords{Keywords: []string{"http://x//y", "/*z*/"}}},
		{"bracket prose before object", "Keywords [see below]: {\"keywords\": [\"k\"]}", keywords{Keywords: []string{"k"}}},
		{"true inside word untouched", `{"keywords": ["Trueblood"]}`, keywords{Keywords: []string{"Trueblood"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got keywords
			if err := ExtractJSON(tt.in, &got); err != nil {
				t.Fatalf("ExtractJSON(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ExtractJSON(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestExtractJSONArray(t *testing.T) {
	var got []string
	if err := ExtractJSON("The columns are:\n```\n[\"a\", \"b\",]\n```", &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("got %v", got)
	}
}

func TestExtractJSONRejects(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no json", "I am unable to comply."},
		{"truncated", `{"keywords": ["a", "b"`},
		{"only in thinking", `<think>{"keywords": ["a"]}</think>no answer`},
		{"wrong shape", `["just", "an", "array"]`},
		{"single quotes", `{'keywords': ['a']}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got keywords
			err := ExtractJSON(tt.in, &got)
			if err == nil {
				t.Fatalf("ExtractJSON(%q) = %+v, want error", tt.in, got)
			}
			if !errors.Is(err, ErrBadOutput) {
				t.Fatalf("error %v is not ErrBadOutput", err)
			}
			if !strings.Contains(err.Error(), "output:") {
				t.Fatalf("error %q does not quote the output", err)
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "http://127.0.0.1:11434"},
		{"localhost", "http://localhost:11434"},
		{"example.com:1234", "http://example.com:1234"},
		{":5000", "http://127.0.0.1:5000"},
		{"0.0.0.0", "http://127.0.0.1:11434"},
		{"0.0.0.0:11434", "http://127.0.0.1:11434"},
		{"[::]:11434", "http://[::1]:11434"},
		{"[::1]", "http://[::1]:11434"},
		{"http://example.com", "http://example.com:80"},
		{"https://example.com", "https://example.com:443"},
		{"http://10.0.0.5:8080/ollama", "http://10.0.0.5:8080/ollama"},
		{"  http://h:1  ", "http://h:1"},
	}
	for _, tt := range tests {
		u, err := ParseHost(tt.in)
		if err != nil {
			t.Errorf("ParseHost(%q): %v", tt.in, err)
			continue
		}
		if u.String() != tt.want {
			t.Errorf("ParseHost(%q) = %q, want %q", tt.in, u, tt.want)
		}
	}
	for _, bad := range []string{"ftp://h:1", "h:notaport", "h:70000"} {
		if u, err := ParseHost(bad); err == nil {
			t.Errorf("ParseHost(%q) = %v, want error", bad, u)
		}
	}
}

func TestNormalizeModel(t *testing.T) {
	tests := []struct{ in, want string }{
		{"llama3", "llama3:latest"},
		{"qwen2.5:3b", "qwen2.5:3b"},
		{"registry:5000/ns/m", "registry:5000/ns/m:latest"},
		{"registry:5000/ns/m:q4", "registry:5000/ns/m:q4"},
	}
	for _, tt := range tests {
		if got := NormalizeModel(tt.in); got != tt.want {
			t.Errorf("NormalizeModel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
