package report

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/runner"

	"github.com/nlproxy/nlproxy/integration/clienttest"
)

func str(s string) *string { return &s }

// sampleResults: two profiles over three questions, with every outcome,
// a trace, result heads and text that needs escaping.
func sampleResults() []runner.Result {
	conf := 0.82
	trace, _ := json.Marshal([]traceStage{{Stage: "keywords", MS: 12, LLMCalls: 1, PromptTokens: 300, CompletionTokens: 20, Note: "author, citations"},
		{Stage: "generate", MS: 900, LLMCalls: 1, PromptTokens: 2100, CompletionTokens: 180, Note: "SELECT …"}})
	head := &compare.Table{Columns: []string{"name", "n"}, Rows: [][]*string{{str("Ada <Lovelace>"), str("3")}, {nil, str("1")}}}
	base := []runner.Result{
		{ID: "academic/q1", DB: "academic", Category: "group_by", Question: `Who wrote "<b>ML</b>" papers?`, Outcome: runner.Correct,
			SQL: "SELECT name, count(*) AS n FROM author GROUP BY name", Gold: "SELECT {name}, count(*) AS n FROM author GROUP BY {}",
			LLMCalls: 2, PromptTokens: 2400, CompTokens: 200, AskMS: 950, Trace: trace, GoldHead: head, GenHead: head, GoldRows: 2, GenRows: 2, Confidence: &conf},
		{ID: "yelp/q2", DB: "yelp", Category: "order_by", Question: "Top 3 businesses by rating?", Outcome: runner.Wrong,
			SQL: "SELECT name FROM business ORDER BY rating LIMIT 4", Gold: "SELECT name FROM business ORDER BY rating DESC LIMIT 3", LLMCalls: 3, AskMS: 2400},
		{ID: "yelp/idk3", DB: "yelp", Category: "cat_a", Question: "What is dark matter?", Unanswerable: true, Outcome: runner.Abstained,
			SQLState: "42N02", Error: "ask: the data cannot answer this", Hint: "Ask about businesses or reviews.", AskMS: 40},
	}
	var out []runner.Result
	for _, p := range []string{"fast", "max"} {
		for _, r := range base {
			r.Run, r.Profile, r.Dataset = "test", p, "sql-eval"
			if p == "max" && r.Outcome == runner.Wrong {
				r.Outcome, r.LLMCalls = runner.Correct, 9
			}
			out = append(out, r)
		}
	}
	return out
}

func TestWriteHTMLSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, sampleResults(), HTMLOptions{Title: "t", Note: "simulated", Now: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	// No external assets: nothing is fetched from anywhere.
	for _, re := range []string{`(?i)<link\b`, `(?i)\bsrc\s*=`, `(?i)url\(`, `(?i)@import`} {
		if regexp.MustCompile(re).MatchString(page) {
			t.Errorf("page matches %s: not self-contained", re)
		}
	}
	for _, m := range regexp.MustCompile(`https?://[^"' <]+`).FindAllString(page, -1) {
		if m != "http://www.w3.org/2000/svg" { // the SVG namespace name, never fetched
			t.Errorf("external reference %q", m)
		}
	}
	if strings.Contains(page, "<b>ML</b>") || strings.Contains(page, "Ada <Lovelace>") {
		t.Error("question or result text not escaped")
	}
	if n := strings.Count(page, "<svg"); n != 3 {
		t.Errorf("%d plots, want 3", n)
	}
	for _, want := range []string{"test / fast", "test / max", "academic/q1", "keywords", "42N02", "unanswerable"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// chromiumCheck loads a local page in headless Chromium (see
// clienttest.Chromium).
func chromiumCheck(ctx context.Context, t *testing.T, page string, args ...string) (dom string, console []string) {
	t.Helper()
	return clienttest.Chromium(ctx, t, "file://"+page, args...)
}

// TestHTMLInChromium renders the report in headless Chromium: the script
// runs to the end, nothing is logged to the console, and a screenshot goes
// to the test's artifact directory (go test -artifacts keeps it).
func TestHTMLInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.ArtifactDir()
	page := filepath.Join(dir, "report.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, sampleResults(), HTMLOptions{Title: "nlproxy eval report test", Note: "simulated"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := chromiumCheck(ctx, t, page, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Error("the page's script did not run to the end")
	}
	if !strings.Contains(dom, "(6 of 6)") {
		t.Errorf("drill-down filter did not count the questions")
	}
	shot := filepath.Join(dir, "report.png")
	_, console = chromiumCheck(ctx, t, page, "--screenshot="+shot, "--window-size=1400,1800", "--hide-scrollbars")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("screenshot is %d bytes, not a rendered page", len(png))
	}
	t.Logf("report and screenshot in %s", dir)
}

// TestChromiumCheckSeesErrors: the console check fails on a page whose
// script throws, so a clean run means something.
func TestChromiumCheckSeesErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	page := filepath.Join(t.TempDir(), "bad.html")
	if err := os.WriteFile(page, []byte(`<!DOCTYPE html><html><body><script>notAFunction();</script></body></html>`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, console := chromiumCheck(ctx, t, page, "--dump-dom")
	if len(console) == 0 || !strings.Contains(strings.Join(console, "\n"), "notAFunction") {
		t.Errorf("the thrown error was not seen: %q", console)
	}
}
