package engine

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nlproxy/nlproxy/catalog/descindex"
)

// lexicalKeywords is the keyword stage's fallback when the model's answer is
// unusable: quoted phrases, runs of capitalized words (likely names), and the
// remaining content words with their adjacent pairs, in question order.
func lexicalKeywords(question string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		s = strings.TrimSpace(s)
		k := strings.ToLower(s)
		if s == "" || seen[k] {
			return
		}
		seen[k] = true
		out = append(out, s)
	}

	// Quoted phrases are almost always values.
	rest := question
	for _, q := range [][2]string{{`"`, `"`}, {"“", "”"}, {`'`, `'`}, {"‘", "’"}, {"’", "’"}} {
		for {
			i, j, ok := quotedSpan(rest, q[0], q[1])
			if !ok {
				break
			}
			add(rest[i+len(q[0]) : j])
			rest = rest[:i] + " " + rest[j+len(q[1]):]
		}
	}

	words := strings.FieldsFunc(rest, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-' || r == '_' || r == '&' || r == '\'' || r == '’')
	})
	for i := range words {
		words[i] = strings.Trim(words[i], ".-'’")
	}

	// Capitalized runs not at the very start: "Los Angeles", "Acme Corp".
	var run []string
	flush := func() {
		if len(run) > 1 {
			add(strings.Join(run, " "))
		}
		run = run[:0]
	}
	for i, w := range words {
		if w != "" && i > 0 && unicode.IsUpper([]rune(w)[0]) && !stopwords[strings.ToLower(w)] {
			run = append(run, w)
			continue
		}
		flush()
	}
	flush()

	var content []string
	for _, w := range words {
		if w == "" || stopwords[strings.ToLower(w)] {
			content = append(content, "")
			continue
		}
		add(w)
		content = append(content, w)
	}
	for i := 0; i+1 < len(content); i++ {
		if content[i] != "" && content[i+1] != "" {
			add(content[i] + " " + content[i+1])
		}
	}
	return out
}

// quotedSpan finds the first phrase quoted with open…closeQ: an opening
// quote not preceded by a letter or digit and a closing one not followed by
// one, so the apostrophes of O'Brien or Macy's are not taken for quotes. It
// returns the offsets of both quotes.
func quotedSpan(s, open, closeQ string) (i, j int, ok bool) {
	for from := 0; from < len(s); {
		k := strings.Index(s[from:], open)
		if k < 0 {
			return 0, 0, false
		}
		i = from + k
		from = i + len(open)
		if r, _ := utf8.DecodeLastRuneInString(s[:i]); i > 0 && wordRune(r) {
			continue // an apostrophe inside or after a word
		}
		for at := from; at < len(s); {
			m := strings.Index(s[at:], closeQ)
			if m < 0 {
				break
			}
			j = at + m
			at = j + len(closeQ)
			if r, _ := utf8.DecodeRuneInString(s[at:]); at < len(s) && wordRune(r) {
				continue // O'Brien's apostrophe inside the quoted phrase
			}
			if j > from {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

func wordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// stopwords are question words that never name a table, column or value.
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the of in on at to for from by with without and or not no
		is are was were be been being do does did have has had what which who whom whose when where why how
		many much more most less least than then there their them they it its this that these those
		me my we our you your i all any each every some per please show list give tell find get return
		display count number total average avg sum top first last between over under into out about as
		can could would should will shall may might must there's what's whats`) {
		m[w] = true
	}
	return m
}()

// inQuestion keeps the model's terms that share a word with the question
// (stemmed, as the description index tokenizes), as the keyword prompt
// asks. Gemma 3 270M answered "How many customers are there?" with the
// prompt's own example, ["flight", "departure delay", "airport"] and
// ["JFK", "March 2021"]: looked up, such terms select unrelated tables and
// values. It returns the terms kept.
func inQuestion(question string, terms []string) []string {
	words := map[string]bool{}
	for _, w := range descindex.Tokenize(question) {
		words[w] = true
	}
	var kept []string
	for _, t := range terms {
		for _, w := range descindex.Tokenize(t) {
			if words[w] {
				kept = append(kept, t)
				break
			}
		}
	}
	return kept
}
