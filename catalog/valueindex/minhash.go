package valueindex

// minhasher computes MinHash signatures over the character 3-grams of a
// normalized string and folds them into LSH band keys. With b bands of r rows
// a pair with Jaccard similarity J shares at least one band with probability
// 1-(1-J^r)^b; the defaults (32×4 = 128 hashes) put the S-curve's midpoint
// near J≈0.42, which is where one or two typos leave a medium-length value.
type minhasher struct {
	bands, rows int
	a, b        []uint64 // per hash function: h_i(x) = a_i*x + b_i (mod 2^64)
}

func newMinhasher(bands, rows int, seed uint64) *minhasher {
	n := bands * rows
	m := &minhasher{bands: bands, rows: rows, a: make([]uint64, n), b: make([]uint64, n)}
	x := seed
	next := func() uint64 { // splitmix64
		x += 0x9e3779b97f4a7c15
		return mix64(x)
	}
	for i := 0; i < n; i++ {
		m.a[i] = next() | 1
		m.b[i] = next()
	}
	return m
}

// grams appends the 64-bit hashes of the 3-grams of " "+n+" " (the padding
// gives word boundaries their own grams). Strings shorter than one gram hash
// whole.
func grams(dst []uint64, n string) []uint64 {
	if n == "" {
		return dst
	}
	p := len(n) + 2
	if p < 3 {
		return append(dst, hash64(n, false))
	}
	at := func(i int) uint64 {
		if i == 0 || i == p-1 {
			return ' '
		}
		return uint64(n[i-1])
	}
	for i := 0; i+3 <= p; i++ {
		g := at(i) | at(i+1)<<8 | at(i+2)<<16
		dst = append(dst, mix64(g+0x51ed27))
	}
	return dst
}

// bandKeys writes one 32-bit key per band for the gram set into keys
// (len == bands). sig is scratch of len bands*rows.
func (m *minhasher) bandKeys(gs []uint64, sig []uint32, keys []uint32) {
	for i := range sig {
		sig[i] = ^uint32(0)
	}
	for _, g := range gs {
		for i := range sig {
			h := uint32((m.a[i]*g + m.b[i]) >> 32)
			if h < sig[i] {
				sig[i] = h
			}
		}
	}
	for bnd := 0; bnd < m.bands; bnd++ {
		h := uint64(bnd+1) * 0x9e3779b97f4a7c15
		for r := 0; r < m.rows; r++ {
			h = mix64(h ^ uint64(sig[bnd*m.rows+r]))
		}
		keys[bnd] = uint32(h >> 32)
	}
}
