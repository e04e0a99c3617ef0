// Package valueindex indexes the distinct values of a database's text-like
// columns so the NL→SQL engine can ground question keywords in stored values
// (CHESS's entity retrieval, MAG-SQL's value retrieval) and correct literals
// in generated SQL to the spelling the column actually stores (the
// RDB-augmented paper's data value memory: 'Los Angeles' → 'LA').
//
// Lookups go exact (normalized, space-insensitive) → candidates from a
// MinHash-LSH over character 3-grams, a token index with one-edit neighbours
// and prefixes, and an initials index → rerank by edit similarity, blended
// with embedding cosine when an embedder is supplied.
//
// Memory: every value is stored once in a byte arena (raw and normalized),
// addressed by int32 ids; all secondary indexes are sorted []uint64 arrays of
// (32-bit key << 32 | id), searched by binary search.
package valueindex

import (
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// colMeta describes one indexed column and its id range [Start, End).
type colMeta struct {
	Schema, Table, Name string
	Start, End          int32
	Stat                ColumnStat
}

// ColumnStat reports what Build did with one column.
type ColumnStat struct {
	Schema, Table, Column string
	Values                int    // distinct values indexed
	Sampled               bool   // read with TABLESAMPLE
	Truncated             bool   // hit the per-column cap
	Skipped               string // reason the column was not indexed; "" if indexed
}

// ColumnValues is one column's distinct values, for building an index from
// values already in hand (enum labels, tests, another store).
type ColumnValues struct {
	Schema, Table, Column string
	Values                []string
}

// config is the part of the options that shapes the derived structures; it
// is persisted so a loaded index rebuilds them identically.
type config struct {
	Bands, Rows        int
	Seed               uint64
	AbbrevMaxColValues int
}

func defaultConfig() config {
	return config{Bands: 32, Rows: 4, Seed: 0x6e6c7078, AbbrevMaxColValues: 20000}
}

// Index is an immutable, concurrency-safe value index.
type Index struct {
	cfg     config
	cols    []colMeta
	skipped []ColumnStat

	raw    []byte
	rawOff []uint32
	nrm    []byte
	nrmOff []uint32

	exact []uint64 // hash(compact(norm))>>32 <<32 | id

	vocab     []byte   // sorted distinct tokens, concatenated
	vocabOff  []uint32 // len = ntokens+1
	postStart []uint32 // len = ntokens+1
	post      []int32  // value ids per token, ascending
	dels      []uint64 // hash(one-rune deletion of token) <<32 | token id
	abbr      []uint64 // hash(initials) <<32 | value id
	// tokLSH is a small MinHash-LSH over the longer vocabulary tokens (2 rows
	// per band, so a token two edits away is still found: "sacremanto").
	tokMH  *minhasher
	tokLSH [][]uint64 // per band: key<<32 | token id

	mh    *minhasher
	bands [][]uint64 // per band: key<<32 | id

	aliases []Alias            // code↔name pairs (persisted)
	byName  map[string][]int32 // normalized name → aliases
	byCode  map[string][]int32 // normalized code → aliases

	pool sync.Pool // *searcher scratch
}

// Len is the number of indexed values.
func (ix *Index) Len() int { return len(ix.rawOff) - 1 }

// Stats lists every column Build considered: indexed ones first (in index
// order), then skipped ones.
func (ix *Index) Stats() []ColumnStat {
	out := make([]ColumnStat, 0, len(ix.cols)+len(ix.skipped))
	for _, c := range ix.cols {
		out = append(out, c.Stat)
	}
	return append(out, ix.skipped...)
}

// MemoryBytes is the approximate size of the index's arrays.
func (ix *Index) MemoryBytes() int64 {
	n := int64(len(ix.raw) + len(ix.nrm) + len(ix.vocab))
	n += 4 * int64(len(ix.rawOff)+len(ix.nrmOff)+len(ix.vocabOff)+len(ix.postStart)+len(ix.post))
	n += 8 * int64(len(ix.exact)+len(ix.dels)+len(ix.abbr))
	for _, b := range ix.bands {
		n += 8 * int64(len(b))
	}
	return n
}

func (ix *Index) rawValue(id int32) string {
	return string(ix.raw[ix.rawOff[id]:ix.rawOff[id+1]])
}

// normValue returns the normalized value without copying; callers must not
// retain it beyond the index's life (the index is immutable, so that is safe).
func (ix *Index) normValue(id int32) string {
	b := ix.nrm[ix.nrmOff[id]:ix.nrmOff[id+1]]
	if len(b) == 0 {
		return ""
	}
	return unsafeString(b)
}

func (ix *Index) token(t int32) string {
	b := ix.vocab[ix.vocabOff[t]:ix.vocabOff[t+1]]
	return unsafeString(b)
}

func (ix *Index) colOf(id int32) int {
	return sort.Search(len(ix.cols), func(i int) bool { return ix.cols[i].End > id })
}

// builder accumulates values column by column.
type builder struct {
	aliases []Alias
	cfg     config
	cols    []colMeta
	skipped []ColumnStat
	raw     []byte
	rawOff  []uint32
	// readable are the relations Build checked and may read (mineRowAliases
	// reads no other).
	readable map[tableKey]*relation
}

func newBuilder(cfg config) *builder {
	return &builder{cfg: cfg, rawOff: []uint32{0}}
}

func (b *builder) startColumn(schema, table, name string) {
	n := int32(len(b.rawOff) - 1)
	b.cols = append(b.cols, colMeta{Schema: schema, Table: table, Name: name, Start: n, End: n,
		Stat: ColumnStat{Schema: schema, Table: table, Column: name}})
}

func (b *builder) add(v []byte) {
	b.raw = append(b.raw, v...)
	b.rawOff = append(b.rawOff, uint32(len(b.raw)))
	c := &b.cols[len(b.cols)-1]
	c.End++
	c.Stat.Values++
}

// dropColumn discards the values of the current column (a read that failed
// or a column whose content turned out id-like) and records why.
func (b *builder) dropColumn(reason string) {
	c := b.cols[len(b.cols)-1]
	b.rawOff = b.rawOff[:c.Start+1]
	b.raw = b.raw[:b.rawOff[c.Start]]
	b.cols = b.cols[:len(b.cols)-1]
	st := c.Stat
	st.Values = 0
	st.Skipped = reason
	b.skipped = append(b.skipped, st)
}

func (b *builder) skip(schema, table, name, reason string) {
	b.skipped = append(b.skipped, ColumnStat{Schema: schema, Table: table, Column: name, Skipped: reason})
}

// FromValues builds an index from values in hand. Duplicate values within a
// column are kept once; order is preserved (put frequent values first: ties
// in score rank earlier ids first).
func FromValues(cols []ColumnValues, opts Options) *Index {
	b := newBuilder(opts.config())
	b.aliases = opts.Aliases
	for _, c := range cols {
		b.startColumn(c.Schema, c.Table, c.Column)
		seen := make(map[string]bool, len(c.Values))
		for _, v := range c.Values {
			if seen[v] {
				continue
			}
			seen[v] = true
			b.add([]byte(v))
		}
	}
	return b.finish()
}

// finish derives every secondary structure from the value arena.
func (b *builder) finish() *Index {
	ix := &Index{cfg: b.cfg, cols: b.cols, skipped: b.skipped, raw: b.raw, rawOff: b.rawOff, aliases: b.aliases}
	ix.buildAliases()
	n := ix.Len()
	ix.nrmOff = make([]uint32, 1, n+1)
	ix.nrm = make([]byte, 0, len(ix.raw))
	for id := 0; id < n; id++ {
		ix.nrm = append(ix.nrm, normalize(ix.rawValue(int32(id)))...)
		ix.nrmOff = append(ix.nrmOff, uint32(len(ix.nrm)))
	}
	var wg sync.WaitGroup
	wg.Go(ix.buildExact)
	wg.Go(ix.buildTokens)
	wg.Go(ix.buildAbbr)
	wg.Wait()
	ix.buildLSH()
	return ix
}

func (ix *Index) buildExact() {
	n := ix.Len()
	ix.exact = make([]uint64, 0, n)
	for id := 0; id < n; id++ {
		v := ix.normValue(int32(id))
		if v == "" {
			continue
		}
		ix.exact = append(ix.exact, hash64(v, true)>>32<<32|uint64(uint32(id)))
	}
	slices.Sort(ix.exact)
}

func (ix *Index) buildAbbr() {
	for _, c := range ix.cols {
		if int(c.End-c.Start) > ix.cfg.AbbrevMaxColValues {
			continue
		}
		for id := c.Start; id < c.End; id++ {
			if in := initials(ix.normValue(id)); in != "" {
				ix.abbr = append(ix.abbr, hash64(in, false)>>32<<32|uint64(uint32(id)))
			}
		}
	}
	slices.Sort(ix.abbr)
}

func (ix *Index) buildTokens() {
	n := ix.Len()
	tid := make(map[string]int32)
	var names []string
	var pairs []uint64 // tid<<32 | id
	for id := 0; id < n; id++ {
		v := ix.normValue(int32(id))
		for v != "" {
			var t string
			if i := strings.IndexByte(v, ' '); i >= 0 {
				t, v = v[:i], v[i+1:]
			} else {
				t, v = v, ""
			}
			k, ok := tid[t]
			if !ok {
				k = int32(len(names))
				tid[t] = k
				names = append(names, t)
			}
			pairs = append(pairs, uint64(k)<<32|uint64(uint32(id)))
		}
	}
	// Renumber tokens in sorted order so prefix search is a range.
	order := make([]int32, len(names))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(names[a], names[b]) })
	rank := make([]int32, len(names))
	ix.vocabOff = make([]uint32, 1, len(names)+1)
	for r, old := range order {
		rank[old] = int32(r)
		ix.vocab = append(ix.vocab, names[old]...)
		ix.vocabOff = append(ix.vocabOff, uint32(len(ix.vocab)))
	}
	for i, p := range pairs {
		pairs[i] = uint64(rank[p>>32])<<32 | p&0xffffffff
	}
	slices.Sort(pairs)
	pairs = slices.Compact(pairs)
	ix.postStart = make([]uint32, len(names)+1)
	ix.post = make([]int32, len(pairs))
	for i, p := range pairs {
		ix.postStart[p>>32+1]++
		ix.post[i] = int32(uint32(p))
	}
	for i := 1; i < len(ix.postStart); i++ {
		ix.postStart[i] += ix.postStart[i-1]
	}
	// One-deletion neighbourhood of every token (SymSpell): two tokens within
	// one edit share a deletion, whatever the lengths of the words around them.
	for t := range len(names) {
		tok := ix.token(int32(t))
		if utf8.RuneCountInString(tok) < 3 || len(tok) > 24 {
			continue
		}
		for i, w := 0, 0; i < len(tok); i += w {
			_, w = utf8.DecodeRuneInString(tok[i:])
			d := tok[:i] + tok[i+w:]
			ix.dels = append(ix.dels, hash64(d, false)>>32<<32|uint64(uint32(t)))
		}
	}
	slices.Sort(ix.dels)
	ix.dels = slices.Compact(ix.dels)
	ix.buildTokenLSH()
}

// Token LSH shape and the shortest token it covers; shorter tokens are
// served by the one-deletion index alone.
const (
	tokBands, tokRows = 24, 2
	tokLSHMinLen      = 6
)

func (ix *Index) buildTokenLSH() {
	ix.tokMH = newMinhasher(tokBands, tokRows, ix.cfg.Seed^0x746f6b)
	ix.tokLSH = make([][]uint64, tokBands)
	sig := make([]uint32, tokBands*tokRows)
	keys := make([]uint32, tokBands)
	var gs []uint64
	for t := range int32(len(ix.vocabOff) - 1) {
		tok := ix.token(t)
		if utf8.RuneCountInString(tok) < tokLSHMinLen {
			continue
		}
		gs = grams(gs[:0], tok)
		ix.tokMH.bandKeys(gs, sig, keys)
		for b, k := range keys {
			ix.tokLSH[b] = append(ix.tokLSH[b], uint64(k)<<32|uint64(uint32(t)))
		}
	}
	for b := range ix.tokLSH {
		slices.Sort(ix.tokLSH[b])
	}
}

func (ix *Index) buildLSH() {
	n := ix.Len()
	ix.mh = newMinhasher(ix.cfg.Bands, ix.cfg.Rows, ix.cfg.Seed)
	ix.bands = make([][]uint64, ix.cfg.Bands)
	for b := range ix.bands {
		ix.bands[b] = make([]uint64, n)
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min(n, (w+1)*chunk)
		if lo >= hi {
			break
		}
		wg.Go(func() {
			sig := make([]uint32, ix.cfg.Bands*ix.cfg.Rows)
			keys := make([]uint32, ix.cfg.Bands)
			var gs []uint64
			for id := lo; id < hi; id++ {
				gs = grams(gs[:0], ix.normValue(int32(id)))
				if len(gs) == 0 {
					for b := range keys {
						keys[b] = ^uint32(0) // empty values share one dead bucket
					}
				} else {
					ix.mh.bandKeys(gs, sig, keys)
				}
				for b, k := range keys {
					ix.bands[b][id] = uint64(k)<<32 | uint64(uint32(id))
				}
			}
		})
	}
	wg.Wait()
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for b := range next {
				slices.Sort(ix.bands[b])
			}
		})
	}
	for b := range ix.bands {
		next <- b
	}
	close(next)
	wg.Wait()
}

// keyRange returns the slice of sorted packed entries whose top 32 bits are key.
func keyRange(s []uint64, key uint32) []uint64 {
	lo := uint64(key) << 32
	i, _ := slices.BinarySearch(s, lo)
	j := i
	for j < len(s) && uint32(s[j]>>32) == key {
		j++
	}
	return s[i:j]
}

// tokenID finds an exact token in the sorted vocabulary.
func (ix *Index) tokenID(t string) (int32, bool) {
	nt := len(ix.vocabOff) - 1
	i := sort.Search(nt, func(i int) bool { return ix.token(int32(i)) >= t })
	if i < nt && ix.token(int32(i)) == t {
		return int32(i), true
	}
	return 0, false
}

// prefixRange returns the token ids [lo, hi) that start with p.
func (ix *Index) prefixRange(p string) (int32, int32) {
	nt := len(ix.vocabOff) - 1
	lo := sort.Search(nt, func(i int) bool { return ix.token(int32(i)) >= p })
	hi := lo
	for hi < nt && strings.HasPrefix(ix.token(int32(hi)), p) {
		hi++
	}
	return int32(lo), int32(hi)
}

func (ix *Index) postings(t int32) []int32 {
	return ix.post[ix.postStart[t]:ix.postStart[t+1]]
}

// Columns lists the indexed columns in index order (Stats without the
// skipped ones).
func (ix *Index) Columns() []ColumnStat {
	out := make([]ColumnStat, len(ix.cols))
	for i, c := range ix.cols {
		out[i] = c.Stat
	}
	return out
}

// Value returns the i-th stored value (most frequent first) of the c-th
// column of Columns.
func (ix *Index) Value(c, i int) string {
	return ix.rawValue(ix.cols[c].Start + int32(i))
}
