package engine

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// A lexicon is what schema linking knows about one schema's names, computed
// once per schema fingerprint: each table's name, column and comment terms
// (identifiers split, shared prefixes learnt and dropped, run-together words
// segmented with the schema's own vocabulary, lightly stemmed), the terms'
// rarity across tables, which tables join, and rendering sizes.
type lexicon struct {
	tables []lexTable
	index  map[string]int // "schema.table" → position
	idf    map[string]float64
	// adj lists, per table, the tables it joins: a foreign key either way,
	// or (for schemas without declared keys) a shared key-like column.
	adj [][]int
	// named are the joins inferred from a same-named key column, in
	// sorted order.
	named []namedJoin
	// fullTokens is the full rendering's size without retrieved examples;
	// softTokens the cost of listing every table with its columns (the soft
	// schema's "other tables"), namesTokens of listing names only.
	fullTokens, softTokens, namesTokens int
	// schemas counts the schemas; schemasTokens is the cost of one summary
	// line for each.
	schemas, schemasTokens int
	// unsplit holds the long name terms no vocabulary word split, by
	// "p"+their first and "s"+their last four bytes: the question's words
	// split them per ask (withQuestionWords).
	unsplit map[string][]string
}

type namedJoin struct {
	a, b int
	col  string
}

type lexTable struct {
	key, ns string
	name    []string        // terms of the table name
	cols    []lexColumn     //
	comment map[string]bool // terms of the table and column comments
	keys    map[string]bool // PK, FK, unique and join columns
}

type lexColumn struct {
	name    string
	terms   []string // terms of the column name
	comment []string // terms of its comment
}

// lexicons caches lexicons by schema fingerprint (a role's filtered schema
// has its own fingerprint).
type lexicons struct {
	mu sync.Mutex
	m  map[string]*lexicon
}

const maxLexicons = 64

func (l *lexicons) get(s *catalog.Schema) *lexicon {
	l.mu.Lock()
	lx := l.m[s.Fingerprint]
	l.mu.Unlock()
	if lx != nil {
		return lx
	}
	lx = buildLexicon(s)
	if s.Fingerprint == "" {
		return lx // hand-made schema (tests): nothing identifies it
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxLexicons {
		l.m = map[string]*lexicon{}
	}
	l.m[s.Fingerprint] = lx
	return lx
}

// sharedPrefixes learns the leading parts a group of identifiers share for
// no meaning ("crm" of crmAccount, crmTxDate): a first part of at least
// half of the identifiers that have more than one part, in a group of 3+.
func sharedPrefixes(names [][]string) map[string]bool {
	count := map[string]int{}
	multi := 0
	for _, p := range names {
		if len(p) > 1 {
			multi++
			count[p[0]]++
		}
	}
	out := map[string]bool{}
	if multi < 3 {
		return out
	}
	for w, n := range count {
		if 2*n >= multi && n >= 3 {
			out[w] = true
		}
	}
	return out
}

// segment splits a run-together identifier part ("paperkeyphrase") into
// the fewest words of vocab, each of 3+ letters or one of shortParts, when
// there is such a split into two or more; otherwise it returns nil.
func segment(w string, vocab map[string]bool) []string {
	n := len(w)
	if n < 5 || n > 40 {
		return nil
	}
	best := make([]int, n+1) // fewest words for w[:i]; -1: impossible
	from := make([]int, n+1)
	for i := 1; i <= n; i++ {
		best[i] = -1
		for j := 0; j < i; j++ {
			if best[j] < 0 || (j == 0 && i == n) {
				continue
			}
			p := w[j:i]
			if (len(p) >= 3 || shortParts[p]) && vocab[p] && (best[i] < 0 || best[j]+1 < best[i]) {
				best[i], from[i] = best[j]+1, j
			}
		}
	}
	if best[n] < 2 {
		return nil
	}
	var out []string
	for i := n; i > 0; i = from[i] {
		out = append(out, w[from[i]:i])
	}
	slices.Reverse(out)
	return out
}

// terms turns identifier parts into matching terms: stopwords dropped,
// run-together parts split with the vocabulary (both kept), stemmed. A
// long part the vocabulary cannot split is passed to unsplit (as a term).
func terms(parts []string, vocab map[string]bool, unsplit func(string)) []string {
	var out []string
	add := func(p string) {
		for _, t := range descindex.Tokenize(p) {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	for _, p := range parts {
		add(p)
		if common[p] {
			continue // a word as it is (record, not rec+ord)
		}
		seg := segment(p, vocab)
		for _, s := range seg {
			add(s)
		}
		if seg == nil && len(p) >= minUnsplit && unsplit != nil {
			for _, t := range descindex.Tokenize(p) {
				unsplit(t)
			}
		}
	}
	return out
}

// keyLike reports whether a column name reads as an identifier or code
// ("aid", "business_id", "state_code", "PartNo"): shared ones join tables.
func keyLike(name string) bool {
	n := strings.ToLower(name)
	for _, suf := range []string{"id", "code", "key", "_no", "num"} {
		if strings.HasSuffix(n, suf) {
			return true
		}
	}
	return false
}

func buildLexicon(s *catalog.Schema) *lexicon {
	lx := &lexicon{index: make(map[string]int, len(s.Tables)), idf: map[string]float64{}}
	// The vocabulary run-together names are split with: every identifier
	// part and comment word of the schema, the built-in common words and
	// abbreviations, and (below) what learnt prefixes leave.
	vocab := map[string]bool{}
	nsTables := map[string][][]string{}
	nsCols := map[string][][]string{}
	tableParts := make([][]string, len(s.Tables))
	colParts := make([][][]string, len(s.Tables))
	for i := range s.Tables {
		t := &s.Tables[i]
		tableParts[i] = descindex.Split(t.Name)
		nsTables[t.Schema] = append(nsTables[t.Schema], tableParts[i])
		for _, p := range tableParts[i] {
			vocab[p] = true
		}
		for _, w := range descindex.Split(t.Comment) {
			vocab[w] = true
		}
		colParts[i] = make([][]string, len(t.Columns))
		for j := range t.Columns {
			colParts[i][j] = descindex.Split(t.Columns[j].Name)
			nsCols[t.Schema] = append(nsCols[t.Schema], colParts[i][j])
			for _, p := range colParts[i][j] {
				vocab[p] = true
			}
			for _, w := range descindex.Split(t.Columns[j].Comment) {
				vocab[w] = true
			}
		}
	}
	for _, w := range commonWords {
		vocab[w] = true
	}
	for a := range abbreviations {
		vocab[a] = true
	}
	tablePrefix := map[string]map[string]bool{}
	colPrefix := map[string]map[string]bool{}
	for ns := range nsTables {
		tablePrefix[ns] = sharedPrefixes(nsTables[ns])
		colPrefix[ns] = sharedPrefixes(nsCols[ns])
	}
	strip := func(parts []string, prefixes map[string]bool) []string {
		if len(parts) > 1 && prefixes[parts[0]] {
			return parts[1:]
		}
		return parts
	}
	// Prefixes glued on without a separator or case change (rsrestaurant,
	// rsfoodtype): per schema for tables and columns, per table for its
	// columns (custid, custname). Learnt after the separated ones.
	firsts := func(names [][]string) []string {
		out := make([]string, 0, len(names))
		for _, p := range names {
			if len(p) > 0 {
				out = append(out, p[0])
			}
		}
		return out
	}
	gluedTable, gluedCol := map[string]string{}, map[string]string{}
	for ns := range nsTables {
		var ts, cs [][]string
		for _, p := range nsTables[ns] {
			ts = append(ts, strip(p, tablePrefix[ns]))
		}
		for _, p := range nsCols[ns] {
			cs = append(cs, strip(p, colPrefix[ns]))
		}
		gluedTable[ns] = gluedPrefix(firsts(ts), vocab)
		gluedCol[ns] = gluedPrefix(firsts(cs), vocab)
	}
	tableName := make([][]string, len(s.Tables))
	colName := make([][][]string, len(s.Tables))
	for i := range s.Tables {
		t := &s.Tables[i]
		tableName[i] = dropGlued(strip(tableParts[i], tablePrefix[t.Schema]), gluedTable[t.Schema])
		// Column prefixes shared within the table (cust_id, cust_name) are
		// learnt per table, those shared across the schema per schema.
		own := sharedPrefixes(colParts[i])
		cols := make([][]string, len(t.Columns))
		for j := range t.Columns {
			cols[j] = dropGlued(strip(strip(colParts[i][j], own), colPrefix[t.Schema]), gluedCol[t.Schema])
		}
		ownGlued := gluedPrefix(firsts(cols), vocab)
		for j := range cols {
			cols[j] = dropGlued(cols[j], ownGlued)
		}
		colName[i] = cols
	}
	// What the prefixes left are words of the schema too (keyphrase of
	// sckeyphrase splits scpaperkeyphrase).
	for i := range s.Tables {
		for _, p := range tableName[i] {
			vocab[p] = true
		}
		for _, c := range colName[i] {
			for _, p := range c {
				vocab[p] = true
			}
		}
	}
	df := map[string]int{}
	for i := range s.Tables {
		t := &s.Tables[i]
		lt := lexTable{key: t.Schema + "." + t.Name, ns: t.Schema, comment: map[string]bool{}, keys: map[string]bool{}}
		for j := range t.Columns {
			c := &t.Columns[j]
			cm := descindex.Tokenize(c.Comment)
			lc := lexColumn{name: c.Name, terms: expand(terms(colName[i][j], vocab, lx.addUnsplit), cm), comment: cm}
			for _, w := range lc.comment {
				lt.comment[w] = true
			}
			lt.cols = append(lt.cols, lc)
		}
		tc := descindex.Tokenize(t.Comment)
		for _, w := range tc {
			lt.comment[w] = true
		}
		lt.name = expand(terms(tableName[i], vocab, lx.addUnsplit), tc)
		for _, c := range t.PrimaryKey {
			lt.keys[c] = true
		}
		for _, u := range t.Uniques {
			for _, c := range u {
				lt.keys[c] = true
			}
		}
		for _, fk := range t.ForeignKeys {
			for _, c := range fk.Columns {
				lt.keys[c] = true
			}
		}
		seen := map[string]bool{}
		for _, w := range lt.allTerms() {
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
		lx.index[lt.key] = i
		lx.tables = append(lx.tables, lt)
	}
	n := float64(len(s.Tables))
	for w, d := range df {
		// A term in most tables ("id", or "w" of w001…w200) tells none
		// apart: it weighs nothing.
		if n >= 4 && 2*d > int(n) {
			continue
		}
		lx.idf[w] = math.Log(1 + n/float64(d))
	}
	lx.buildJoins(s)
	lx.measure(s)
	return lx
}

func (lt *lexTable) allTerms() []string {
	out := slices.Clone(lt.name)
	for _, c := range lt.cols {
		out = append(out, c.terms...)
	}
	for w := range lt.comment {
		out = append(out, w)
	}
	return out
}

// buildJoins links tables by declared foreign keys and, within a schema,
// by a key-like column of the same name (author.aid = writes.aid), which is
// how schemas without declared keys are joined.
func (lx *lexicon) buildJoins(s *catalog.Schema) {
	lx.adj = make([][]int, len(s.Tables))
	link := func(i, j int) {
		if i != j && !slices.Contains(lx.adj[i], j) {
			lx.adj[i] = append(lx.adj[i], j)
			lx.adj[j] = append(lx.adj[j], i)
		}
	}
	byCol := map[string][]int{} // schema + "\x00" + column → tables
	for i := range s.Tables {
		t := &s.Tables[i]
		for _, fk := range t.ForeignKeys {
			if j, ok := lx.index[fk.RefSchema+"."+fk.RefTable]; ok {
				link(i, j)
			}
		}
		for _, c := range t.Columns {
			if keyLike(c.Name) || lx.tables[i].keys[c.Name] {
				k := t.Schema + "\x00" + c.Name
				byCol[k] = append(byCol[k], i)
			}
		}
	}
	// In sorted order: the adjacency order decides between equal bridges.
	for _, k := range slices.Sorted(maps.Keys(byCol)) {
		ts := byCol[k]
		if len(ts) < 2 {
			continue
		}
		col := k[strings.IndexByte(k, 0)+1:]
		for a := range ts {
			for b := a + 1; b < len(ts); b++ {
				link(ts[a], ts[b])
				lx.named = append(lx.named, namedJoin{ts[a], ts[b], col})
				lx.tables[ts[a]].keys[col] = true
				lx.tables[ts[b]].keys[col] = true
			}
		}
	}
}

// measure records the rendering sizes the selection decides with, so no
// ask renders the whole schema only to learn that it does not fit.
func (lx *lexicon) measure(s *catalog.Schema) {
	lx.fullTokens = estimateTokens(s.RenderFull(catalog.RenderOptions{}))
	soft, names := 0, 0
	for i := range s.Tables {
		t := &s.Tables[i]
		soft += len(t.Kind) + len(t.Schema) + len(t.Name) + 8
		names += len(t.Schema) + len(t.Name) + 3 + len(catalog.TableSummary(t))
		for _, c := range t.Columns {
			soft += len(c.Name) + 2
		}
	}
	lx.softTokens, lx.namesTokens = (soft+3)/4, (names+3)/4
	lx.schemasTokens = (s.SchemaSummariesSize() + 3) / 4
	ns := map[string]bool{}
	for i := range s.Tables {
		ns[s.Tables[i].Schema] = true
	}
	lx.schemas = len(ns)
}

// questionTerms are the matching terms of a question and its keywords.
func questionTerms(question string, keywords []string) map[string]bool {
	q := map[string]bool{}
	text := question + " " + strings.Join(keywords, " ")
	for _, t := range descindex.Tokenize(text) {
		q[t] = true
		if sg, ok := irregular[t]; ok {
			q[sg] = true
		}
	}
	// Two words written apart that a schema writes as one ("check-ins" for
	// checkin, "zip code" for zipcode).
	parts := descindex.Split(text)
	for i := 1; i < len(parts); i++ {
		if len(parts[i-1]) >= 3 && len(parts[i]) >= 2 && !isNumber(parts[i-1]) && !isNumber(parts[i]) {
			for _, t := range descindex.Tokenize(parts[i-1] + parts[i]) {
				q[t] = true
			}
		}
	}
	return q
}

// Link weights: a question term naming the table counts most, one naming
// a column less, one found only in comments least; each weighted by the
// term's rarity across tables (idf), so "id" or "name" decide little.
const (
	weightName     = 3.0
	weightColumn   = 1.2
	weightComment  = 0.5
	weightValue    = 2.0
	weightGlossary = 1.5
)

// tableScores scores every table for the question.
func (lx *lexicon) tableScores(q map[string]bool, values []valueindex.Match, descs []descindex.Hit) []float64 {
	sc := make([]float64, len(lx.tables))
	// Terms and value hits are summed in sorted order: float sums depend on
	// their order, and a map's order would make near-ties, and so the
	// tables shown, differ from one ask to the next.
	terms := slices.Sorted(maps.Keys(q))
	for i := range lx.tables {
		lt := &lx.tables[i]
		for _, w := range terms {
			switch {
			case slices.Contains(lt.name, w):
				sc[i] += weightName * lx.idf[w]
			case lt.inColumnName(w):
				sc[i] += weightColumn * lx.idf[w]
			case lt.comment[w]:
				sc[i] += weightComment * lx.idf[w]
			}
		}
	}
	// A stored value counts once per keyword and table, by its best match.
	best := map[string]float64{}
	for _, m := range values {
		k := m.Keyword + "\x00" + m.Schema + "." + m.Table
		best[k] = max(best[k], m.Score)
	}
	for _, k := range slices.Sorted(maps.Keys(best)) {
		if i, ok := lx.index[k[strings.IndexByte(k, 0)+1:]]; ok {
			sc[i] += weightValue * best[k]
		}
	}
	for rank, h := range descs {
		if h.Kind == descindex.KindGlossary {
			// A glossary entry points at the tables its SQL or definition
			// names ("churned: customers.flag = 1").
			for _, i := range lx.namedTables(h.SQLHint + " " + h.Text) {
				sc[i] += weightGlossary / float64(rank+1)
			}
		}
		// A term over a join points at each of its tables.
		for _, name := range h.Also {
			if i, ok := lx.index[name]; ok {
				sc[i] += 1 / float64(rank+1)
			}
		}
		if h.Table == "" {
			continue
		}
		for i := range lx.tables {
			lt := &lx.tables[i]
			if strings.HasSuffix(lt.key, "."+h.Table) && (h.Schema == "" || lt.ns == h.Schema) {
				sc[i] += 1 / float64(rank+1)
			}
		}
	}
	return sc
}

// namedTables are the tables a text names: "schema.table", "table" or
// "table.column" words, as written in SQL.
func (lx *lexicon) namedTables(text string) []int {
	var out []int
	words := strings.FieldsFunc(text, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.' || r == '$')
	})
	for _, w := range words {
		w = strings.Trim(w, ".")
		for i := range lx.tables {
			lt := &lx.tables[i]
			name := lt.key[len(lt.ns)+1:]
			if (w == lt.key || w == name || strings.HasPrefix(w, lt.key+".") || strings.HasPrefix(w, name+".")) && !slices.Contains(out, i) {
				out = append(out, i)
			}
		}
	}
	return out
}

func (lt *lexTable) inColumnName(w string) bool {
	for _, c := range lt.cols {
		if slices.Contains(c.terms, w) {
			return true
		}
	}
	return false
}

// Schema ranking: a question is nearly always about one schema of a
// multi-schema database (one business area). Schemas are scored for the
// question first; tables of schemas scoring below schemaKeep of the best
// are down-weighted (not dropped: the budget decides), so one lone
// same-word table elsewhere loses to a schema whose connected tables match.
const (
	schemaKeep       = 0.6
	schemaValueMin   = 0.9 // stored-value matches weaker than this do not point at a schema
	coherencePenalty = 0.5
	coherenceTop     = 3
)

// schemaScores scores each schema by how much of the question it covers —
// each question term once, at its best match in the schema (so a term
// every table of a schema repeats, state_name, counts once; a prefixed
// name counts as the plain one, its learnt prefix dropped), its best
// near-exact stored value per keyword and its description hits — plus its
// coherenceTop best table scores (several matching tables beat one), and
// returns the schemas best first (ties by name, never map order).
func (lx *lexicon) schemaScores(sc []float64, q map[string]bool, values []valueindex.Match, descs []descindex.Hit) ([]string, map[string]float64) {
	terms := slices.Sorted(maps.Keys(q))
	best := map[string]float64{} // ns + "\x00" + term or keyword → best weight
	for i := range lx.tables {
		lt := &lx.tables[i]
		for _, w := range terms {
			v := 0.0
			switch {
			case slices.Contains(lt.name, w):
				v = weightName * lx.idf[w]
			case lt.inColumnName(w):
				v = weightColumn * lx.idf[w]
			case lt.comment[w]:
				v = weightComment * lx.idf[w]
			}
			k := lt.ns + "\x00t" + w
			best[k] = max(best[k], v)
		}
	}
	for _, m := range values {
		// Only a near-exact stored value of a word points at a schema: a
		// number or a fuzzy match is found in most schemas.
		if m.Score < schemaValueMin || isNumber(m.Keyword) {
			continue
		}
		if _, ok := lx.index[m.Schema+"."+m.Table]; ok {
			k := m.Schema + "\x00v" + m.Keyword
			best[k] = max(best[k], weightValue*m.Score)
		}
	}
	for rank, h := range descs {
		for _, name := range h.Also {
			if i, ok := lx.index[name]; ok {
				k := lx.tables[i].ns + "\x00d" + name[len(lx.tables[i].ns)+1:]
				best[k] = max(best[k], 1/float64(rank+1))
			}
		}
		if h.Table == "" || h.Schema == "" {
			continue
		}
		k := h.Schema + "\x00d" + h.Table
		best[k] = max(best[k], 1/float64(rank+1))
	}
	nsScore := map[string]float64{}
	byNS := map[string][]float64{}
	for i, lt := range lx.tables {
		byNS[lt.ns] = append(byNS[lt.ns], sc[i])
	}
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		v := byNS[ns]
		slices.SortFunc(v, func(a, b float64) int { return -cmpFloat(a, b) })
		for _, x := range v[:min(coherenceTop, len(v))] {
			nsScore[ns] += x
		}
	}
	for _, k := range slices.Sorted(maps.Keys(best)) {
		ns := k[:strings.IndexByte(k, 0)]
		if _, ok := nsScore[ns]; ok {
			nsScore[ns] += best[k]
		}
	}
	names := slices.Sorted(maps.Keys(nsScore))
	slices.SortStableFunc(names, func(a, b string) int { return -cmpFloat(nsScore[a], nsScore[b]) })
	return names, nsScore
}

// rank orders the tables for the detailed part of the prompt: tables of
// schemas scoring below schemaKeep of the best schema are down-weighted
// (not dropped), then ranked by score with their bridges; the entity tables
// the best schema's chosen tables reach through a join follow them.
func (lx *lexicon) rank(sc []float64, q map[string]bool, values []valueindex.Match, descs []descindex.Hit) []int {
	names, nsScore := lx.schemaScores(sc, q, values, descs)
	sc = slices.Clone(sc)
	top := 0.0
	for i, lt := range lx.tables {
		if nsScore[lt.ns] < schemaKeep*nsScore[names[0]] {
			sc[i] *= coherencePenalty
		}
		top = max(top, sc[i])
	}
	if top == 0 {
		return nil
	}
	in := map[int]bool{}
	out := lx.order(sc, top, in, func(int) bool { return true })
	var first []int
	for _, i := range out {
		if lx.tables[i].ns == names[0] {
			first = append(first, i)
		}
	}
	return append(out, lx.entities(first, sc, q, in)...)
}

// entities are the tables joined to a chosen one that carry an attribute
// the question names and no chosen table has (the person table behind
// "names of the instructors" when the question names only the role's
// table), best first; they are added to in.
func (lx *lexicon) entities(chosen []int, sc []float64, q map[string]bool, in map[int]bool) []int {
	if len(chosen) == 0 {
		return nil
	}
	have := map[string]bool{}
	for _, i := range chosen {
		for _, w := range lx.tables[i].name {
			have[w] = true
		}
		for _, c := range lx.tables[i].cols {
			for _, w := range c.terms {
				have[w] = true
			}
		}
	}
	var cand []int
	for _, i := range chosen {
		for _, j := range lx.adj[i] {
			if in[j] || slices.Contains(cand, j) || lx.tables[j].ns != lx.tables[i].ns {
				continue
			}
			for _, c := range lx.tables[j].cols {
				if slices.ContainsFunc(c.terms, func(w string) bool { return q[w] && !have[w] && lx.idf[w] > 0 && !lx.tables[j].keys[c.name] }) {
					cand = append(cand, j)
					break
				}
			}
		}
	}
	slices.SortStableFunc(cand, func(a, b int) int { return -cmpFloat(sc[a], sc[b]) })
	for _, j := range cand {
		in[j] = true
	}
	return cand
}

func isNumber(s string) bool {
	return s != "" && strings.TrimFunc(s, func(r rune) bool { return unicode.IsDigit(r) || r == '.' }) == ""
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// minRelevance is the share of the best table's score below which a table
// is not shown in detail unless it joins two that are.
const minRelevance = 0.15

// order ranks the tables keep admits for the detailed part of the prompt:
// by score, each followed by the best-scoring bridge table joining it to an
// earlier one it does not join directly (writes between author and
// publication). Tables below minRelevance of top, or already in, are
// skipped; those ranked are added to in.
func (lx *lexicon) order(sc []float64, top float64, in map[int]bool, keep func(int) bool) []int {
	ranked := make([]int, 0, len(sc))
	for i, v := range sc {
		if v > 0 && keep(i) {
			ranked = append(ranked, i)
		}
	}
	slices.SortStableFunc(ranked, func(a, b int) int { return -cmpFloat(sc[a], sc[b]) })
	var out []int
	for _, t := range ranked {
		if sc[t] < minRelevance*top {
			break
		}
		if in[t] {
			continue
		}
		prev := slices.Clone(out)
		out = append(out, t)
		in[t] = true
		for _, p := range prev {
			if slices.Contains(lx.adj[t], p) {
				continue
			}
			if b := lx.bridge(t, p, sc, in); b >= 0 && keep(b) {
				out = append(out, b)
				in[b] = true
			}
		}
	}
	return out
}

// bridge is the best-scoring table joining a and b that is not yet shown,
// or -1 (also when a table already shown joins them).
func (lx *lexicon) bridge(a, b int, sc []float64, in map[int]bool) int {
	best := -1
	for _, c := range lx.adj[a] {
		if !slices.Contains(lx.adj[b], c) {
			continue
		}
		if in[c] {
			return -1
		}
		if best < 0 || sc[c] > sc[best] {
			best = c
		}
	}
	return best
}

// columnFilterMin is the column count above which a table is shown with
// only the columns the question points at, its keys and join columns (the
// others are listed by name).
const columnFilterMin = 12

// columns picks the columns of table i to detail, nil for all.
func (lx *lexicon) columns(i int, q map[string]bool, valueCols map[string]bool) []string {
	lt := &lx.tables[i]
	if len(lt.cols) <= columnFilterMin {
		return nil
	}
	var out []string
	for _, c := range lt.cols {
		hit := lt.keys[c.name] || valueCols[lt.key+"."+c.name]
		for _, w := range c.terms {
			hit = hit || q[w]
		}
		for _, w := range c.comment {
			hit = hit || (q[w] && lx.idf[w] > 1)
		}
		if hit {
			out = append(out, c.name)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
