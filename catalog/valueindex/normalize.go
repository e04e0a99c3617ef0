package valueindex

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalize folds a value or keyword to the form the index matches on:
// accents removed (NFKD, combining marks dropped), lower case, apostrophes
// dropped ("O'Brien" → "obrien"), any other non-alphanumeric run collapsed to
// one space, trimmed.
func normalize(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	pending := false
	if ascii {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
				fallthrough
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
				if pending && b.Len() > 0 {
					b.WriteByte(' ')
				}
				pending = false
				b.WriteByte(c)
			case c == '\'' || c == '`':
			default:
				pending = true
			}
		}
		return b.String()
	}
	for _, r := range norm.NFKD.String(s) {
		switch {
		case unicode.Is(unicode.Mn, r):
		case r == '\'' || r == '`' || r == '\u2019' || r == '\u2018':
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if pending && b.Len() > 0 {
				b.WriteByte(' ')
			}
			pending = false
			b.WriteRune(unicode.ToLower(r))
		default:
			pending = true
		}
	}
	return b.String()
}

// compact removes the spaces of a normalized string, so "jean luc" and
// "jeanluc" (or "st louis" and "st. louis") compare equal.
func compact(n string) string {
	if strings.IndexByte(n, ' ') < 0 {
		return n
	}
	return strings.ReplaceAll(n, " ", "")
}

// abbrevStop reports words people leave out of initials ("University of
// California" → "UC").
func abbrevStop(w string) bool {
	switch w {
	case "of", "the", "and", "for", "de":
		return true
	}
	return false
}

// initials returns the first letters of the tokens of a normalized string
// that has 2–5 significant tokens, else "".
func initials(n string) string {
	toks := strings.Fields(n)
	var b strings.Builder
	cnt := 0
	for _, t := range toks {
		if abbrevStop(t) {
			continue
		}
		r, _ := utf8.DecodeRuneInString(t)
		if !unicode.IsLetter(r) {
			return ""
		}
		b.WriteRune(r)
		cnt++
	}
	if cnt < 2 || cnt > 5 {
		return ""
	}
	return b.String()
}

// hash64 is FNV-1a over s, skipping spaces when skipSpace is set (so the
// compact form hashes without being built).
func hash64(s string, skipSpace bool) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		if skipSpace && s[i] == ' ' {
			continue
		}
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is the splitmix64 finaliser; it spreads FNV's weak high bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// compactEqual reports whether two normalized strings are equal ignoring spaces.
func compactEqual(a, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && a[i] == ' ' {
			i++
		}
		for j < len(b) && b[j] == ' ' {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if a[i] != b[j] {
			return false
		}
		i++
		j++
	}
}
