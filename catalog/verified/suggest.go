package verified

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Candidate is a statement seen often, from which Suggest drafts an entry.
type Candidate struct {
	Database string
	// Question is a remembered ask's question; "" for a workload query.
	Question string
	// Text is the statement normalised: every literal replaced by $n, the
	// names it makes up neutral (workload.Analyze's Text).
	Text string
	// Values are the literals the original statement held, in $n order
	// (Values[0] is $1). They are used only to take the same values out of
	// Question, never shown.
	Values []string
	// Count is how often it was seen: 1 per remembered ask, the runs for a
	// workload query.
	Count int64
	// Role is who asked a remembered ask: the role the suggestion drafted
	// from it would be for; "" for a workload query.
	Role string
}

// Dropped is a statement Suggest left out because what it names does not
// resolve in the catalog (or not for the role that asked it), and why.
// Text is the normalised statement: names, no literal.
type Dropped struct {
	Database, Text, Role, Reason string
	Count                        int64
}

// Suggestion is a drafted entry and what it was drafted from.
type Suggestion struct {
	Entry Entry
	// Seen is the summed Count of the candidates behind it.
	Seen int64
	// Source is "asks", "workload" or both.
	Source string
}

// dollarParam is a $n placeholder of a normalised text.
var dollarParam = regexp.MustCompile(`\$([0-9]+)`)

// Suggest drafts entries from candidates: those of the same database and
// Text are one suggestion, kept when seen at least min times and not
// already an entry (same database and SQL). Every literal becomes a
// parameter :pN (so no data value of any role is carried: the operator
// names each parameter's column, or writes the value back, on review);
// the question is the most frequent remembered one with the statement's
// values replaced by {pN} and any other quoted text or number by {?}; a
// workload query has none, for the operator to write. Names are the
// candidates' own (normalised); best seen first.
//
// check, when not nil, says why a candidate's statement cannot be suggested
// for its role ("" when it can; Names.Check): such a candidate counts for
// nothing and is returned among the dropped, one per statement and role.
func Suggest(cs []Candidate, existing []Entry, min int64, check func(role, sql string) string) ([]Suggestion, []Dropped) {
	type group struct {
		s         Suggestion
		questions map[string]int64
		asks, wl  bool
	}
	var order []string
	groups := map[string]*group{}
	var dropped []Dropped
	seen := map[string]int{} // database, text and role → its index in dropped, or -1 when kept
	for _, c := range cs {
		if strings.TrimSpace(c.Text) == "" {
			continue
		}
		if check != nil {
			k := c.Database + "\x00" + c.Text + "\x00" + c.Role
			i, ok := seen[k]
			if !ok {
				i = -1
				if why := check(c.Role, c.Text); why != "" {
					i = len(dropped)
					dropped = append(dropped, Dropped{Database: c.Database, Text: c.Text, Role: c.Role, Reason: why})
				}
				seen[k] = i
			}
			if i >= 0 {
				dropped[i].Count += c.Count
				continue
			}
		}
		k := c.Database + "\x00" + c.Text
		g := groups[k]
		if g == nil {
			sql := dollarParam.ReplaceAllString(c.Text, ":p$1")
			g = &group{s: Suggestion{Entry: Entry{Database: c.Database, SQL: sql}}, questions: map[string]int64{}}
			for _, name := range Placeholders(sql) {
				g.s.Entry.Params = append(g.s.Entry.Params, Param{Name: name})
			}
			groups[k] = g
			order = append(order, k)
		}
		g.s.Seen += c.Count
		if c.Question == "" {
			g.wl = true
			continue
		}
		g.asks = true
		g.questions[scrubQuestion(c.Question, c.Values)] += c.Count
	}
	var out []Suggestion
	for _, k := range order {
		g := groups[k]
		if g.s.Seen < min || slices.ContainsFunc(existing, func(e Entry) bool {
			return e.Database == g.s.Entry.Database && strings.Join(strings.Fields(e.SQL), " ") == strings.Join(strings.Fields(g.s.Entry.SQL), " ")
		}) {
			continue
		}
		var best string
		var n int64 = -1
		for q, c := range g.questions {
			if c > n || c == n && q < best {
				best, n = q, c
			}
		}
		g.s.Entry.Question = best
		switch {
		case g.asks && g.wl:
			g.s.Source = "asks, workload"
		case g.asks:
			g.s.Source = "asks"
		default:
			g.s.Source = "workload"
		}
		out = append(out, g.s)
	}
	slices.SortStableFunc(out, func(a, b Suggestion) int {
		if a.Seen != b.Seen {
			if a.Seen > b.Seen {
				return -1
			}
			return 1
		}
		return 0
	})
	for i := range out {
		out[i].Entry.Name = fmt.Sprintf("suggested_%d", i+1)
	}
	return out, dropped
}

// quotedOrNumber is text in a question that may be a data value.
var quotedOrNumber = regexp.MustCompile(`'[^']*'|"[^"]*"|\b[0-9][0-9.,:/-]*\b`)

// scrubQuestion replaces each of values found in q (whole words, any case)
// by {pN}, then any other quoted text or number by {?}.
func scrubQuestion(q string, values []string) string {
	for i, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		re, err := regexp.Compile(`(?i)(^|\W)` + regexp.QuoteMeta(v) + `(\W|$)`)
		if err != nil {
			continue
		}
		q = re.ReplaceAllString(q, "${1}{p"+strconv.Itoa(i+1)+"}${2}")
	}
	return quotedOrNumber.ReplaceAllStringFunc(q, func(s string) string {
		if strings.HasPrefix(s, "'{p") || strings.HasPrefix(s, `"{p`) {
			return s
		}
		return "{?}"
	})
}
