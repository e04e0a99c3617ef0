package engine

import (
	"context"
	"errors"
	"strings"
	"unicode"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/prompts"
)

// followUp reads the question against the session's recent asks: when it
// does not clearly stand alone, one small model call rewrites it into a
// standalone question, which the rest of the pipeline answers. The
// rewritten ask is never cached or remembered as a pair (its reading
// depends on this session's history).
func (e *Engine) followUp(ctx context.Context, a *ask) error {
	turns := a.req.History.Turns()
	if len(turns) == 0 || StandsAlone(a.req.Question) {
		return nil
	}
	st := a.trace.begin("followup")
	defer a.trace.end(st)
	q, note, err := Understand(ctx, e.model(a, st, llm.RoleSmall), a.req.Question, turns)
	st.Note = note
	if err != nil || q == "" {
		return err
	}
	a.asked, a.standalone, a.req.Question = a.req.Question, q, q
	return nil
}

// JSONModel is the part of Model a follow-up rewrite needs.
type JSONModel interface {
	JSON(ctx context.Context, p prompts.Prompt, temperature float64, out any) error
}

// Understand rewrites question, a follow-up of turns, into a standalone
// question with one model call: standalone is "" when the question is
// answered as asked (it stands alone, or the model's answer is unusable),
// and note says why for the trace. The caller decides whether to ask at
// all (StandsAlone, an empty history); ask(all) shares it with the
// single-database pipeline.
func Understand(ctx context.Context, m JSONModel, question string, turns []conversation.Turn) (standalone, note string, err error) {
	p, err := prompts.Followup(prompts.FollowupParams{Question: question, Turns: followupTurns(turns)})
	if err != nil {
		return "", "", err
	}
	var out prompts.FollowupResult
	err = m.JSON(ctx, p, 0, &out)
	switch {
	case errors.Is(err, llm.ErrBadOutput) || errors.Is(err, ErrBudget):
		return "", "model answer unusable; the question is answered as asked", nil
	case err != nil:
		return "", "", err
	}
	q := strings.Join(strings.Fields(out.Question), " ")
	if q == "" || len(q) > 4*len(question)+2000 {
		return "", "no usable rewrite; the question is answered as asked", nil
	}
	if q == strings.Join(strings.Fields(question), " ") {
		return "", "stands alone", nil
	}
	return q, "understood as: " + q, nil
}

// followupTurns are the turns as the prompt shows them.
func followupTurns(ts []conversation.Turn) []prompts.FollowupTurn {
	out := make([]prompts.FollowupTurn, 0, len(ts))
	for _, t := range ts {
		out = append(out, prompts.FollowupTurn{Question: t.Asked(), SQL: t.SQL, Columns: t.Columns, Rows: t.Rows, More: t.More})
	}
	return out
}

// remember adds the answered ask to the session's history: the question as
// asked and as understood, the SQL as the model may see it, the columns and
// row count of the trial run (never its rows).
func (e *Engine) remember(a *ask, res *Result) {
	if a.req.History == nil {
		return
	}
	t := conversation.Turn{Question: a.req.Question, SQL: modelView{e.ModelData}.sql(res.SQL(), res.Rewrites()), Rows: -1}
	if a.asked != "" {
		t.Question = a.asked
	}
	t.Standalone = a.standalone
	if res.Chosen >= 0 && res.Chosen < len(res.Candidates) {
		if rows := res.Candidates[res.Chosen].Rows; rows != nil {
			t.Columns, t.Rows, t.More = rows.Columns, len(rows.Values), rows.Truncated
		}
	}
	a.req.History.Add(t)
}

// backward are words that point at an earlier question wherever they
// stand; pointing are words that do so in a short question ("and their
// cities?"), while a long one usually names what they refer to itself.
var (
	backward = map[string]bool{"same": true, "previous": true, "earlier": true, "instead": true,
		"again": true, "former": true, "latter": true, "else": true}
	pointing = map[string]bool{"it": true, "its": true, "they": true, "them": true, "their": true, "theirs": true,
		"those": true, "these": true, "that": true, "this": true, "he": true, "she": true, "his": true, "her": true,
		"him": true, "also": true, "too": true, "ones": true, "others": true, "rest": true}
)

// leading are first words that continue an earlier question.
var leading = map[string]bool{
	"and": true, "but": true, "only": true, "now": true, "then": true, "just": true, "except": true, "excluding": true,
	"including": true, "sorted": true, "sort": true, "order": true, "by": true, "per": true,
	"with": true, "without": true, "or": true, "plus": true, "same": true, "limit": true, "group": true, "broken": true,
}

// shortQuestion is the most words a question has whose pointing words are
// taken to refer back.
const shortQuestion = 8

// StandsAlone reports whether a question clearly needs no earlier one: no
// opening that continues ("and …", "only …", "what about …"), no word that
// points back ("same", "instead"), no pronoun in a short question ("and
// their cities?"), and at least four words. When in doubt it says no, and
// the model decides (it returns a standalone question unchanged).
func StandsAlone(q string) bool {
	words := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' })
	if len(words) < 4 || leading[words[0]] {
		return false
	}
	if (words[0] == "what" || words[0] == "how") && words[1] == "about" {
		return false
	}
	for _, w := range words {
		if backward[w] || (pointing[w] && len(words) <= shortQuestion) {
			return false
		}
	}
	return true
}
