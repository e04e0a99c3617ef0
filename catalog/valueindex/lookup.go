package valueindex

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/nlproxy/nlproxy/catalog/embedding"
)

// Match is one stored value that matches a keyword.
type Match struct {
	Schema, Table, Column string
	Value                 string  // the value as stored
	Score                 float64 // in [0,1]; 1 = exact (normalized) match
	Keyword               string  // the keyword it matched
	Exact                 bool
	// Alias: found as the counterpart the data pairs with the keyword
	// (the code 'CA' for "California"), not by spelling.
	Alias bool
}

// LookupOptions tune a lookup. Zero values take the defaults.
type LookupOptions struct {
	Limit     int     // matches per keyword (default 10)
	PerColumn int     // matches per keyword per column (default 3)
	MinScore  float64 // drop matches below (default 0.55)
	// Embedder, when set, reranks the best lexical candidates by
	// (1-EmbedWeight)*edit + EmbedWeight*cosine.
	Embedder    embedding.Embedder
	EmbedWeight float64 // default 0.3
}

func (o LookupOptions) withDefaults() LookupOptions {
	if o.Limit <= 0 {
		o.Limit = 10
	}
	if o.PerColumn <= 0 {
		o.PerColumn = 3
	}
	if o.MinScore == 0 {
		o.MinScore = 0.55
	}
	if o.EmbedWeight == 0 {
		o.EmbedWeight = 0.3
	}
	return o
}

// Candidate-gathering bounds: they keep a lookup's work independent of the
// index size (a common token or a crowded LSH bucket is sampled, lowest ids
// — the most frequent values of each column — first).
const (
	maxBucket       = 256     // larger LSH buckets are skipped
	maxLSHCands     = 64      // LSH candidates kept, by band hits
	maxTokenUnion   = 1 << 16 // postings merged per keyword token
	maxTokenSeed    = 8192    // token-path pool size after which tokens only count
	maxTokenCands   = 96      // token-path candidates kept, by tokens hit
	maxPrefixTokens = 32      // vocabulary tokens a prefix may expand to
	embedTop        = 20      // candidates sent to the embedder
)

// exactLimitFactor bounds the exact matches kept for one keyword, as a
// multiple of LookupOptions.Limit, so a value stored in hundreds of columns
// ('Yes') cannot flood the prompt.
const exactLimitFactor = 3

// Candidate flags.
const (
	flagAbbrev uint8 = 1 << iota
)

// searcher is per-lookup scratch; an Index is shared, a searcher is not.
type searcher struct {
	ix      *Index
	ed      editScratch
	gs      []uint64
	sig     []uint32
	keys    []uint32
	tokSig  []uint32
	tokKeys []uint32
	cands   map[int32]uint8
	hits    map[int32]int32
	touched []int32 // hits' keys in first-touch order (deterministic ties)
	levels  [][]int32
	ktoks   []kwTok
	kmatch  []int32
	acc     []idCount // token path: value ids with keyword-token counts, by id
	acc2    []idCount
	ubuf    [2][]int32
	ranked  []scored
}

type scored struct {
	id    int32
	score float64
	exact bool
	alias bool
}

// getSearcher takes a searcher from the index's pool (its maps keep their
// capacity between lookups); putSearcher returns it.
func (ix *Index) getSearcher() *searcher {
	if s, ok := ix.pool.Get().(*searcher); ok {
		return s
	}
	return ix.newSearcher()
}

func (ix *Index) putSearcher(s *searcher) {
	if len(s.cands) > 4096 || len(s.hits) > 1<<16 {
		return // do not pin an outsized scratch
	}
	ix.pool.Put(s)
}

func (ix *Index) newSearcher() *searcher {
	return &searcher{
		ix:    ix,
		sig:   make([]uint32, ix.cfg.Bands*ix.cfg.Rows),
		keys:  make([]uint32, ix.cfg.Bands),
		cands: make(map[int32]uint8),
		hits:  make(map[int32]int32),
	}
}

// Lookup returns, for each keyword, its best matching stored values: at most
// opts.PerColumn per table.column and opts.Limit per keyword, best first.
// Results for the keywords are concatenated in keyword order.
func (ix *Index) Lookup(ctx context.Context, keywords []string, opts LookupOptions) []Match {
	opts = opts.withDefaults()
	s := ix.getSearcher()
	defer ix.putSearcher(s)
	var out []Match
	for _, kw := range keywords {
		if ctx.Err() != nil {
			break
		}
		n := normalize(kw)
		if n == "" {
			continue
		}
		s.gather(n, -1)
		s.rank(n, -1)
		s.embedRerank(ctx, kw, opts)
		perCol := make(map[int]int)
		kept := 0
		for _, r := range s.ranked {
			if r.score < opts.MinScore || (kept >= opts.Limit && !r.exact) || kept >= exactLimitFactor*opts.Limit {
				// Exact matches are kept past the limit (per column still
				// capped, and up to a bound): a value stored in many columns
				// ('New York' as city, state and airport name) must not crowd
				// out the one asked about.
				break
			}
			c := ix.colOf(r.id)
			if perCol[c] >= opts.PerColumn {
				continue
			}
			perCol[c]++
			kept++
			out = append(out, ix.match(r, kw))
		}
		out = ix.appendAliasMatches(out, n, kw, perCol, opts.PerColumn)
	}
	return out
}

// appendAliasMatches adds the stored values a keyword stands for through an
// alias ("California" → 'CA' wherever 'CA' is stored; "CA" → 'California'),
// beyond the keyword's own matches, at most perColumn per column.
func (ix *Index) appendAliasMatches(out []Match, n, kw string, perCol map[int]int, perColumn int) []Match {
	for _, other := range ix.counterparts(n, "") {
		for _, id := range ix.exactIDs(normalize(other), 0, int32(ix.Len())) {
			c := ix.colOf(id)
			if perCol[c] >= perColumn || containsID(out, ix, id) {
				continue
			}
			perCol[c]++
			out = append(out, ix.match(scored{id: id, score: aliasScore, alias: true}, kw))
		}
	}
	return out
}

func containsID(ms []Match, ix *Index, id int32) bool {
	c := ix.cols[ix.colOf(id)]
	v := ix.rawValue(id)
	for _, m := range ms {
		if m.Value == v && m.Column == c.Name && m.Table == c.Table && m.Schema == c.Schema {
			return true
		}
	}
	return false
}

// exactIDs are the ids in [lo,hi) whose normalized value equals n ignoring
// spaces.
func (ix *Index) exactIDs(n string, lo, hi int32) []int32 {
	if n == "" {
		return nil
	}
	var out []int32
	for _, e := range keyRange(ix.exact, uint32(hash64(n, true)>>32)) {
		if id := int32(uint32(e)); id >= lo && id < hi && compactEqual(n, ix.normValue(id)) {
			out = append(out, id)
		}
	}
	return out
}

func (ix *Index) match(r scored, kw string) Match {
	c := ix.cols[ix.colOf(r.id)]
	return Match{Schema: c.Schema, Table: c.Table, Column: c.Name, Value: ix.rawValue(r.id),
		Score: r.score, Keyword: kw, Exact: r.exact, Alias: r.alias}
}

// Closest returns the k stored values of table.column nearest to literal, for
// correcting a literal in generated SQL. table may be "schema.table" or a bare
// table name; a bare name matches that table in every schema, so callers
// should qualify it when two schemas hold the same table name. Names are
// compared exactly, case-insensitively only when nothing matches exactly.
// Small columns are scanned in full; large ones go through the same
// candidate paths as Lookup. An initials match ('Los Angeles' ↔ 'LA') scores
// at least 0.8.
func (ix *Index) Closest(ctx context.Context, table, column, literal string, k int) []Match {
	if k <= 0 {
		k = 1
	}
	n := normalize(literal)
	if n == "" {
		return nil
	}
	cols := ix.columnsNamed(table, column)
	s := ix.getSearcher()
	defer ix.putSearcher(s)
	var all []scored
	for _, ci := range cols {
		if ctx.Err() != nil {
			return nil
		}
		c := &ix.cols[ci]
		if c.End-c.Start <= 5000 {
			clear(s.cands)
			for id := c.Start; id < c.End; id++ {
				s.cands[id] = 0
			}
			s.addAbbrev(n, ci)
		} else {
			s.gather(n, ci)
		}
		s.rank(n, ci)
		all = append(all, s.ranked...)
		// A name whose code the column stores (or a code whose name it
		// stores), as the data's own pairs say.
		for _, other := range ix.counterparts(n, c.Name) {
			for _, id := range ix.exactIDs(normalize(other), c.Start, c.End) {
				all = append(all, scored{id: id, score: aliasScore, alias: true})
			}
		}
	}
	slices.SortFunc(all, cmpScored)
	var out []Match
	for _, r := range all[:min(k, len(all))] {
		out = append(out, ix.match(r, literal))
	}
	return out
}

// columnsNamed returns the columns table.column names, trying in turn: exact
// "schema.table", exact bare table, then both case-insensitively. Comparing
// the whole qualified name (not splitting at the first dot) keeps schema and
// table names that contain dots apart.
func (ix *Index) columnsNamed(table, column string) []int {
	exact := func(a, b string) bool { return a == b }
	for _, eq := range []func(a, b string) bool{exact, strings.EqualFold} {
		for _, qualified := range []bool{true, false} {
			var out []int
			for ci := range ix.cols {
				c := &ix.cols[ci]
				if eq(c.Name, column) && ((qualified && qualifiedName(c, table, eq)) || (!qualified && eq(c.Table, table))) {
					out = append(out, ci)
				}
			}
			if len(out) > 0 {
				return out
			}
		}
	}
	return nil
}

// qualifiedName reports whether name is c's "schema.table".
func qualifiedName(c *colMeta, name string, eq func(a, b string) bool) bool {
	n := len(c.Schema)
	return len(name) > n && name[n] == '.' && eq(name[:n], c.Schema) && eq(name[n+1:], c.Table)
}

func cmpScored(a, b scored) int {
	switch {
	case a.score > b.score:
		return -1
	case a.score < b.score:
		return 1
	}
	return int(a.id - b.id)
}

// gather fills s.cands with candidate ids for the normalized keyword n,
// restricted to column col when col >= 0.
func (s *searcher) gather(n string, col int) {
	ix := s.ix
	clear(s.cands)
	lo, hi := int32(0), int32(ix.Len())
	if col >= 0 {
		lo, hi = ix.cols[col].Start, ix.cols[col].End
	}
	in := func(id int32) bool { return id >= lo && id < hi }

	// Exact (space-insensitive) matches.
	exact := false
	for _, e := range keyRange(ix.exact, uint32(hash64(n, true)>>32)) {
		if id := int32(uint32(e)); in(id) && compactEqual(n, ix.normValue(id)) {
			s.cands[id] = 0
			exact = true
		}
	}
	s.addAbbrev(n, col)

	// Token path: exact tokens, one-edit neighbours, prefixes; values are
	// ranked by how many keyword tokens they contain. Postings are sorted, so
	// unions and the per-value counts are linear merges, not hash maps.
	toks := strings.Fields(n)
	slices.Sort(toks)
	toks = slices.Compact(toks)
	s.acc = s.acc[:0]
	// Rarest keyword tokens first: they seed the candidate set, common ones
	// (and initials: "Z" in "John Z. Stanley") then only add to the counts
	// of values already there, so a lookup costs about the rare postings, not
	// the common ones.
	s.ktoks = s.ktoks[:0]
	for _, t := range toks {
		kt := kwTok{tieOnly: len(toks) > 1 && len(t) == 1, start: int32(len(s.kmatch))}
		if kt.tieOnly {
			if id, ok := ix.tokenID(t); ok {
				s.kmatch = append(s.kmatch, id)
			}
		} else {
			s.kmatch = s.matchTokens(s.kmatch, t)
		}
		kt.end = int32(len(s.kmatch))
		for _, id := range s.kmatch[kt.start:kt.end] {
			kt.size += s.postingsIn(id, lo, hi, col >= 0)
		}
		if kt.size > 0 {
			s.ktoks = append(s.ktoks, kt)
		}
	}
	slices.SortStableFunc(s.ktoks, func(a, b kwTok) int {
		if a.tieOnly != b.tieOnly {
			if a.tieOnly {
				return 1
			}
			return -1
		}
		return a.size - b.size
	})
	for i, kt := range s.ktoks {
		u := s.union(s.kmatch[kt.start:kt.end], lo, hi, col >= 0)
		switch {
		case i == 0:
			for _, id := range u {
				s.acc = append(s.acc, idCount{id, 1})
			}
		case !kt.tieOnly && len(s.acc)+len(u) <= maxTokenSeed:
			s.acc2 = mergeCount(s.acc2[:0], s.acc, u)
			s.acc, s.acc2 = s.acc2, s.acc
		default:
			countIn(s.acc, u)
		}
	}
	s.kmatch = s.kmatch[:0]
	s.topCounts(maxTokenCands)

	// MinHash-LSH over 3-grams, for misspellings: not needed when the
	// keyword is spelled as stored.
	if exact {
		return
	}
	s.resetHits()
	s.gs = grams(s.gs[:0], n)
	if len(s.gs) > 0 {
		ix.mh.bandKeys(s.gs, s.sig, s.keys)
		for b, key := range s.keys {
			bucket := keyRange(ix.bands[b], key)
			if col >= 0 {
				// Ids within a bucket are ascending: cut to the column's range.
				a, _ := slices.BinarySearch(bucket, uint64(key)<<32|uint64(uint32(lo)))
				z, _ := slices.BinarySearch(bucket, uint64(key)<<32|uint64(uint32(hi)))
				bucket = bucket[a:z]
			}
			if len(bucket) > maxBucket {
				continue // a crowded bucket is common grams: no evidence
			}
			for _, e := range bucket {
				id := int32(uint32(e))
				h, ok := s.hits[id]
				if !ok {
					s.touched = append(s.touched, id)
				}
				s.hits[id] = h + 1
			}
		}
	}
	s.topHits(maxLSHCands)
}

type idCount struct{ id, n int32 }

// kwTok is one keyword token on the token path: its matching vocabulary
// tokens are s.kmatch[start:end], with size postings in all.
type kwTok struct {
	start, end int32
	size       int
	tieOnly    bool
}

// postingsIn counts token t's postings in [lo,hi) (all when !cut).
func (s *searcher) postingsIn(t, lo, hi int32, cut bool) int {
	p := s.ix.postings(t)
	if !cut {
		return len(p)
	}
	a, _ := slices.BinarySearch(p, lo)
	b, _ := slices.BinarySearch(p, hi)
	return b - a
}

// countIn adds one to the count of each acc entry whose id is in u (both
// sorted), by binary search when u is much longer than acc.
func countIn(acc []idCount, u []int32) {
	if len(acc)*8 < len(u) {
		for i := range acc {
			if _, ok := slices.BinarySearch(u, acc[i].id); ok {
				acc[i].n++
			}
		}
		return
	}
	j := 0
	for i := range acc {
		for j < len(u) && u[j] < acc[i].id {
			j++
		}
		if j < len(u) && u[j] == acc[i].id {
			acc[i].n++
		}
	}
}

// union returns the sorted union of the postings of tokens (cut to [lo,hi)
// when cut is set), up to maxTokenUnion ids. The result may alias the index
// or the searcher's buffers; it is valid until the next call.
func (s *searcher) union(tokens []int32, lo, hi int32, cut bool) []int32 {
	var u []int32
	buf := 0
	for i, t := range tokens {
		p := s.ix.postings(t)
		if cut {
			a, _ := slices.BinarySearch(p, lo)
			b, _ := slices.BinarySearch(p, hi)
			p = p[a:b]
		}
		if i == 0 {
			u = p
			continue
		}
		if len(u)+len(p) > maxTokenUnion {
			break
		}
		s.ubuf[buf] = mergeUnion(s.ubuf[buf][:0], u, p)
		u = s.ubuf[buf]
		buf ^= 1
	}
	return u[:min(len(u), maxTokenUnion)]
}

func mergeUnion(dst, a, b []int32) []int32 {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			dst = append(dst, a[i])
			i++
		case a[i] > b[j]:
			dst = append(dst, b[j])
			j++
		default:
			dst = append(dst, a[i])
			i++
			j++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}

// mergeCount adds one to the count of every id of b (sorted) in acc (sorted
// by id), inserting ids not yet present.
func mergeCount(dst, acc []idCount, b []int32) []idCount {
	i, j := 0, 0
	for i < len(acc) && j < len(b) {
		switch {
		case acc[i].id < b[j]:
			dst = append(dst, acc[i])
			i++
		case acc[i].id > b[j]:
			dst = append(dst, idCount{b[j], 1})
			j++
		default:
			dst = append(dst, idCount{acc[i].id, acc[i].n + 1})
			i++
			j++
		}
	}
	dst = append(dst, acc[i:]...)
	for ; j < len(b); j++ {
		dst = append(dst, idCount{b[j], 1})
	}
	return dst
}

// topCounts moves the k ids of s.acc with the highest counts into s.cands,
// lowest ids (most frequent values) first among equals.
func (s *searcher) topCounts(k int) {
	var hist [64]int
	for _, c := range s.acc {
		hist[min(c.n, 63)]++
	}
	// Lowest count that still fits in k (ids at the threshold are taken in
	// id order until k is reached).
	thr, total := 63, 0
	for ; thr > 1 && total+hist[thr] < k; thr-- {
		total += hist[thr]
	}
	room := k - total
	for _, c := range s.acc {
		n := int(min(c.n, 63))
		if n < thr {
			continue
		}
		if n == thr {
			if room == 0 {
				continue
			}
			room--
		}
		if _, ok := s.cands[c.id]; !ok {
			s.cands[c.id] = 0
		}
	}
}

func (s *searcher) resetHits() {
	clear(s.hits)
	s.touched = s.touched[:0]
}

// topHits moves the k ids with the most hits (low 16 bits) into s.cands;
// ties go to the earliest touched (postings and buckets are walked in id
// order, so to the most frequent values), which keeps results deterministic
// without sorting thousands of ids.
func (s *searcher) topHits(k int) {
	if len(s.touched) == 0 {
		return
	}
	for i := range s.levels {
		s.levels[i] = s.levels[i][:0]
	}
	for _, id := range s.touched {
		h := int(s.hits[id] & 0xffff)
		for len(s.levels) <= h {
			s.levels = append(s.levels, nil)
		}
		s.levels[h] = append(s.levels[h], id)
	}
	for h := len(s.levels) - 1; h > 0 && k > 0; h-- {
		for _, id := range s.levels[h] {
			if k == 0 {
				break
			}
			if _, ok := s.cands[id]; !ok {
				s.cands[id] = 0
			}
			k--
		}
	}
}

// matchTokens appends vocabulary tokens equal to t, within one edit of it
// (via the deletion index), or (for t of 3+ runes) starting with it.
func (s *searcher) matchTokens(dst []int32, t string) []int32 {
	base := len(dst) // dst[:base] belongs to other keyword tokens
	ix := s.ix
	if id, ok := ix.tokenID(t); ok {
		dst = append(dst, id)
	}
	rc := utf8.RuneCountInString(t)
	if rc < 3 {
		return dst
	}
	add := func(id int32) {
		if !slices.Contains(dst[base:], id) && s.ed.osa(t, ix.token(id)) <= 2 {
			dst = append(dst, id)
		}
	}
	// Tokens of which t is a deletion (t misses a letter).
	for _, e := range keyRange(ix.dels, uint32(hash64(t, false)>>32)) {
		add(int32(uint32(e)))
	}
	for i, w := 0, 0; i < len(t); i += w {
		_, w = utf8.DecodeRuneInString(t[i:])
		d := t[:i] + t[i+w:]
		if id, ok := ix.tokenID(d); ok { // t has an extra letter
			add(id)
		}
		h := uint32(hash64(d, false) >> 32)
		for _, e := range keyRange(ix.dels, h) { // substitution / transposition
			add(int32(uint32(e)))
		}
	}
	if rc >= tokLSHMinLen {
		s.gs = grams(s.gs[:0], t)
		if s.tokSig == nil {
			s.tokSig, s.tokKeys = make([]uint32, tokBands*tokRows), make([]uint32, tokBands)
		}
		ix.tokMH.bandKeys(s.gs, s.tokSig, s.tokKeys)
		for b, k := range s.tokKeys {
			bucket := keyRange(ix.tokLSH[b], k)
			for _, e := range bucket[:min(len(bucket), 64)] {
				add(int32(uint32(e)))
			}
		}
	}
	lo, hi := ix.prefixRange(t)
	for id := lo; id < hi && id < lo+maxPrefixTokens; id++ {
		if !slices.Contains(dst[base:], id) {
			dst = append(dst, id)
		}
	}
	return dst
}

// addAbbrev adds initials matches: a multi-word keyword whose initials are a
// stored value ("Los Angeles" → "LA"), or a short keyword that is the
// initials of a stored multi-word value ("NYC" → "New York City").
func (s *searcher) addAbbrev(n string, col int) {
	ix := s.ix
	in := func(id int32) bool {
		return col < 0 || (id >= ix.cols[col].Start && id < ix.cols[col].End)
	}
	if ini := initials(n); ini != "" {
		for _, e := range keyRange(ix.exact, uint32(hash64(ini, true)>>32)) {
			if id := int32(uint32(e)); in(id) && compactEqual(ix.normValue(id), ini) {
				s.cands[id] |= flagAbbrev
			}
		}
	}
	if c := compact(n); len(c) >= 2 && len(c) <= 5 && !strings.Contains(n, " ") {
		for _, e := range keyRange(ix.abbr, uint32(hash64(c, false)>>32)) {
			if id := int32(uint32(e)); in(id) && initials(ix.normValue(id)) == c {
				s.cands[id] |= flagAbbrev
			}
		}
	}
}

// rank scores s.cands against n into s.ranked, best first.
func (s *searcher) rank(n string, col int) {
	ix := s.ix
	toks := strings.Fields(n)
	s.ranked = s.ranked[:0]
	for id, fl := range s.cands {
		v := ix.normValue(id)
		if v == "" {
			continue
		}
		sc := s.ed.score(n, toks, v)
		exact := sc == 1
		if fl&flagAbbrev != 0 && sc < 0.8 {
			sc = 0.8
		}
		s.ranked = append(s.ranked, scored{id: id, score: sc, exact: exact})
	}
	slices.SortFunc(s.ranked, cmpScored)
}

// embedRerank blends embedding cosine into the top lexical candidates.
// Errors from the embedder leave the lexical ranking as is: retrieval must
// degrade, not fail, when the embedding model is unavailable.
func (s *searcher) embedRerank(ctx context.Context, kw string, o LookupOptions) {
	if o.Embedder == nil || len(s.ranked) == 0 {
		return
	}
	top := s.ranked[:min(embedTop, len(s.ranked))]
	texts := make([]string, 0, len(top)+1)
	texts = append(texts, kw)
	for _, r := range top {
		texts = append(texts, s.ix.rawValue(r.id))
	}
	vecs, err := o.Embedder.Embed(ctx, texts)
	if err != nil || len(vecs) != len(texts) {
		return
	}
	for i := range top {
		if top[i].exact {
			continue
		}
		cos := float64(embedding.Cosine(vecs[0], vecs[i+1]))
		top[i].score = (1-o.EmbedWeight)*top[i].score + o.EmbedWeight*max(0, cos)
	}
	slices.SortFunc(top, cmpScored)
	s.ranked = top // unblended tail scores are not comparable
}
