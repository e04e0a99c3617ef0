package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/runner"

	"github.com/nlproxy/nlproxy/testkit/clienttest"
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
	if !strings.Contains(dom, "showing 6 of 6") {
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

// layoutCheck runs in the page after the report's own script: it counts
// category labels that overlap one another (compared in one label's own,
// slanted, frame: they share the rotation), that reach into the legend, or
// that leave their plot, and writes the counts on <body>.
const layoutCheck = `<script>
(function () {
  var ts = Array.prototype.slice.call(document.querySelectorAll("svg text.cat"));
  var overlaps = 0, legend = 0, outside = 0;
  for (var i = 0; i < ts.length; i++) {
    var bi = ts[i].getBBox();
    for (var j = i + 1; j < ts.length; j++) {
      var m = ts[i].getScreenCTM().inverse().multiply(ts[j].getScreenCTM());
      var bj = ts[j].getBBox();
      var p = new DOMPoint(bj.x, bj.y).matrixTransform(m), q = new DOMPoint(bj.x + bj.width, bj.y + bj.height).matrixTransform(m);
      var x0 = Math.min(p.x, q.x), x1 = Math.max(p.x, q.x), y0 = Math.min(p.y, q.y), y1 = Math.max(p.y, q.y);
      if (x0 < bi.x + bi.width && bi.x < x1 && y0 < bi.y + bi.height && bi.y < y1) overlaps++;
    }
    var r = ts[i].getBoundingClientRect(), svg = ts[i].ownerSVGElement, sr = svg.getBoundingClientRect();
    if (r.left < sr.left || r.right > sr.right || r.bottom > sr.bottom) outside++;
    svg.querySelectorAll("rect.legend").forEach(function (l) { if (l.getBoundingClientRect().top < r.bottom) legend++; });
  }
  document.body.setAttribute("data-cat-labels", ts.length);
  document.body.setAttribute("data-cat-overlaps", overlaps);
  document.body.setAttribute("data-cat-legend", legend);
  document.body.setAttribute("data-cat-outside", outside);
})();
</script>`

// TestHTMLLayoutInChromium: with sql-eval's category names and two series,
// the category plot's labels do not overlap each other or the legend and
// stay inside the plot, and each question filter shows its own count
// (checked in the browser's layout; screenshot in the artifact directory).
func TestHTMLLayoutInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var results []runner.Result
	// sql-eval's categories, and longer ones as other datasets have: how
	// wide a label is depends on the browser's font, so the test uses names
	// that overlap upright in any.
	cats := []string{"date_functions", "group_by", "instructions_cte_join", "instructions_date_join", "order_by", "ratio", "table_join"}
	for _, run := range []string{"fast", "max"} {
		for i, c := range cats {
			outcome := runner.Correct
			if i%3 == 0 {
				outcome = runner.Wrong
			}
			results = append(results, runner.Result{Run: "test", Profile: run, ID: fmt.Sprintf("db/q%d", i), DB: "db",
				Category: c, Question: "question " + c, Outcome: outcome, AskMS: int64(100 * (i + 1))})
		}
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, results, HTMLOptions{Title: "layout"}); err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(b.String(), "</body>", layoutCheck+"</body>", 1)
	if !strings.Contains(page, "data-cat-overlaps") {
		t.Fatal("layout check not inserted")
	}
	dir := t.ArtifactDir()
	file := filepath.Join(dir, "layout.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := chromiumCheck(ctx, t, file, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	for attr, want := range map[string]string{"data-cat-labels": "7", "data-cat-overlaps": "0", "data-cat-legend": "0", "data-cat-outside": "0"} {
		if !strings.Contains(dom, attr+`="`+want+`"`) {
			m := regexp.MustCompile(attr + `="[^"]*"`).FindString(dom)
			t.Errorf("%s: %s, want %s", attr, m, want)
		}
	}
	// 14 questions: 6 wrong (three per series), 8 right.
	for _, label := range []string{"all (14)", "not right (6)", "right (8)", "showing 14 of 14"} {
		if !strings.Contains(dom, label) {
			t.Errorf("filters lack %q", label)
		}
	}
	shot := filepath.Join(dir, "layout.png")
	if _, console = chromiumCheck(ctx, t, file, "--screenshot="+shot, "--window-size=1400,900", "--hide-scrollbars"); len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	t.Logf("page and screenshot in %s", dir)
}
