package engine

import (
	"encoding/json"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// Early stop: a streamed answer is read only until it holds what the step
// asked for; the rest would be tokens the user waits for and nobody reads
// (a small model goes on with more "Check:" lines, a second query, prose).

// sqlComplete: the answer holds a whole statement: a closed ```sql fence,
// a statement the parser accepts followed by more text, or a finished
// UNANSWERABLE line.
func sqlComplete(text string) bool {
	lower := strings.ToLower(text)
	if i := strings.Index(lower, "```sql"); i >= 0 {
		rest := text[i+len("```sql"):]
		j := strings.Index(rest, "```")
		return j >= 0 && strings.TrimSpace(rest[:j]) != ""
	}
	if strings.Contains(text, "```") {
		return false // some other fence is open: wait for it
	}
	if _, ok := llm.Unanswerable(text); ok {
		return strings.HasSuffix(text, "\n")
	}
	// A bare statement: from a line starting SELECT or WITH to a ';' that
	// more text follows.
	start, off := -1, 0
	for _, line := range strings.SplitAfter(text, "\n") {
		l := strings.ToUpper(strings.TrimSpace(line))
		if strings.HasPrefix(l, "SELECT ") || strings.HasPrefix(l, "WITH ") || l == "SELECT" || l == "WITH" {
			start = off
			break
		}
		off += len(line)
	}
	if start < 0 {
		return false
	}
	stmt, after, ok := strings.Cut(text[start:], ";")
	if !ok || strings.TrimSpace(after) == "" || !strings.Contains(after, "\n") {
		return false
	}
	_, err := pg_query.Parse(stmt)
	return err == nil
}

// jsonComplete: the answer is one whole JSON object (servers without a
// JSON grammar let a model write on after it).
func jsonComplete(text string) bool {
	t := strings.TrimSpace(text)
	return strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && json.Valid([]byte(t))
}
