package engine

import (
	"maps"
	"slices"
	"strings"

	"github.com/nlproxy/nlproxy/catalog/descindex"
)

// Name analysis for names that lost their separators and case: DDL
// written unquoted for another database folds sbCustomer to sbcustomer,
// sbTxDateTime to sbtxdatetime. What the lexicon learns from them (glued
// prefixes, run-together words, abbreviations) is computed once per schema
// fingerprint, with the catalog's own words and the lists below.

// commonWords are words schema names are commonly made of, for splitting
// run-together names whose parts the catalog never writes apart. Short on
// purpose: the catalog's own names and comments are the main vocabulary.
var commonWords = strings.Fields(`
account accounts activity address age agent airline airport alert amount analysis answer area article asset
assignment attribute audit author balance bank batch bill billing birth block board book booking border
branch brand budget building business buy call campaign capital card cart case category charge check checkin
cite city claim class client close closing code college comment company condition conference contact
content contract cost count country county course credit currency customer daily data dataset date day
degree delivery department deposit description detail device discount district doctor document domain
driver due duration education email employee end entry event exchange expense fact fee field file first
flight food full gender geographic grade group high history hotel hour house id image income instructor
invoice item journal key keyphrase keyword label lake last level limit line list loan location low manager
market member merchant message method minor model month mountain movie name note number offering office
open order organization owner paid paper parent partner password patient payment period person phone place
plan point policy population position post postal price product profile program project publication
purchase quantity rank rate rating reason record region registration requirement restaurant return revenue
review river road role room sale sales salary schedule school score section sector sell semester service
session shipment shipping size source start state statement status stock store street student subject
supplier symbol tag tax teacher team term text ticker ticket time title total trade transaction transfer
treatment trip type unit user value vendor venue volume wallet week weight year zip
`)

// common is commonWords as a set.
var common = func() map[string]bool {
	m := make(map[string]bool, len(commonWords))
	for _, w := range commonWords {
		m[w] = true
	}
	return m
}()

// abbreviations expands abbreviations common in legacy and warehouse
// names into the words a question uses.
var abbreviations = map[string]string{
	"acct": "account", "addr": "address", "addl": "additional", "amt": "amount", "avg": "average",
	"bal": "balance", "cat": "category", "cmt": "comment", "cnt": "count", "cr": "credit", "cred": "credit",
	"crs": "course", "ctry": "country", "cty": "city", "cur": "currency", "curr": "currency", "cust": "customer",
	"desc": "description", "descr": "description", "dept": "department", "dob": "birth", "dt": "date",
	"emp": "employee", "enrl": "enrolled", "fname": "first", "grad": "graduation", "img": "image",
	"instr": "instructor", "inv": "invoice", "lname": "last", "loc": "location", "mgr": "manager",
	"msg": "message", "nbr": "number", "nm": "name", "no": "number", "num": "number", "offr": "offering",
	"ord": "order", "pmt": "payment", "pred": "predicted", "prereq": "prerequisite", "prod": "product",
	"prog": "program", "qty": "quantity", "rec": "record", "req": "requirement", "rev": "review",
	"sect": "section", "sem": "semester", "src": "source", "stu": "student",
	"stud": "student", "tel": "phone", "tot": "total", "tx": "transaction", "txn": "transaction",
	"txt": "text", "usr": "user", "xfer": "transfer", "yr": "year",
}

// irregular maps the stems of irregular plurals to their singular's
// (people → person); the stemmer meets the regular ones.
var irregular = func() map[string]string {
	m := map[string]string{}
	for _, p := range [][2]string{{"people", "person"}, {"children", "child"}, {"men", "man"}, {"women", "woman"},
		{"indices", "index"}, {"analyses", "analysis"}, {"criteria", "criterion"}, {"mice", "mouse"},
		{"geese", "goose"}, {"feet", "foot"}, {"teeth", "tooth"}, {"staves", "staff"}, {"leaves", "leaf"}} {
		m[descindex.Stem(p[0])] = descindex.Stem(p[1])
	}
	return m
}()

// shortParts are the two-letter words a run-together name may be split
// into (segment otherwise takes words of three letters or more).
var shortParts = map[string]bool{"id": true, "tx": true, "dt": true, "nm": true, "yr": true, "no": true}

// gluedPrefix learns the prefix glued, without separator or case change,
// to the first part of most of a group's names (rs of rsrestaurant,
// rslocation, rsgeographic): two to four letters starting at least three
// names and half of them, and leaving, for at least half of those, a
// remainder of three letters or more that is a word of vocab (or its
// plural) or splits into them. The most names win, then the longer prefix; "" when none.
func gluedPrefix(firsts []string, vocab map[string]bool) string {
	best, bestN := "", 0
	for k := 2; k <= 4; k++ {
		count := map[string]int{}
		for _, f := range firsts {
			if len(f) >= k+3 {
				count[f[:k]]++
			}
		}
		for _, p := range slices.Sorted(maps.Keys(count)) {
			n := count[p]
			if n < 3 || 2*n < len(firsts) || n < bestN || (n == bestN && len(p) <= len(best)) {
				continue
			}
			// Only a candidate's remainders are looked up: segment is
			// the costly part.
			known := 0
			for _, f := range firsts {
				if len(f) >= k+3 && strings.HasPrefix(f, p) {
					if rest := f[k:]; vocab[rest] || vocab[descindex.Stem(rest)] || segment(rest, vocab) != nil {
						known++
					}
				}
			}
			if 2*known >= n {
				best, bestN = p, n
			}
		}
	}
	return best
}

// dropGlued returns parts with prefix p removed from the first part when
// it is glued to one (rsfoodtype → foodtype; rs_x and rs are left).
func dropGlued(parts []string, p string) []string {
	if p == "" || len(parts) == 0 || len(parts[0]) < len(p)+3 || !strings.HasPrefix(parts[0], p) {
		return parts
	}
	out := slices.Clone(parts)
	out[0] = out[0][len(p):]
	return out
}

// abbreviates reports whether a reads as an abbreviation of word w: the
// same first letter, shorter by two or more, and its letters in w in order
// (instr of instructor, crs of course, nbr of number).
func abbreviates(a, w string) bool {
	if len(a) < 3 || len(w) < len(a)+2 || a[0] != w[0] {
		return false
	}
	i := 0
	for j := 0; j < len(w) && i < len(a); j++ {
		if w[j] == a[i] {
			i++
		}
	}
	return i == len(a)
}

// expand adds to a term list the words its abbreviations stand for: the
// built-in list's, and those a comment of the same column or table spells
// out (crs_id "identifier of the course" → course). Terms and comment
// words are stems (descindex.Tokenize).
func expand(ts []string, comment []string) []string {
	out := ts
	add := func(t string) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, t := range ts {
		if full, ok := abbreviations[t]; ok {
			add(descindex.Stem(full))
		}
		if sg, ok := irregular[t]; ok {
			add(sg)
		}
		if len(t) > 5 {
			continue
		}
		for _, w := range comment {
			if abbreviates(t, w) {
				add(w)
			}
		}
	}
	return out
}

// minUnsplit is the length from which a part no vocabulary word splits is
// kept for the question's words to split (the shortest glued pair of
// three-letter words and a remainder of three).
const minUnsplit = 7

func (lx *lexicon) addUnsplit(t string) {
	if len(t) < minUnsplit || common[t] {
		return
	}
	if lx.unsplit == nil {
		lx.unsplit = map[string][]string{}
	}
	for _, k := range []string{"p" + t[:4], "s" + t[len(t)-4:]} {
		if !slices.Contains(lx.unsplit[k], t) {
			lx.unsplit[k] = append(lx.unsplit[k], t)
		}
	}
}

// withQuestionWords returns q with the unsplit name terms that begin or
// end with one of its terms, the rest three letters or more: the question
// is the last vocabulary (tickerquot matches "quotes" when no catalog word
// or built-in one is quote). q itself is not changed.
func (lx *lexicon) withQuestionWords(q map[string]bool) map[string]bool {
	if len(lx.unsplit) == 0 {
		return q
	}
	var add []string
	for w := range q {
		if len(w) < 4 {
			continue
		}
		for _, u := range lx.unsplit["p"+w[:4]] {
			if len(u) >= len(w)+3 && strings.HasPrefix(u, w) {
				add = append(add, u)
			}
		}
		for _, u := range lx.unsplit["s"+w[len(w)-4:]] {
			if len(u) >= len(w)+3 && strings.HasSuffix(u, w) {
				add = append(add, u)
			}
		}
	}
	if len(add) == 0 {
		return q
	}
	out := maps.Clone(q)
	for _, u := range add {
		out[u] = true
	}
	return out
}
