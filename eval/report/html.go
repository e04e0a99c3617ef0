package report

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/runner"
)

// palette colours the series (colour-blind safe, Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// HTMLOptions configure the page.
type HTMLOptions struct {
	Title string
	// Note is shown under the title (e.g. "simulated model: not accuracy").
	Note string
	Now  time.Time
}

// WriteHTML writes one self-contained page: no external assets, plots as
// inline SVG, a little inline script for the drill-down's filter.
func WriteHTML(w io.Writer, results []runner.Result, opts HTMLOptions) error {
	if opts.Title == "" {
		opts.Title = "nlproxy evaluation"
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now().UTC()
	}
	series := SplitSeries(results)
	type seriesView struct {
		Name, Colour string
		Rows         []Row
	}
	var sv []seriesView
	for i, s := range series {
		sv = append(sv, seriesView{Name: s.Name, Colour: palette[i%len(palette)], Rows: Rows(s.Results)})
	}
	type questionView struct {
		Series, ID, DB, Category, Difficulty, Question, Outcome, SQL, Gold, GoldMatched string
		Error, SQLState, Hint                                                           string
		Right, Unanswerable                                                             bool
		Confidence                                                                      string
		LLMCalls, Tokens                                                                int
		AskMS, ExecMS                                                                   int64
		GoldRows, GenRows                                                               int
		GoldHead, GenHead                                                               *compare.Table
		Trace                                                                           []traceStage
	}
	var qv []questionView
	for _, s := range series {
		for _, r := range s.Results {
			v := questionView{Series: s.Name, ID: r.ID, DB: r.DB, Category: r.Category, Difficulty: r.Difficulty,
				Question: r.Question, Outcome: r.Outcome, SQL: r.SQL, Gold: r.Gold, GoldMatched: r.GoldMatched,
				Error: r.Error, SQLState: r.SQLState, Hint: r.Hint, Right: r.Right(), Unanswerable: r.Unanswerable,
				LLMCalls: r.LLMCalls, Tokens: r.PromptTokens + r.CompTokens, AskMS: r.AskMS, ExecMS: r.ExecMS,
				GoldRows: r.GoldRows, GenRows: r.GenRows, GoldHead: r.GoldHead, GenHead: r.GenHead, Trace: parseTrace(r.Trace)}
			if r.Confidence != nil {
				v.Confidence = fmt.Sprintf("%.2f", *r.Confidence)
			}
			qv = append(qv, v)
		}
	}
	nRight := 0
	for _, q := range qv {
		if q.Right {
			nRight++
		}
	}
	data := map[string]any{
		"Title": opts.Title, "Note": opts.Note, "Generated": opts.Now.Format(time.RFC3339),
		"Series": sv, "Questions": qv, "NRight": nRight, "NNotRight": len(qv) - nRight,
		"CategoryPlot": template.HTML(categoryPlot(series)),
		"CallsPlot":    template.HTML(callsPlot(series)),
		"LatencyPlot":  template.HTML(latencyPlot(series)),
	}
	return page.Execute(w, data)
}

// traceStage is one stage of the engine's trace (the ask-sql trace column).
type traceStage struct {
	Stage            string `json:"stage"`
	MS               int64  `json:"ms"`
	LLMCalls         int    `json:"llm_calls"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	Note             string `json:"note"`
}

func parseTrace(raw json.RawMessage) []traceStage {
	var out []traceStage
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &out) // a trace in another shape is not shown
	}
	return out
}

// svg helpers: every number is formatted, every text escaped.
func esc(s string) string { return html.EscapeString(s) }

func legend(b *strings.Builder, series []Series, x, y int) {
	for i, s := range series {
		fmt.Fprintf(b, `<rect class="legend" x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text>`,
			x, y+i*15, palette[i%len(palette)], x+14, y+i*15+9, esc(s.Name))
	}
}

// categoryPlot: grouped bars, share right per category (or database when
// there are no categories) for each series.
func categoryPlot(series []Series) string {
	dim := func(r runner.Result) string { return r.Category }
	cats := map[string]bool{}
	for _, s := range series {
		for _, r := range s.Results {
			if !r.Unanswerable && r.Category != "" {
				cats[r.Category] = true
			}
		}
	}
	title := "Share right by category"
	if len(cats) == 0 {
		dim, title = func(r runner.Result) string { return r.DB }, "Share right by database"
		for _, s := range series {
			for _, r := range s.Results {
				cats[r.DB] = true
			}
		}
	}
	names := make([]string, 0, len(cats))
	for c := range cats {
		names = append(names, c)
	}
	sort.Strings(names)
	const top, left, plotH = 30, 40, 200
	groupW := max(20*len(series)+20, 60)
	// Labels are drawn slanted (rotateLabel), so neighbours never overlap
	// however long the names; the space below the axis grows with the
	// longest one.
	longest := 0
	for _, c := range names {
		longest = max(longest, len([]rune(c)))
	}
	labelH := int(math.Ceil(float64(longest)*labelCharW*math.Sin(labelAngle*math.Pi/180))) + 20
	w := max(left+groupW*len(names)+20, 340, left+int(float64(longest)*labelCharW)+20)
	legendY := top + plotH + labelH
	h := legendY + 15*len(series) + 5
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="%s" width="%d" height="%d" viewBox="0 0 %d %d">`,
		esc(title), w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, left, esc(title))
	axes(&b, left, top, groupW*len(names), plotH)
	for ci, c := range names {
		for si, s := range series {
			var group []runner.Result
			for _, r := range s.Results {
				if !r.Unanswerable && dim(r) == c {
					group = append(group, r)
				}
			}
			if len(group) == 0 {
				continue
			}
			st := Of(group)
			bh := int(math.Round(st.Rate() * plotH))
			x := left + ci*groupW + 10 + si*20
			fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="16" height="%d" fill="%s"><title>%s — %s: %d/%d right (%.1f%%)</title></rect>`,
				x, top+plotH-bh, bh, palette[si%len(palette)], esc(s.Name), esc(c), st.Right, st.N, 100*st.Rate())
		}
		rotateLabel(&b, left+ci*groupW+groupW/2, top+plotH+12, c)
	}
	legend(&b, series, left, legendY)
	b.WriteString(`</svg>`)
	return b.String()
}

// Category labels are slanted by labelAngle degrees; labelCharW is a
// generous width of one 10px character.
const (
	labelAngle = 40
	labelCharW = 6.0
)

// rotateLabel draws text ending at (x, y), slanted down to the left.
func rotateLabel(b *strings.Builder, x, y int, text string) {
	fmt.Fprintf(b, `<text class="cat" x="%d" y="%d" font-size="10" text-anchor="end" transform="rotate(-%d %d %d)">%s</text>`,
		x, y, labelAngle, x, y, esc(text))
}

// axes draws a 0–100% y axis with grid lines.
func axes(b *strings.Builder, left, top, width, height int) {
	for p := 0; p <= 100; p += 25 {
		y := top + height - p*height/100
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/><text x="%d" y="%d" font-size="10" text-anchor="end">%d%%</text>`,
			left, y, left+width, y, left-4, y+3, p)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, left, top, left, top+height)
}

// callsPlot: one point per series, share right against LLM calls per question.
func callsPlot(series []Series) string {
	const w, h, top, left, plotW, plotH = 460, 300, 30, 40, 380, 200
	maxCalls := 1.0
	for _, s := range series {
		maxCalls = math.Max(maxCalls, Of(answerable(s.Results)).MeanCalls())
	}
	maxCalls = math.Ceil(maxCalls * 1.2)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="share right against LLM calls" width="%d" height="%d" viewBox="0 0 %d %d">`,
		w, h+15*len(series), w, h+15*len(series))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">Share right against LLM calls per question</text>`, left)
	axes(&b, left, top, plotW, plotH)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, left, top+plotH, left+plotW, top+plotH)
	for i := 0; i <= 4; i++ {
		v := maxCalls * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" text-anchor="middle">%.1f</text>`, left+int(float64(plotW)*float64(i)/4), top+plotH+14, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" text-anchor="middle">LLM calls per question</text>`, left+plotW/2, top+plotH+28)
	for i, s := range series {
		st := Of(answerable(s.Results))
		x := left + int(float64(plotW)*st.MeanCalls()/maxCalls)
		y := top + plotH - int(math.Round(st.Rate()*plotH))
		fmt.Fprintf(&b, `<circle class="point" cx="%d" cy="%d" r="6" fill="%s"><title>%s: %.1f%% right, %.2f calls per question</title></circle>`,
			x, y, palette[i%len(palette)], esc(s.Name), 100*st.Rate(), st.MeanCalls())
	}
	legend(&b, series, left, top+plotH+40)
	b.WriteString(`</svg>`)
	return b.String()
}

func answerable(rs []runner.Result) []runner.Result {
	var out []runner.Result
	for _, r := range rs {
		if !r.Unanswerable {
			out = append(out, r)
		}
	}
	return out
}

// latencyPlot: histogram of ask latency per series on a log-spaced scale.
func latencyPlot(series []Series) string {
	edges := []int64{0, 10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000}
	labels := []string{"<10ms", "10–30", "30–100", "100–300", "0.3–1s", "1–3s", "3–10s", "10–30s", "30–100s", "≥100s"}
	bucket := func(ms int64) int {
		for i := len(edges) - 1; i >= 0; i-- {
			if ms >= edges[i] {
				return i
			}
		}
		return 0
	}
	const top, left, plotH = 30, 40, 200
	groupW := max(16*len(series)+12, 50)
	w := max(left+groupW*len(labels)+20, 340)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="ask latency distribution" width="%d" height="%d" viewBox="0 0 %d %d">`,
		w, 300+15*len(series), w, 300+15*len(series))
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">Ask latency (share of questions per range)</text>`, left)
	axes(&b, left, top, groupW*len(labels), plotH)
	for si, s := range series {
		counts := make([]int, len(edges))
		for _, r := range s.Results {
			counts[bucket(r.AskMS)]++
		}
		for bi, c := range counts {
			if c == 0 {
				continue
			}
			share := float64(c) / float64(len(s.Results))
			bh := int(math.Round(share * plotH))
			x := left + bi*groupW + 6 + si*16
			fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="13" height="%d" fill="%s"><title>%s — %s: %d questions</title></rect>`,
				x, top+plotH-bh, bh, palette[si%len(palette)], esc(s.Name), esc(labels[bi]), c)
		}
	}
	for bi, l := range labels {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" text-anchor="middle">%s</text>`, left+bi*groupW+groupW/2, top+plotH+14, esc(l))
	}
	legend(&b, series, left, top+plotH+40)
	b.WriteString(`</svg>`)
	return b.String()
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.1f", 100*f) },
	"cell": func(v *string) string {
		if v == nil {
			return "NULL"
		}
		return *v
	},
	"p": func(s Stats, q float64) int64 { return s.Percentile(q) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.note{color:#a33;font-weight:600} .meta{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0} th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f4f4f4} td.l,th.l{text-align:left}
.plots{display:flex;flex-wrap:wrap;gap:24px}
details{border:1px solid #ddd;border-radius:4px;margin:4px 0;padding:4px 8px} summary{cursor:pointer;font-size:13px}
.o{display:inline-block;min-width:72px;font-weight:600} .right{color:#087f23} .notright{color:#b00020}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;font-size:12px;margin:4px 0}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px}
#filters{margin:8px 0;font-size:13px} #filters label{margin-right:12px}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if .Note}}<p class="note">{{.Note}}</p>{{end}}
<p class="meta">Generated {{.Generated}} by nlproxy eval. "Right" is correct or subset-correct for answerable questions and abstaining for unanswerable ones.</p>

<h2>Summary</h2>
{{range .Series}}
<h3><span class="swatch" style="background:{{.Colour}}"></span>{{.Name}}</h3>
<table class="summary">
<tr><th class="l">by</th><th class="l">value</th><th>n</th><th>right</th><th>%</th><th>correct</th><th>subset</th><th>wrong</th><th>error</th><th>abstained</th><th>calls/q</th><th>p50 ms</th><th>p90 ms</th></tr>
{{range .Rows}}<tr><td class="l">{{.Dim}}</td><td class="l">{{.Value}}</td><td>{{.N}}</td><td>{{.Right}}</td><td>{{pct .Rate}}</td><td>{{.Correct}}</td><td>{{.Subset}}</td><td>{{.Wrong}}</td><td>{{.Error}}</td><td>{{.Abstained}}</td><td>{{printf "%.1f" .MeanCalls}}</td><td>{{p .Stats 0.5}}</td><td>{{p .Stats 0.9}}</td></tr>
{{end}}</table>
{{end}}

<h2>Plots</h2>
<div class="plots">
<figure>{{.CategoryPlot}}</figure>
<figure>{{.CallsPlot}}</figure>
<figure>{{.LatencyPlot}}</figure>
</div>

<h2>Questions</h2>
<div id="filters">Show:
<label><input type="radio" name="f" value="all" checked> all ({{len .Questions}})</label>
<label><input type="radio" name="f" value="notright"> not right ({{.NNotRight}})</label>
<label><input type="radio" name="f" value="right"> right ({{.NRight}})</label>
<span id="shown" class="meta"></span></div>
<div id="questions">
{{range .Questions}}<details class="q" data-right="{{if .Right}}right{{else}}notright{{end}}">
<summary><span class="o {{if .Right}}right{{else}}notright{{end}}">{{.Outcome}}</span> {{.ID}} · {{.Series}}{{if .Category}} · {{.Category}}{{end}}{{if .Difficulty}} · {{.Difficulty}}{{end}}{{if .Unanswerable}} · unanswerable{{end}} — {{.Question}}</summary>
<p>LLM calls {{.LLMCalls}}, tokens {{.Tokens}}, ask {{.AskMS}} ms, run {{.ExecMS}} ms{{if .Confidence}}, confidence {{.Confidence}}{{end}}</p>
{{if .Error}}<p class="notright">{{if .SQLState}}[{{.SQLState}}] {{end}}{{.Error}}{{if .Hint}} — hint: {{.Hint}}{{end}}</p>{{end}}
<p>Generated SQL:</p><pre>{{.SQL}}</pre>
<p>Gold SQL{{if .GoldMatched}} (the alternative that matched: {{.GoldMatched}}){{end}}:</p><pre>{{.Gold}}</pre>
{{if .GenHead}}<p>Generated result (first rows):</p><table><tr>{{range .GenHead.Columns}}<th>{{.}}</th>{{end}}</tr>{{range .GenHead.Rows}}<tr>{{range .}}<td>{{cell .}}</td>{{end}}</tr>{{end}}</table><p class="meta">{{.GenRows}} rows</p>{{end}}
{{if .GoldHead}}<p>Gold result:</p><table><tr>{{range .GoldHead.Columns}}<th>{{.}}</th>{{end}}</tr>{{range .GoldHead.Rows}}<tr>{{range .}}<td>{{cell .}}</td>{{end}}</tr>{{end}}</table><p class="meta">{{.GoldRows}} rows</p>{{end}}
{{if .Trace}}<p>Trace:</p><table><tr><th class="l">stage</th><th>ms</th><th>calls</th><th>prompt</th><th>completion</th><th class="l">note</th></tr>{{range .Trace}}<tr><td class="l">{{.Stage}}</td><td>{{.MS}}</td><td>{{.LLMCalls}}</td><td>{{.PromptTokens}}</td><td>{{.CompletionTokens}}</td><td class="l">{{.Note}}</td></tr>{{end}}</table>{{end}}
</details>
{{end}}</div>
<script>
(function () {
  var qs = document.querySelectorAll("#questions details.q");
  var shown = document.getElementById("shown");
  function apply(v) {
    var n = 0;
    qs.forEach(function (d) {
      var on = v === "all" || d.getAttribute("data-right") === v;
      d.style.display = on ? "" : "none";
      if (on) n++;
    });
    shown.textContent = "— showing " + n + " of " + qs.length;
  }
  document.querySelectorAll("#filters input").forEach(function (i) {
    i.addEventListener("change", function () { apply(i.value); });
  });
  apply("all");
  document.body.setAttribute("data-ready", "1");
})();
</script>
</body>
</html>
`))
