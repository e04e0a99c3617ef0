package askall

import (
	"fmt"
	"math/big"
	"strings"
)

// Combine operations the plan may ask for. Arithmetic over the steps'
// results is done here, exactly, never by the model (the paper's answers
// went wrong at exactly this point).
const (
	CombineNone       = "none"
	CombineLarger     = "larger"
	CombineSmaller    = "smaller"
	CombineDifference = "difference"
	CombineRatio      = "ratio"
	CombineSum        = "sum"
)

// figure is one step's single numeric result.
type figure struct {
	step     int // 1-based
	database string
	text     string
	value    *big.Rat
}

// scalar returns the step's result as a number when it is exactly one row
// with one numeric column.
func scalar(st *Step) (*big.Rat, string, bool) {
	if st.Rows == nil || len(st.Rows.Values) != 1 || len(st.Rows.Values[0]) != 1 || st.Rows.Values[0][0] == nil {
		return nil, "", false
	}
	text := strings.TrimSpace(*st.Rows.Values[0][0])
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, "", false
	}
	return r, text, true
}

// combine computes op over the steps with a numeric result and returns the
// sentences that state it. Steps without one are named, so a partial
// comparison is never presented as complete.
func combine(op string, steps []Step) []string {
	if op == "" || op == CombineNone {
		return nil
	}
	var figs []figure
	var missing []string
	for i := range steps {
		st := &steps[i]
		if v, text, ok := scalar(st); ok {
			figs = append(figs, figure{step: i + 1, database: st.Database, text: text, value: v})
		} else {
			missing = append(missing, fmt.Sprintf("step %d (%s)", i+1, st.Database))
		}
	}
	label := func(f figure) string { return fmt.Sprintf("step %d (%s) = %s", f.step, f.database, f.text) }
	var out []string
	if len(missing) > 0 || len(figs) < 2 {
		if op != CombineSum || len(figs) == 0 {
			msg := fmt.Sprintf("cannot compute %s: ", op)
			if len(missing) > 0 {
				msg += "no single number from " + strings.Join(missing, ", ")
			} else {
				msg += "it needs two numbers"
			}
			return append(out, msg)
		}
	}
	a, b := figs[0], figs[min(1, len(figs)-1)]
	switch op {
	case CombineLarger, CombineSmaller:
		switch c := a.value.Cmp(b.value); {
		case c == 0:
			out = append(out, fmt.Sprintf("%s and %s are equal", label(a), label(b)))
		case (c > 0) == (op == CombineLarger):
			out = append(out, fmt.Sprintf("%s is %s than %s, by %s", label(a), op, label(b), ratString(new(big.Rat).Abs(new(big.Rat).Sub(a.value, b.value)))))
		default:
			out = append(out, fmt.Sprintf("%s is %s than %s, by %s", label(b), op, label(a), ratString(new(big.Rat).Abs(new(big.Rat).Sub(a.value, b.value)))))
		}
	case CombineDifference:
		out = append(out, fmt.Sprintf("%s minus %s = %s", label(a), label(b), ratString(new(big.Rat).Sub(a.value, b.value))))
	case CombineRatio:
		if b.value.Sign() == 0 {
			out = append(out, fmt.Sprintf("%s divided by %s is undefined (division by zero)", label(a), label(b)))
		} else {
			out = append(out, fmt.Sprintf("%s divided by %s = %s", label(a), label(b), ratString(new(big.Rat).Quo(a.value, b.value))))
		}
	case CombineSum:
		sum := new(big.Rat)
		parts := make([]string, 0, len(figs))
		for _, f := range figs {
			sum.Add(sum, f.value)
			parts = append(parts, label(f))
		}
		s := fmt.Sprintf("sum of %s = %s", strings.Join(parts, ", "), ratString(sum))
		if len(missing) > 0 {
			s += " (without " + strings.Join(missing, ", ") + ": no single number)"
		}
		out = append(out, s)
	default:
		out = append(out, fmt.Sprintf("cannot compute %q: unknown operation", op))
	}
	return out
}

// ratString writes r exactly when it is an integer or a finite decimal
// with up to 12 places, else rounded to 12 places.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	s := r.FloatString(12)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
