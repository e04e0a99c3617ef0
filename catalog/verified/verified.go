// Package verified holds an operator's verified queries: question→SQL
// entries a team trusts, each with paraphrases, named parameters filled
// from the question, and optional roles. When an ask matches an entry
// closely enough, the entry's SQL answers it (the engine binds the
// parameters, guards and runs it as the asker); a near miss is shown to
// the model as a strong example instead.
//
// Matching is lexical and deterministic: the question and each phrasing of
// an entry are reduced to content words (stop words dropped, a few
// synonyms folded, plurals cut), parameter values found in the question are
// replaced by the parameter's placeholder, and the Jaccard overlap decides.
// A match needs every parameter filled and the overlap at or above
// MatchScore; that threshold is set for precision: an ask that is not a
// rephrasing of the entry is answered by the model, never by the entry.
package verified

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"
)

// Entry is one verified query.
type Entry struct {
	Name     string `yaml:"name" json:"name"`
	Database string `yaml:"database" json:"database"`
	Question string `yaml:"question" json:"question"`
	// Paraphrases are other ways people ask it. A parameter appears in a
	// phrasing as {name}.
	Paraphrases []string `yaml:"paraphrases,omitempty" json:"paraphrases,omitempty"`
	// SQL names its parameters :name; each is bound as a string constant.
	SQL    string  `yaml:"sql" json:"sql"`
	Params []Param `yaml:"params,omitempty" json:"params,omitempty"`
	// Roles that may be answered by it (empty: every role that may read
	// its tables).
	Roles []string `yaml:"roles,omitempty" json:"roles,omitempty"`
}

// Param is a named parameter whose value comes from the question: a value
// stored in Column ("table.column" or "schema.table.column") that the
// question spells.
type Param struct {
	Name   string `yaml:"name" json:"name"`
	Column string `yaml:"column" json:"column"`
}

// Thresholds of Score.
const (
	// MatchScore: at or above, with every parameter filled, the entry
	// answers the ask.
	MatchScore = 0.8
	// NearScore: at or above, the entry is a strong example for the model.
	NearScore = 0.4
)

var paramName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Check reports what is wrong with an entry's form (not its SQL, which
// the guard judges against the database).
func (e Entry) Check() error {
	switch {
	case !paramName.MatchString(e.Name):
		return fmt.Errorf("verified query %q: the name must be lower-case letters, digits and _", e.Name)
	case e.Database == "":
		return fmt.Errorf("verified query %s: no database", e.Name)
	case strings.TrimSpace(e.Question) == "":
		return fmt.Errorf("verified query %s: no question", e.Name)
	case strings.TrimSpace(e.SQL) == "":
		return fmt.Errorf("verified query %s: no sql", e.Name)
	}
	used := Placeholders(e.SQL)
	for _, p := range e.Params {
		if !paramName.MatchString(p.Name) || p.Column == "" {
			return fmt.Errorf("verified query %s: parameter %q needs a lower-case name and a column", e.Name, p.Name)
		}
		if !slices.Contains(used, p.Name) {
			return fmt.Errorf("verified query %s: parameter %s is not used in its sql as :%s", e.Name, p.Name, p.Name)
		}
		for _, q := range append([]string{e.Question}, e.Paraphrases...) {
			if !strings.Contains(q, "{"+p.Name+"}") {
				return fmt.Errorf("verified query %s: %q does not place parameter %s as {%s}", e.Name, q, p.Name, p.Name)
			}
		}
	}
	for _, u := range used {
		if !slices.ContainsFunc(e.Params, func(p Param) bool { return p.Name == u }) {
			return fmt.Errorf("verified query %s: its sql uses :%s, which is not a parameter", e.Name, u)
		}
	}
	return nil
}

// Allowed reports whether role may be answered by the entry.
func (e Entry) Allowed(role string) bool { return len(e.Roles) == 0 || slices.Contains(e.Roles, role) }

// Read reads a YAML list of entries; every entry must pass Check and the
// names must be unique per database.
func Read(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var es []Entry
	if err := yaml.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("verified queries %s: %w", path, err)
	}
	if err := CheckAll(es); err != nil {
		return nil, fmt.Errorf("verified queries %s: %w", path, err)
	}
	return es, nil
}

// CheckAll checks every entry and that names are unique per database.
func CheckAll(es []Entry) error {
	seen := map[string]bool{}
	var errs []error
	for _, e := range es {
		if err := e.Check(); err != nil {
			errs = append(errs, err)
		}
		k := e.Database + "\x00" + e.Name
		if seen[k] {
			errs = append(errs, fmt.Errorf("verified query %s: twice in database %s", e.Name, e.Database))
		}
		seen[k] = true
	}
	return errors.Join(errs...)
}

// Write writes entries as the YAML Read reads.
func Write(path string, es []Entry) error {
	b, err := yaml.Marshal(es)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Placeholders are the :name parameters of sql, in order of first use,
// outside string constants, quoted identifiers, comments and :: casts.
func Placeholders(sql string) []string {
	var out []string
	scan(sql, func(name string, _, _ int) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	})
	return out
}

// Bind replaces each :name of sql by values[name] as a standard-conforming
// string constant; a placeholder without a value is an error. The result is
// for the guard to check and seal like any SQL.
func Bind(sql string, values map[string]string) (string, error) {
	var b strings.Builder
	last := 0
	var missing []string
	scan(sql, func(name string, start, end int) {
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return
		}
		b.WriteString(sql[last:start])
		b.WriteString("'" + strings.ReplaceAll(v, "'", "''") + "'")
		last = end
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("verified query: no value for %s", strings.Join(missing, ", "))
	}
	b.WriteString(sql[last:])
	return b.String(), nil
}

// scan calls f for every :name placeholder of sql with its byte span.
func scan(sql string, f func(name string, start, end int)) {
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(sql) {
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			i = j
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return
			}
			i += end + 3
		case c == ':' && i+1 < len(sql) && sql[i+1] == ':':
			i++
		case c == ':' && (i == 0 || sql[i-1] != ':'):
			j := i + 1
			for j < len(sql) && (sql[j] == '_' || sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			if j > i+1 && !(sql[i+1] >= '0' && sql[i+1] <= '9') {
				f(sql[i+1:j], i, j)
				i = j - 1
			}
		}
	}
}

// stop are words that say nothing of what is asked.
var stop = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "in": true, "on": true, "at": true, "to": true, "for": true,
	"is": true, "are": true, "was": true, "were": true, "be": true, "do": true, "does": true, "did": true,
	"what": true, "which": true, "who": true, "show": true, "me": true, "list": true, "give": true, "tell": true,
	"there": true, "please": true, "and": true, "with": true, "from": true, "i": true, "we": true,
	"our": true, "all": true, "get": true, "find": true, "return": true, "have": true, "has": true, "it": true,
	"that": true, "this": true, "those": true, "these": true, "their": true, "its": true, "as": true,
}

// synonyms fold words people use for the same thing.
var synonyms = map[string]string{
	"number": "count", "many": "count", "how": "", "amount": "count", "per": "each", "every": "each", "by": "each",
	"total": "sum", "average": "avg", "mean": "avg", "biggest": "most", "largest": "most", "highest": "most",
	"top": "most", "greatest": "most", "smallest": "least", "lowest": "least", "fewest": "least",
}

// Words are the content words of a phrasing, as matching compares them;
// "{name}" stays a placeholder word.
func Words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '{' && r != '}' && r != '_'
	}) {
		if strings.HasPrefix(w, "{") {
			out[w] = true
			continue
		}
		w = strings.Trim(w, "{}")
		if s, ok := synonyms[w]; ok {
			w = s
		}
		if w == "" || stop[w] {
			continue
		}
		if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
			w = strings.TrimSuffix(w, "s")
			if strings.HasSuffix(w, "ie") {
				w = strings.TrimSuffix(w, "ie") + "y"
			}
		}
		out[w] = true
	}
	return out
}

// Score is the Jaccard overlap of two word sets.
func Score(a, b map[string]bool) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	inter := 0
	for w := range a {
		if b[w] {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// Filled is a parameter value found in the question: the text as the
// question spells it and the value as stored.
type Filled struct {
	Text, Value string
}

// Match is how well an ask matches an entry.
type Match struct {
	Entry  Entry
	Score  float64           // best over the question and paraphrases
	Values map[string]string // parameter → stored value, for those filled
	// Phrasing is the entry's phrasing that matched best.
	Phrasing string
}

// Complete reports whether every parameter is filled.
func (m Match) Complete() bool { return len(m.Values) == len(m.Entry.Params) }

// Answers reports whether the match answers the ask.
func (m Match) Answers() bool { return m.Complete() && m.Score >= MatchScore }

// Rank scores question against each entry. fill gives, for a parameter's
// column, the values the question spells (found through the value index);
// the first is used. Matches are returned best first, those below
// NearScore left out.
func Rank(question string, es []Entry, fill func(column string) []Filled) []Match {
	var out []Match
	for _, e := range es {
		q := question
		values := map[string]string{}
		for _, p := range e.Params {
			fs := fill(p.Column)
			if len(fs) == 0 {
				continue
			}
			values[p.Name] = fs[0].Value
			q = replaceFold(q, fs[0].Text, " {"+p.Name+"} ")
		}
		qw := Words(q)
		m := Match{Entry: e, Values: values}
		for _, ph := range append([]string{e.Question}, e.Paraphrases...) {
			if s := Score(qw, Words(ph)); s > m.Score {
				m.Score, m.Phrasing = s, ph
			}
		}
		if m.Score >= NearScore {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b Match) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out
}

// replaceFold replaces the first case-insensitive occurrence of old in s.
func replaceFold(s, old, repl string) string {
	if old == "" || len(strings.ToLower(s)) != len(s) {
		return strings.Replace(s, old, repl, 1)
	}
	i := strings.Index(strings.ToLower(s), strings.ToLower(old))
	if i < 0 {
		return s
	}
	return s[:i] + repl + s[i+len(old):]
}

// List is a fixed set of entries (a file's), by database.
type List []Entry

// Verified returns the entries of database.
func (l List) Verified(_ context.Context, database string) ([]Entry, error) {
	var out []Entry
	for _, e := range l {
		if e.Database == database {
			out = append(out, e)
		}
	}
	return out, nil
}

// All returns every entry.
func (l List) All(context.Context) ([]Entry, error) { return l, nil }

// Store is where replicas share entries (catalog/store implements it).
type Store interface {
	// Verified returns the stored entries of database.
	Verified(ctx context.Context, database string) ([]Entry, error)
	// AllVerified returns every stored entry.
	AllVerified(ctx context.Context) ([]Entry, error)
	// PutVerified adds an entry or replaces the one of its name.
	PutVerified(ctx context.Context, e Entry) error
	// RemoveVerified removes an entry, reporting whether there was one.
	RemoveVerified(ctx context.Context, database, name string) (bool, error)
}

// Shared is the file's entries and the store's together. A store entry
// replaces the file's entry of the same database and name: the store is
// what `nlproxy verified add` writes while replicas run, so it is the
// newer word; the file is the baseline shipped with the deployment.
type Shared struct {
	File  List
	Store Store
}

// Verified returns the entries of database, the store's winning by name.
// When the store cannot be read it returns the file's entries with the
// error: an unreachable store costs the shared entries, not the file's.
func (s Shared) Verified(ctx context.Context, database string) ([]Entry, error) {
	file, _ := s.File.Verified(ctx, database)
	stored, err := s.Store.Verified(ctx, database)
	if err != nil {
		return file, err
	}
	return Merge(file, stored), nil
}

// All returns every entry, the store's winning by database and name.
func (s Shared) All(ctx context.Context) ([]Entry, error) {
	stored, err := s.Store.AllVerified(ctx)
	if err != nil {
		return nil, err
	}
	return Merge(s.File, stored), nil
}

// Merge returns base with each entry of over replacing the one of the same
// database and name (or added after them); entries that fail Check in over
// are left out, so a bad row in a shared store cannot answer an ask.
func Merge(base, over []Entry) []Entry {
	out := slices.Clone(base)
	for _, e := range over {
		if e.Check() != nil {
			continue
		}
		if i := slices.IndexFunc(out, func(x Entry) bool { return x.Database == e.Database && x.Name == e.Name }); i >= 0 {
			out[i] = e
		} else {
			out = append(out, e)
		}
	}
	return out
}
