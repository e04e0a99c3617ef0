package valueindex

import (
	"strings"
	"unicode/utf8"
)

// editScratch holds reusable rows for the distance computation so a lookup
// scoring hundreds of candidates does not allocate per pair.
type editScratch struct {
	p2, p1, cur []int
	ba, bb      []byte
	ra, rb      []rune
	best        []float64
}

// osa is the optimal-string-alignment distance (Levenshtein plus adjacent
// transpositions, which is how most typos happen: "Smtih").
func (s *editScratch) osa(a, b string) int {
	return s.osaMax(a, b, 1<<30)
}

// osaMax is osa, but gives up (returning some value > k) as soon as every
// cell of a DP row exceeds k: scoring only needs distances that could still
// beat the best score so far. ASCII text is compared byte by byte, other
// text rune by rune; the scratch copies keep both free of allocations.
func (s *editScratch) osaMax(a, b string, k int) int {
	if a == b {
		return 0
	}
	if isASCII(a) && isASCII(b) {
		s.ba = append(s.ba[:0], a...)
		s.bb = append(s.bb[:0], b...)
		return osaSeq(s, s.ba, s.bb, k)
	}
	s.ra = append(s.ra[:0], []rune(a)...)
	s.rb = append(s.rb[:0], []rune(b)...)
	return osaSeq(s, s.ra, s.rb, k)
}

func (s *editScratch) rows(n int) {
	if cap(s.cur) < n {
		s.p2, s.p1, s.cur = make([]int, n), make([]int, n), make([]int, n)
	}
	s.p2, s.p1, s.cur = s.p2[:n], s.p1[:n], s.cur[:n]
}

// osaSeq is the distance between two sequences of bytes or of runes, in
// s's rows.
func osaSeq[E byte | rune](s *editScratch, a, b []E, k int) int {
	if len(a) == 0 {
		return len(b)
	}
	if len(b) == 0 {
		return len(a)
	}
	s.rows(len(b) + 1)
	p2, p1, cur := s.p2, s.p1, s.cur
	for j := range p1 {
		p1[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(p1[j]+1, cur[j-1]+1, p1[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, p2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		p2, p1, cur = p1, cur, p2
		if rowMin > k {
			s.p2, s.p1, s.cur = p2, p1, cur
			return k + 1
		}
	}
	s.p2, s.p1, s.cur = p2, p1, cur
	return p1[len(b)]
}

// sim is 1 - distance/maxlen in [0,1].
func (s *editScratch) sim(a, b string) float64 {
	la, lb := utf8.RuneCountInString(a), utf8.RuneCountInString(b)
	m := max(la, lb)
	if m == 0 {
		return 1
	}
	return 1 - float64(s.osa(a, b))/float64(m)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// score rates how well a normalized value matches a normalized keyword.
// It takes the better of the whole-string edit similarity and a token
// score that rewards values containing every keyword token (exactly, with a
// small typo, or as a prefix: "calif" → "california"), so partial names
// ("Smith" → "John Smith") rank just below exact matches.
func (s *editScratch) score(kw string, kwToks []string, val string) float64 {
	if compactEqual(kw, val) {
		return 1
	}
	tok := 0.0
	if len(kwToks) > 0 {
		// One pass over the value's tokens: best match per keyword token, and
		// whether the value token is covered by some keyword token.
		if cap(s.best) < len(kwToks) {
			s.best = make([]float64, len(kwToks))
		}
		best := s.best[:len(kwToks)]
		clear(best)
		vcount, vmatched := 0, 0
		rest := val
		for rest != "" {
			var vt string
			if i := strings.IndexByte(rest, ' '); i >= 0 {
				vt, rest = rest[:i], rest[i+1:]
			} else {
				vt, rest = rest, ""
			}
			vcount++
			covered := false
			for i, kt := range kwToks {
				// Only similarities above what is already known matter.
				sc := s.tokenSimAbove(kt, vt, min(best[i], 0.75))
				best[i] = max(best[i], sc)
				covered = covered || sc >= 0.75
			}
			if covered {
				vmatched++
			}
		}
		var covK float64
		for _, b := range best {
			covK += b
		}
		tok = 0.85*covK/float64(len(kwToks)) + 0.1*float64(vmatched)/float64(max(1, vcount))
	}
	la, lb := utf8.RuneCountInString(kw), utf8.RuneCountInString(val)
	m := max(la, lb)
	// Whole-string similarity only matters if it can beat the token score.
	limit := int((1 - tok) * float64(m))
	if abs(la-lb) > limit {
		return tok
	}
	d := s.osaMax(kw, val, limit)
	return max(tok, 1-float64(d)/float64(m))
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// tokenSimAbove is the similarity of two tokens (1 for equal, edit
// similarity, at least 0.9 when vt extends a 3+ byte kt) when that exceeds
// floor; otherwise it may return any value <= floor (it stops the distance
// computation early).
func (s *editScratch) tokenSimAbove(kt, vt string, floor float64) float64 {
	if kt == vt {
		return 1
	}
	if len(kt) >= 3 && strings.HasPrefix(vt, kt) {
		return max(0.9, s.sim(kt, vt))
	}
	la, lb := utf8.RuneCountInString(kt), utf8.RuneCountInString(vt)
	m := max(la, lb)
	limit := int((1 - floor) * float64(m))
	if abs(la-lb) > limit {
		return 0
	}
	d := s.osaMax(kt, vt, limit)
	return 1 - float64(d)/float64(m)
}
