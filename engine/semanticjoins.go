package engine

import (
	"strings"
)

// addSemanticJoins puts the semantic layer's join paths (its entities,
// Engine.SemanticJoins) ahead of the workload's and those inferred from
// names: a team's declared joins are the best evidence there is. A path
// counts only where both tables and columns are ones the asker may read.
func (e *Engine) addSemanticJoins(a *ask) {
	if len(e.SemanticJoins) == 0 {
		return
	}
	lx := e.lex.get(a.schema0)
	var links []learnedLink
	seen := map[[2]string]bool{}
	for _, j := range e.SemanticJoins {
		ta, ca, okA := splitColumnRef(j.From)
		tb, cb, okB := splitColumnRef(j.To)
		if !okA || !okB {
			continue
		}
		ia, okA := lx.index[ta]
		ib, okB := lx.index[tb]
		if !okA || !okB || ia == ib || a.schema0.Tables[ia].Column(ca) == nil || a.schema0.Tables[ib].Column(cb) == nil {
			continue
		}
		if k := [2]string{j.From, j.To}; !seen[k] {
			seen[k] = true
			links = append(links, learnedLink{a: ia, b: ib, colA: ca, colB: cb, count: semanticJoin})
		}
	}
	if len(links) == 0 {
		return
	}
	if a.learned == nil {
		a.learned = &learned{columns: map[string]int{}}
	}
	a.learned.joins = append(links, a.learned.joins...)
}

// semanticJoin is the use count a semantic-layer join path carries (shown
// as "semantic model", not as uses).
const semanticJoin = -1

// splitColumnRef splits "schema.table.column" into "schema.table" and
// "column".
func splitColumnRef(ref string) (table, column string, ok bool) {
	i := strings.LastIndexByte(ref, '.')
	if i <= 0 || !strings.Contains(ref[:i], ".") {
		return "", "", false
	}
	return ref[:i], ref[i+1:], true
}
