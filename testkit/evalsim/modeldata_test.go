package evalsim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/testkit/evalsim"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// modelDataRuns: the max profile (every generator, the fixer with samples,
// the pairwise selector, decomposition with sub-results) runs the questions
// with P = 0.5 and Q = 0.8 twice, with --model-data rows (today's default)
// and schema, and every prompt the fake model received is scanned for the
// databases' stored text values. In schema mode none may appear; in rows
// mode some must (otherwise the scan could not fail). A value counts only
// when the prompt could not have it from elsewhere: the question, the
// gold SQL (the simulated model writes it), the schema as rendered without
// values, or the prompt templates. The right answers of both runs are
// logged: the effect of the switch on the simulated evaluation.
func modelDataRuns(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stored := storedValues(t, ctx, f)
	if len(stored) < 100 {
		t.Fatalf("only %d stored text values to look for", len(stored))
	}
	opts := evalsim.Options{P: 0.5, Q: 0.8, Seed: seed}
	leaks := map[engine.ModelData]int{}
	right := map[engine.ModelData]int{}
	for _, mode := range []engine.ModelData{engine.ModelDataRows, engine.ModelDataSchema} {
		f.modelData = mode
		res, _, _ := simulate(t, f, opts, "max", "max-p05-"+string(mode))
		right[mode] = rightCount(res)
		reqs := f.fake.Requests()
		found := map[string]string{} // value → the step's prompt start
		for _, r := range reqs {
			text := promptText(r)
			for g := range ngrams(text, maxValueWords) {
				if stored[g] {
					if _, ok := found[g]; !ok {
						found[g] = clip(text, 200)
					}
				}
			}
		}
		leaks[mode] = len(found)
		t.Logf("model data %s: %d prompts, %d distinct stored values in them; %d/%d right (simulated)", mode, len(reqs), len(found), right[mode], len(res))
		if mode == engine.ModelDataSchema {
			n := 0
			for v, where := range found {
				if n++; n > 5 {
					break
				}
				t.Errorf("schema mode: stored value %q reached the model in:\n%s", v, where)
			}
		}
	}
	f.modelData = ""
	if leaks[engine.ModelDataRows] == 0 {
		t.Errorf("rows mode: no stored value found in any prompt; the scan cannot tell the modes apart")
	}
}

// maxValueWords bounds the words of a value the scan looks for.
const maxValueWords = 6

// storedValues are the distinct text values of every dataset database
// (normalised as ngrams writes them), at least four characters with a
// letter, less those the prompts may carry for other reasons.
func storedValues(t *testing.T, ctx context.Context, f *fixture) map[string]bool {
	t.Helper()
	allowed := map[string]bool{}
	allow := func(text string) {
		for g := range ngrams(text, maxValueWords) {
			allowed[g] = true
		}
	}
	for _, q := range f.ds.Questions {
		allow(q.Text())
		allow(q.Gold)
	}
	tmpls, _ := filepath.Glob(filepath.Join(repoRoot(t), "prompts", "templates", "*"))
	for _, p := range tmpls {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		allow(string(b))
	}
	out := map[string]bool{}
	for _, db := range f.ds.DBs() {
		snap, err := f.cats.Get(ctx, f.prefix+db)
		if err != nil {
			t.Fatal(err)
		}
		allow(snap.Schema.RenderFull(catalog.RenderOptions{NoValues: true}))
		conn, err := f.direct(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, `SELECT format('SELECT DISTINCT %I::text FROM %I.%I WHERE %I IS NOT NULL LIMIT 2000', column_name, table_schema, table_name, column_name)
			FROM information_schema.columns WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'character')`)
		if err != nil {
			t.Fatal(err)
		}
		var queries []string
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				t.Fatal(err)
			}
			queries = append(queries, q)
		}
		rows.Close()
		for _, q := range queries {
			vr, err := conn.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for vr.Next() {
				var v string
				if err := vr.Scan(&v); err != nil {
					t.Fatal(err)
				}
				n := normalise(v)
				if len(n) >= 4 && strings.IndexFunc(n, unicode.IsLetter) >= 0 && len(strings.Fields(n)) <= maxValueWords {
					out[n] = true
				}
			}
			vr.Close()
		}
		conn.Close(ctx)
	}
	for v := range out {
		if allowed[v] {
			delete(out, v)
		}
	}
	return out
}

// normalise lower-cases s and writes every run of other than letters and
// digits as one space.
func normalise(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }), " ")
}

// ngrams are the runs of 1..n consecutive words of the normalised text.
func ngrams(text string, n int) map[string]bool {
	words := strings.Fields(normalise(text))
	out := make(map[string]bool, len(words)*n)
	for i := range words {
		for k := 1; k <= n && i+k <= len(words); k++ {
			out[strings.Join(words[i:i+k], " ")] = true
		}
	}
	return out
}

// promptText is everything a request showed the model.
func promptText(r fakeollama.Recorded) string {
	var b strings.Builder
	b.WriteString(r.System + "\n" + r.Prompt + "\n")
	for _, m := range r.Messages {
		b.WriteString(m.Content + "\n")
	}
	for _, in := range r.Input {
		b.WriteString(in + "\n")
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func repoRoot(t *testing.T) string {
	return filepath.Join(datasetDir(t), "..", "..")
}
