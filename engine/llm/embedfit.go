package llm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/ollama/ollama/api"
)

// embedFitting sends one batch through send; when the server refuses it
// because a text is longer than the model's context, it sends the batch
// again with its longest texts cut to 1,024 runes, then in half, up to 8
// times. Ollama v0.17.4 is meant to truncate such input itself, but for
// all-MiniLM-L6-v2 and long text with non-ASCII punctuation (the sql-eval
// database summaries, review texts) it answers 400 "the input length
// exceeds the context length"; the indexes then ranked by words alone,
// silently, and tried again at every search. Only the tail is lost, which
// the model would not have read whole anyway.
func embedFitting(ctx context.Context, batch []string, send func(context.Context, []string) ([][]float32, error)) ([][]float32, error) {
	const (
		tries    = 8
		minCut   = 128  // runes: below this the text is not what is too long
		firstCut = 1024 // runes: a few hundred tokens
		ctxHint  = "context length"
	)
	vecs, err := send(ctx, batch)
	for try := 0; err != nil && try < tries && tooLongForContext(err, ctxHint); try++ {
		longest := 0
		for _, t := range batch {
			longest = max(longest, utf8.RuneCountInString(t))
		}
		cut := longest / 2
		if try == 0 {
			// Each try costs a full pass over the batch: the first cut goes
			// straight to what any model's context holds in words.
			cut = min(cut, firstCut)
		}
		if cut < minCut {
			break
		}
		shorter := make([]string, len(batch))
		for i, t := range batch {
			shorter[i] = cutRunes(t, cut)
		}
		batch = shorter
		vecs, err = send(ctx, batch)
	}
	return vecs, err
}

// tooLongForContext: a 400 whose message names the context length.
func tooLongForContext(err error, hint string) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusBadRequest &&
		strings.Contains(strings.ToLower(se.ErrorMessage), hint)
}

func cutRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
