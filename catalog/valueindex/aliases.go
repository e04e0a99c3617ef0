package valueindex

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Alias pairs a short code with the name it stands for, as the database
// itself shows it: a row holding both (state_code 'CA', state_name
// 'California') or a column comment listing its codes ("CA = California").
// Lookups use it both ways: a question saying California finds 'CA' stored
// in any column, and a literal 'California' compared with a column of codes
// is corrected to 'CA'.
type Alias struct {
	Code, Name string
	// Columns names the code column and the name column the pair was seen
	// in (a comment's pair: the commented column twice); literal correction
	// prefers pairs whose columns share a word with the corrected column.
	CodeColumn, NameColumn string
}

// Alias mining bounds: codes are short, and pairs are read from at most a
// few column pairs per table and a bounded number of rows.
const (
	maxCodeLen         = 4
	maxAliasRows       = 2000
	maxAliasPairsTable = 4
	maxAliasQueries    = 256
)

// codeLike reports whether v reads as a code: 1–4 upper-case letters or
// digits, at least one letter ("CA", "LAX", "F1").
func codeLike(v string) bool {
	if len(v) == 0 || len(v) > maxCodeLen {
		return false
	}
	letter := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'A' && c <= 'Z':
			letter = true
		case c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return letter
}

// nameLike reports whether v reads as a name a code could stand for: longer
// than a code, with lower-case letters.
func nameLike(v string) bool {
	if len(v) <= maxCodeLen {
		return false
	}
	return strings.IndexFunc(v, func(r rune) bool { return r >= 'a' && r <= 'z' }) >= 0
}

// columnShape classifies an indexed column by its values: code (nearly all
// code-like, 2+ values) or name (mostly name-like).
func (b *builder) columnShape(c colMeta) (code, name bool) {
	n := int(c.End - c.Start)
	if n < 2 {
		return false, false
	}
	codes, names := 0, 0
	for id := c.Start; id < c.End; id++ {
		v := string(b.raw[b.rawOff[id]:b.rawOff[id+1]])
		if codeLike(v) {
			codes++
		} else if nameLike(v) {
			names++
		}
	}
	return codes*10 >= n*9, names*2 >= n
}

// mineRowAliases reads (code, name) pairs from tables that hold a code
// column next to a name column, keeping a pair only where the table maps
// each code to one name and each name to one code.
func (b *builder) mineRowAliases(ctx context.Context, tx pgx.Tx) []Alias {
	type shaped struct {
		col        colMeta
		code, name bool
	}
	byTable := map[string][]shaped{}
	var order []string
	for _, c := range b.cols {
		if b.readable[tableKey{c.Schema, c.Table}] == nil {
			continue
		}
		code, name := b.columnShape(c)
		if !code && !name {
			continue
		}
		k := c.Schema + "\x00" + c.Table
		if _, ok := byTable[k]; !ok {
			order = append(order, k)
		}
		byTable[k] = append(byTable[k], shaped{c, code, name})
	}
	var out []Alias
	queries := 0
	for _, k := range order {
		pairs := 0
		for _, cc := range byTable[k] {
			if !cc.code {
				continue
			}
			// The name a code stands for sits in the column named like it
			// (state_code → state_name) or in a plain "name"/"description"
			// column (country: code, name). A capital next to a state code,
			// or a shop's name next to its state, is no alias.
			var related []colMeta
			for _, nc := range byTable[k] {
				if nc.name && nc.col.Name != cc.col.Name &&
					(sharesWord(nameWords(cc.col.Name), nc.col.Name) || len(nameWords(nc.col.Name)) == 0) {
					related = append(related, nc.col)
				}
			}
			for _, nc := range related {
				if pairs >= maxAliasPairsTable || queries >= maxAliasQueries {
					break
				}
				pairs++
				queries++
				got, err := readPairs(ctx, tx, b.readable[tableKey{cc.col.Schema, cc.col.Table}], cc.col, nc)
				if err != nil {
					if ctx.Err() != nil {
						return out
					}
					continue // a failed read only loses the aliases
				}
				out = append(out, got...)
			}
		}
	}
	return out
}

// readPairs reads both columns in their own types (no cast: an enum's
// owner may have made a cast of her own to text), from rel as Build
// checked it.
func readPairs(ctx context.Context, tx pgx.Tx, rel *relation, code, name colMeta) (out []Alias, err error) {
	sp, end, err := savepoint(ctx, tx)
	if err != nil {
		return nil, err
	}
	defer end(&err)
	from := rel.from(code.Schema, code.Table)
	c, n := quoteIdent(code.Name), quoteIdent(name.Name)
	rows, err := sp.Query(ctx, "SELECT DISTINCT "+c+", "+n+" FROM "+from+
		" WHERE "+c+" IS NOT NULL AND "+n+" IS NOT NULL LIMIT $1", maxAliasRows+1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	names := map[string]map[string]bool{} // code → names
	codes := map[string]map[string]bool{} // normalized name → codes
	var pairs []Alias
	for rows.Next() {
		a := Alias{CodeColumn: code.Name, NameColumn: name.Name}
		raw := rows.RawValues()
		if raw[0] == nil || raw[1] == nil {
			continue
		}
		a.Code, a.Name = strings.TrimRight(string(raw[0]), " "), strings.TrimRight(string(raw[1]), " ")
		if !codeLike(a.Code) || !nameLike(a.Name) {
			continue
		}
		pairs = append(pairs, a)
		if names[a.Code] == nil {
			names[a.Code] = map[string]bool{}
		}
		names[a.Code][a.Name] = true
		nn := normalize(a.Name)
		if codes[nn] == nil {
			codes[nn] = map[string]bool{}
		}
		codes[nn][a.Code] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(pairs) > maxAliasRows {
		return nil, nil // too many to be a code list
	}
	for _, a := range pairs {
		if len(names[a.Code]) == 1 && len(codes[normalize(a.Name)]) == 1 {
			out = append(out, a)
		}
	}
	if len(out) < 2 {
		return nil, nil // one pair is no evidence of a code list
	}
	return out, nil
}

// commentAlias matches "CODE = Name", "CODE: Name", "CODE - Name" and
// "CODE (Name)" in a column comment.
var commentAlias = regexp.MustCompile(`\b([A-Z][A-Z0-9]{0,3})\s*(?:=|:|→|->|\s-\s|\()\s*([A-Za-z][A-Za-z .'&/-]*[A-Za-z])`)

// commentAliases reads a code list from a column comment ("status: A =
// Active, S = Suspended"), keeping codes the column holds (its enum labels
// or, for text columns, any — checked against the values at lookup time).
func commentAliases(column, comment string) []Alias {
	var out []Alias
	for _, m := range commentAlias.FindAllStringSubmatch(comment, -1) {
		name := strings.TrimSpace(m[2])
		if len(name) > len(m[1]) {
			out = append(out, Alias{Code: m[1], Name: name, CodeColumn: column, NameColumn: column})
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// buildAliases derives the alias maps: normalized name → its pairs and
// normalized code → its pairs.
func (ix *Index) buildAliases() {
	ix.byName = map[string][]int32{}
	ix.byCode = map[string][]int32{}
	for i, a := range ix.aliases {
		ix.byName[normalize(a.Name)] = append(ix.byName[normalize(a.Name)], int32(i))
		ix.byCode[normalize(a.Code)] = append(ix.byCode[normalize(a.Code)], int32(i))
	}
}

// counterparts are what a normalized keyword or literal stands for through
// the aliases: codes for a name, names for a code. With column set (literal
// correction), only pairs seen in columns sharing a word with it count, so
// 'Canada' (a country's code 'CA') is not turned into California's 'CA' in
// a state column.
func (ix *Index) counterparts(n, column string) []string {
	var out []string
	words := nameWords(column)
	take := func(ids []int32, code bool) {
		for _, i := range ids {
			a := ix.aliases[i]
			v := a.Code
			if code {
				v = a.Name
			}
			if (column == "" || sharesWord(words, a.CodeColumn, a.NameColumn)) && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	take(ix.byName[n], false)
	take(ix.byCode[n], true)
	return out
}

// nameWords are the words of a column name that say what it holds
// ("state_code" → state), without the generic ones.
func nameWords(col string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(col), func(r rune) bool { return !(r >= 'a' && r <= 'z') }) {
		switch w {
		case "code", "name", "id", "abbr", "abbrev", "abbreviation", "short", "full", "long", "label", "desc", "description":
			continue
		}
		out = append(out, w)
	}
	return out
}

func sharesWord(words []string, cols ...string) bool {
	for _, c := range cols {
		for _, w := range nameWords(c) {
			for _, x := range words {
				if w == x || strings.TrimSuffix(w, "s") == strings.TrimSuffix(x, "s") {
					return true
				}
			}
		}
	}
	return false
}

// Aliases lists the code↔name pairs the index learnt.
func (ix *Index) Aliases() []Alias { return ix.aliases }

// aliasScore is the score of a value found through an alias: below an
// exact match, above the correction threshold.
const aliasScore = 0.9
