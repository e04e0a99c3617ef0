package verified

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestPlaceholdersAndBind(t *testing.T) {
	for _, tc := range []struct {
		sql    string
		names  []string
		values map[string]string
		want   string
		err    bool
	}{
		{sql: "SELECT * FROM t WHERE a = :city AND b::date > :day::date", names: []string{"city", "day"},
			values: map[string]string{"city": "O'Hare", "day": "2024-01-01"}, want: "SELECT * FROM t WHERE a = 'O''Hare' AND b::date > '2024-01-01'::date"},
		{sql: "SELECT ':city', \":city\" -- :city\n/* :city */ FROM t WHERE x = :city", names: []string{"city"},
			values: map[string]string{"city": "x"}, want: "SELECT ':city', \":city\" -- :city\n/* :city */ FROM t WHERE x = 'x'"},
		{sql: "SELECT arr[1:2] FROM t", names: nil, values: nil, want: "SELECT arr[1:2] FROM t"},
		{sql: "SELECT :a, :b", names: []string{"a", "b"}, values: map[string]string{"a": "1"}, err: true},
	} {
		if got := Placeholders(tc.sql); strings.Join(got, ",") != strings.Join(tc.names, ",") {
			t.Errorf("Placeholders(%q) = %q, want %q", tc.sql, got, tc.names)
		}
		got, err := Bind(tc.sql, tc.values)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("Bind(%q) = %q, %v; want %q (error %v)", tc.sql, got, err, tc.want, tc.err)
		}
	}
}

func TestCheck(t *testing.T) {
	ok := Entry{Name: "by_city", Database: "d", Question: "orders in {city}", Paraphrases: []string{"{city} orders"},
		SQL: "SELECT * FROM o WHERE city = :city", Params: []Param{{Name: "city", Column: "o.city"}}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(e *Entry){
		"bad name":              func(e *Entry) { e.Name = "By City" },
		"no database":           func(e *Entry) { e.Database = "" },
		"unused parameter":      func(e *Entry) { e.SQL = "SELECT * FROM o" },
		"undeclared parameter":  func(e *Entry) { e.SQL += " AND x = :other" },
		"paraphrase without it": func(e *Entry) { e.Paraphrases = []string{"orders"} },
		"no column":             func(e *Entry) { e.Params = []Param{{Name: "city"}} },
	} {
		e := ok
		e.Params = append([]Param(nil), ok.Params...)
		mutate(&e)
		if e.Check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if CheckAll([]Entry{ok, ok}) == nil {
		t.Error("a name twice in one database accepted")
	}
}

func TestRank(t *testing.T) {
	es := []Entry{
		{Name: "per_city", Database: "d", Question: "How many restaurants are there in each city?", Paraphrases: []string{"number of restaurants per city"}, SQL: "SELECT 1"},
		{Name: "food_in_city", Database: "d", Question: "How many {food} restaurants are there in {city}?", SQL: "SELECT :food, :city",
			Params: []Param{{Name: "food", Column: "restaurant.food_type"}, {Name: "city", Column: "restaurant.city_name"}}},
	}
	fill := func(q string) func(string) []Filled {
		return func(col string) []Filled {
			var out []Filled
			for _, v := range map[string][]string{"restaurant.food_type": {"Italian"}, "restaurant.city_name": {"Los Angeles", "Miami"}}[col] {
				if strings.Contains(strings.ToLower(q), strings.ToLower(v)) {
					out = append(out, Filled{Text: v, Value: v})
				}
			}
			return out
		}
	}
	for _, tc := range []struct {
		q      string
		answer string // entry that answers, "" none
	}{
		{"restaurant count per city", "per_city"},
		{"how many italian restaurants are there in Los Angeles", "food_in_city"},
		{"How many restaurants are there in Miami?", ""}, // a parameter unfilled
		{"What is the average rating of restaurants in each city?", ""},
		{"Which city has the most restaurants?", ""},
	} {
		ms := Rank(tc.q, es, fill(tc.q))
		got := ""
		if len(ms) > 0 && ms[0].Answers() {
			got = ms[0].Entry.Name
			if got == "food_in_city" && (ms[0].Values["city"] != "Los Angeles" || ms[0].Values["food"] != "Italian") {
				t.Errorf("%q: values %v", tc.q, ms[0].Values)
			}
		}
		if got != tc.answer {
			t.Errorf("%q answered by %q, want %q (ranked %+v)", tc.q, got, tc.answer, ms)
		}
	}
}

// TestRepositoryFile: the file the evaluation uses reads and checks.
func TestRepositoryFile(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "datasets", "verified", "sql-eval.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	es, err := Read(path)
	if err != nil || len(es) < 5 {
		t.Fatalf("%d entries, %v", len(es), err)
	}
}

// TestMerge: a store entry replaces the file's of the same database and
// name, one of another database is added, and a malformed one is left out.
func TestMerge(t *testing.T) {
	file := []Entry{
		{Name: "a", Database: "shop", Question: "file a", SQL: "SELECT 1"},
		{Name: "b", Database: "shop", Question: "file b", SQL: "SELECT 2"},
	}
	for _, tc := range []struct {
		name  string
		store []Entry
		want  []string // questions, in order
	}{
		{"none", nil, []string{"file a", "file b"}},
		{"store wins", []Entry{{Name: "b", Database: "shop", Question: "store b", SQL: "SELECT 3"}}, []string{"file a", "store b"}},
		{"other database", []Entry{{Name: "a", Database: "hr", Question: "hr a", SQL: "SELECT 4"}}, []string{"file a", "file b", "hr a"}},
		{"malformed", []Entry{{Name: "a", Database: "shop", Question: "store a"}}, []string{"file a", "file b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range Merge(file, tc.store) {
				got = append(got, e.Question)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Merge = %q, want %q", got, tc.want)
			}
		})
	}
}

// downStore is a store that cannot be reached.
type downStore struct{ Store }

func (downStore) Verified(context.Context, string) ([]Entry, error) {
	return nil, errors.New("store down")
}

// TestSharedStoreDown: when the store cannot be read, the file's entries
// still come back, with the error.
func TestSharedStoreDown(t *testing.T) {
	file := List{{Name: "a", Database: "shop", Question: "q", SQL: "SELECT 1"}, {Name: "b", Database: "hr", Question: "q", SQL: "SELECT 2"}}
	got, err := Shared{File: file, Store: downStore{}}.Verified(context.Background(), "shop")
	if err == nil || len(got) != 1 || got[0].Name != "a" {
		t.Errorf("Verified = %+v, %v; want the file's entry of shop and an error", got, err)
	}
}
