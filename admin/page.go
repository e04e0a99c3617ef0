package admin

import (
	"fmt"
	"html/template"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/workload"
)

type pageData struct {
	Version      string
	Now, Started time.Time
	Asks         []*proxy.AskRecord
	Sessions     []proxy.SessionInfo
	ShowSessions bool
	Catalogs     []catalog.Status
	ShowCatalogs bool
	Workload     *workloadData // nil: learning is off
	Verified     []VerifiedQuery
	ShowVerified bool
}

// VerifiedQuery is one verified query as the page lists it.
type VerifiedQuery struct {
	Database, Name, Question string
	Roles                    []string
	Uses                     int64 // asks it answered since the start
}

// workloadData is the workload section: totals, and per database the most
// run fingerprints and the most used joins.
type workloadData struct {
	Stats     workload.Stats
	Databases []workloadDB
}

type workloadDB struct {
	Database string
	Queries  []workload.Query // the first workloadRows
	Total    int
	Joins    []workload.JoinUse // the first workloadRows
}

// workloadRows bounds each list of the section; the CLI shows more.
const workloadRows = 10

func workloadSection(c *workload.Collector) *workloadData {
	d := &workloadData{Stats: c.Stats()}
	for _, p := range c.Store().Profiles() {
		qs, js := p.Queries(), p.Joins()
		d.Databases = append(d.Databases, workloadDB{Database: p.Database(), Total: len(qs),
			Queries: qs[:min(len(qs), workloadRows)], Joins: js[:min(len(js), workloadRows)]})
	}
	return d
}

func templateEscape(s string) string { return template.HTMLEscapeString(s) }

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d time.Duration) string {
		switch {
		case d >= time.Second:
			return fmt.Sprintf("%.2fs", d.Seconds())
		case d >= time.Millisecond:
			return fmt.Sprintf("%dms", d.Milliseconds())
		}
		return fmt.Sprintf("%dµs", d.Microseconds())
	},
	"since": func(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"conf": func(c float64) string {
		if c < 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", c)
	},
}

var pageTemplate = template.Must(template.New("admin").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>nlproxy admin</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.3rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;width:100%;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.3rem .45rem;text-align:left;vertical-align:top}
th{background:#f2f2f2}
code,pre{font-family:ui-monospace,monospace;font-size:.8rem;white-space:pre-wrap;margin:0}
.failed{color:#a00;font-weight:600}.answered{color:#070}.cached{color:#057}
.muted{color:#777}
</style></head><body>
<h1>nlproxy admin</h1>
<p class="muted">version {{.Version}} · up {{since .Now .Started}} · page rendered {{ts .Now}}</p>

<h2 id="asks">Recent asks ({{len .Asks}})</h2>
{{if .Asks}}<table>
<tr><th>time</th><th>user / role</th><th>database</th><th>client</th><th>question</th><th>final SQL</th><th>confidence</th><th>outcome</th><th>took</th><th>LLM calls / tokens</th></tr>
{{range $i, $a := .Asks}}<tr class="ask">
<td>{{ts $a.Time}}</td>
<td>{{$a.User}}{{with $a.Report}}{{if .Role}} / {{.Role}}{{end}}{{end}}</td>
<td>{{$a.Database}}</td>
<td>{{$a.Client}}{{if $a.Tool}} (MCP {{$a.Tool}}){{end}}</td>
<td class="question">{{$a.Question}}</td>
<td>{{with $a.Report}}<code class="sql">{{.SQL}}</code>{{end}}</td>
<td>{{with $a.Report}}{{conf .Confidence}}{{end}}</td>
<td class="{{$a.Outcome}}">{{$a.Outcome}}{{with $a.Err}} {{.Code}}: {{.Message}}{{end}}</td>
<td>{{dur $a.Duration}}</td>
<td>{{with $a.Report}}{{.LLMCalls}} / {{.PromptTokens}}+{{.CompletionTokens}}{{end}}</td>
</tr>
{{with $a.Report}}{{if .Stages}}<tr class="trace"><td colspan="10"><details{{if eq $i 0}} open{{end}}><summary>trace: {{len .Stages}} stages{{if .Profile}}, profile {{.Profile}}{{end}}</summary>
<table><tr><th>stage</th><th>took</th><th>LLM calls</th><th>tokens</th><th>what it did</th></tr>
{{range .Stages}}<tr class="stage"><td>{{.Name}}</td><td>{{dur .Duration}}</td><td>{{.LLMCalls}}</td><td>{{.PromptTokens}}+{{.CompletionTokens}}</td><td><code>{{.Note}}</code></td></tr>
{{end}}</table>
{{if .Candidates}}<table><tr><th>candidate</th><th>generator</th><th>SQL</th><th>fixes</th><th>usable</th><th>cluster</th><th>problem</th></tr>
{{range $j, $c := .Candidates}}<tr class="candidate"><td>{{$j}}{{if $c.Chosen}} (chosen){{end}}</td><td>{{$c.Generator}}</td><td><code>{{$c.SQL}}</code></td><td>{{$c.Fixes}}</td><td>{{$c.Usable}}</td><td>{{if ge $c.Cluster 0}}{{$c.Cluster}}{{end}}</td><td>{{$c.Problem}}</td></tr>
{{end}}</table>{{end}}</details></td></tr>{{end}}{{end}}
{{end}}</table>{{else}}<p class="muted">No asks since the proxy started.</p>{{end}}

{{if .ShowSessions}}<h2 id="connections">Connections ({{len .Sessions}})</h2>
{{if .Sessions}}<table>
<tr><th>client</th><th>user</th><th>database</th><th>connected</th><th>state</th><th>backend PID</th><th>TLS</th><th>bytes in / out</th></tr>
{{range .Sessions}}<tr class="conn"><td>{{.Client}}</td><td>{{.User}}</td><td>{{.Database}}</td><td>{{since $.Now .Started}} ago</td>
<td>{{if not .Ready}}startup{{else if .Asking}}asking{{else}}{{.TxStatus}}{{end}}</td><td>{{if .BackendPID}}{{.BackendPID}}{{end}}</td><td>{{.TLS}}</td><td>{{bytes .BytesIn}} / {{bytes .BytesOut}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No client connections.</p>{{end}}{{end}}

{{if .ShowCatalogs}}<h2 id="catalogs">Catalogs ({{len .Catalogs}})</h2>
{{if .Catalogs}}<table>
<tr><th>database</th><th>loaded</th><th>version</th><th>tables</th><th>fingerprint</th><th>built</th><th>last check</th><th>last error</th></tr>
{{range .Catalogs}}<tr class="catalog"><td>{{.Database}}</td><td>{{.Loaded}}</td><td>{{.Version}}</td><td>{{.Tables}}</td><td><code>{{.Fingerprint}}</code></td><td>{{ts .BuiltAt}}</td><td>{{ts .Checked}}</td><td class="failed">{{with .Err}}{{.}}{{end}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No database catalogued yet (a catalog is built on the first question, or on the first readiness probe).</p>{{end}}{{end}}

{{with .Workload}}<h2 id="workload">Workload learnt</h2>
<p class="workload-stats">statements captured {{.Stats.Captured}} ({{.Stats.Repeats}} repeats counted, not parsed again) · dropped (queue full) {{.Stats.Dropped}} · denied {{.Stats.Denied}} · unparsable {{.Stats.Unparsable}} · skipped {{.Stats.Skipped}} · learnt {{.Stats.Learnt}} · fingerprints stored {{.Stats.Stored}}</p>
{{range .Databases}}<h3>{{.Database}}: {{.Total}} fingerprints</h3>
<table><tr><th>fingerprint</th><th>runs</th><th>last seen</th><th>roles</th><th>normalised text</th></tr>
{{range .Queries}}<tr class="wquery"><td><code>{{.Fingerprint}}</code></td><td>{{.Count}}</td><td>{{ts .LastSeen}}</td><td>{{range $i, $r := .Roles}}{{if $i}}, {{end}}{{$r}}{{end}}</td><td><code>{{.Text}}</code></td></tr>
{{end}}</table>
{{if .Joins}}<table><tr><th>join</th><th>uses</th><th>fingerprints</th></tr>
{{range .Joins}}<tr class="wjoin"><td><code>{{.Join}}</code></td><td>{{.Count}}</td><td>{{.Queries}}</td></tr>
{{end}}</table>{{end}}
{{else}}<p class="muted">Nothing learnt yet.</p>{{end}}{{end}}

{{if .ShowVerified}}<h2 id="verified">Verified queries</h2>
{{if .Verified}}<table><tr><th>database</th><th>name</th><th>question</th><th>roles</th><th>asks answered</th></tr>
{{range .Verified}}<tr class="verified"><td>{{.Database}}</td><td>{{.Name}}</td><td>{{.Question}}</td><td>{{range $i, $r := .Roles}}{{if $i}}, {{end}}{{$r}}{{end}}</td><td>{{.Uses}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No verified queries (--verified FILE).</p>{{end}}{{end}}
</body></html>
`))
