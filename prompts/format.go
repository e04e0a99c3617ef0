package prompts

import (
	"strings"
	"unicode/utf8"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Limits on what the fixer shows of a result sample, to keep prompts small.
const (
	sampleRows     = 5
	sampleCellRune = 40
	nearRunes      = 40
)

// sqlString quotes s as a SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// oneLine collapses whitespace runs (newlines included) to single spaces, so
// a value cannot break the prompt's list layout.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func truncate(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// renderSample formats rows as a pipe-separated table, bounded in rows and
// cell width.
func renderSample(s *Sample) string {
	if s == nil || len(s.Columns) == 0 {
		return ""
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("  |")
		for _, c := range cells {
			b.WriteString(" ")
			b.WriteString(truncate(c, sampleCellRune))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	line(s.Columns)
	for i, r := range s.Rows {
		if i == sampleRows {
			b.WriteString("  (more rows not shown)\n")
			break
		}
		line(r)
	}
	return strings.TrimRight(b.String(), "\n")
}

// near quotes the SQL around a 1-based character position (as in a
// PostgreSQL ErrorResponse), or returns "" when the position is unknown.
func near(sql string, pos int) string {
	r := []rune(sql)
	if pos <= 0 || pos > len(r) {
		return ""
	}
	i := pos - 1
	end := i
	for end < len(r) && end-i < nearRunes {
		end++
	}
	return "`" + oneLine(string(r[i:end])) + "`"
}

// errorTip gives a short, code-specific repair hint for common SQLSTATEs.
func errorTip(code string) string {
	switch code {
	case pg.CodeUndefinedColumn:
		return "a column does not exist under that name or alias; use a column from the schema and check which table alias it belongs to."
	case pg.CodeUndefinedTable:
		return "a table does not exist under that name; use a table from the schema, with its exact (possibly double-quoted) name."
	case pg.CodeAmbiguousColumn:
		return "a column name is ambiguous; qualify it with the table alias."
	case pg.CodeUndefinedFunction:
		return "no function or operator matches these argument types; cast the arguments (e.g. col::numeric, col::text) or use another function."
	case pg.CodeGroupingError:
		return "every selected column that is not aggregated must appear in GROUP BY."
	case pg.CodeDatatypeMismatch, pg.CodeInvalidTextRepresentation, pg.CodeInvalidDatetimeFormat, pg.CodeDatetimeFieldOverflow:
		return "a value or expression does not fit the column's type; cast it or write the literal in the right format (DATE '2024-01-31')."
	case pg.CodeSyntaxError:
		return "the SQL is malformed; rewrite it as one complete PostgreSQL SELECT."
	case pg.CodeDivisionByZero:
		return "division by zero; wrap the divisor in NULLIF(divisor, 0)."
	case pg.CodeQueryCanceled:
		return "the query ran past the time limit; avoid cross joins and unneeded subqueries, join on keys and filter early."
	case pg.CodeCardinalityViolation:
		return "a scalar subquery returned more than one row; aggregate it, add LIMIT 1, or use IN/EXISTS."
	case pg.CodeInsufficientPrivilege:
		return "only read-only queries on the tables you can read are allowed."
	}
	return ""
}
