package llm_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/engine/llm"
)

var update = flag.Bool("update", false, "rewrite the .golden files of testdata/real")

// TestRealTranscripts runs the parsers over answers a real small model
// gave (testdata/real/*.json, recorded from Gemma 3 270M on Ollama) and
// compares what they make of them with the .golden files.
func TestRealTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/real/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var tr struct {
				Content    string `json:"content"`
				DoneReason string `json:"done_reason"`
			}
			if err := json.Unmarshal(b, &tr); err != nil {
				t.Fatal(err)
			}
			got := parseAll(tr.Content)
			golden := strings.TrimSuffix(path, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("parsers on %s:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

// parseAll says what each parser makes of an answer.
func parseAll(text string) string {
	var b strings.Builder
	sql, err := llm.ExtractSQL(text)
	fmt.Fprintf(&b, "ExtractSQL: %s\n", outcomeOf(sql, err))
	var v any
	err = llm.ExtractJSON(text, &v)
	js, _ := json.Marshal(v)
	fmt.Fprintf(&b, "ExtractJSON: %s\n", outcomeOf(string(js), err))
	reason, ok := llm.Unanswerable(text)
	fmt.Fprintf(&b, "Unanswerable: %v %q\n", ok, reason)
	return b.String()
}

func outcomeOf(s string, err error) string {
	switch {
	case errors.Is(err, llm.ErrBadOutput):
		return "ErrBadOutput"
	case err != nil:
		return "error " + err.Error()
	}
	return fmt.Sprintf("%q", s)
}
