package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Target names.
const (
	targetDirect    = "direct"
	targetPgbouncer = "pgbouncer"
	targetPgpool    = "pgpool"
	targetOdyssey   = "odyssey"
	targetPgcat     = "pgcat"
	// targetPgbouncerSrc is a second PgBouncer (-pgbouncer-src), e.g. the
	// current release built from source beside Debian's older one.
	targetPgbouncerSrc  = "pgbouncer-src"
	targetPgdog         = "pgdog"
	targetNlproxy       = "nlproxy"
	targetNlproxyEngine = "nlproxy-engine"
	targetNlproxyAlt    = "nlproxy-alt"
	// targetNlproxyLearn is nlproxy with --learn-workload: the relay's cost
	// of capturing statements, against target nlproxy in the same run.
	targetNlproxyLearn = "nlproxy-learn"
)

// TargetStats is the median of a target's runs for one config.
type TargetStats struct {
	TPS       float64         `json:"tps"`
	LatencyMS float64         `json:"latency_ms"`
	P50MS     float64         `json:"latency_p50_ms,omitempty"`
	P99MS     float64         `json:"latency_p99_ms,omitempty"`
	CPUus     float64         `json:"proxy_cpu_us_per_txn,omitempty"`
	Switches  float64         `json:"proxy_ctx_switches_per_txn,omitempty"`
	Syscalls  float64         `json:"proxy_syscalls_per_txn,omitempty"`
	Spread    map[string]Span `json:"spread,omitempty"` // min and max over the runs, per figure
	Runs      []PgbenchResult `json:"runs"`
	Errors    []string        `json:"errors,omitempty"`
	// Skipped says why the target did not run in this config (no TLS setup).
	Skipped string `json:"skipped,omitempty"`
}

// Span is the range of one figure over a target's runs.
type Span struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// summarize sets the medians and spreads from the runs.
func (s *TargetStats) summarize() {
	s.Spread = map[string]Span{}
	figure := func(name string, get func(PgbenchResult) float64) float64 {
		if len(s.Runs) == 0 {
			return 0
		}
		xs := make([]float64, len(s.Runs))
		for i, r := range s.Runs {
			xs[i] = get(r)
		}
		sp := Span{Min: xs[0], Max: xs[0]}
		for _, x := range xs {
			sp.Min, sp.Max = min(sp.Min, x), max(sp.Max, x)
		}
		s.Spread[name] = sp
		return median(xs)
	}
	s.TPS = figure("tps", func(r PgbenchResult) float64 { return r.TPS })
	s.LatencyMS = figure("latency_ms", func(r PgbenchResult) float64 { return r.LatencyMS })
	s.P50MS = figure("p50_ms", func(r PgbenchResult) float64 { return r.P50MS })
	s.P99MS = figure("p99_ms", func(r PgbenchResult) float64 { return r.P99MS })
	s.CPUus = figure("cpu_us", func(r PgbenchResult) float64 { return r.CPUus })
	s.Switches = figure("switches", func(r PgbenchResult) float64 { return r.Switches })
	s.Syscalls = figure("syscalls", func(r PgbenchResult) float64 { return r.Syscalls })
}

// halfRange is the spread of a figure as ± half its range, in % of the median.
func (s *TargetStats) halfRange(name string, med float64) string {
	sp, ok := s.Spread[name]
	if !ok || med == 0 || len(s.Runs) < 2 {
		return ""
	}
	return fmt.Sprintf(" ±%.0f%%", 50*(sp.Max-sp.Min)/med)
}

// ok reports whether every run of the target succeeded.
func (s *TargetStats) ok() bool { return s != nil && len(s.Errors) == 0 && len(s.Runs) > 0 }

// ConfigResult holds all targets' numbers for one pgbench config.
type ConfigResult struct {
	Config  Config                  `json:"config"`
	Name    string                  `json:"name"`
	Targets map[string]*TargetStats `json:"targets"`
}

// StreamStats is the large-result measurement for one target.
type StreamStats struct {
	StreamResult
	Runs   []StreamResult `json:"runs"`
	Errors []string       `json:"errors,omitempty"`
}

// Check is one target the issue sets, with its verdict.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // PASS, MISS or SKIP
	Detail string `json:"detail"`
}

// Report is everything one benchmark run measured.
type Report struct {
	Command       string                  `json:"command"`
	Host          string                  `json:"host"`
	Duration      string                  `json:"duration_per_run"`
	Repeat        int                     `json:"repeat"`
	Scale         int                     `json:"scale"`
	Targets       []string                `json:"targets"`
	Configs       []*ConfigResult         `json:"configs"`
	StreamSQL     string                  `json:"stream_sql"`
	Stream        map[string]*StreamStats `json:"stream"`
	NlproxyMaxRSS int64                   `json:"nlproxy_max_rss_kb"` // highest VmRSS sampled during streaming
	NlproxyHWM    int64                   `json:"nlproxy_vmhwm_kb"`   // VmHWM: peak RSS over the process's life
	OtherHWM      []TargetHWM             `json:"other_vmhwm,omitempty"`
	Checks        []Check                 `json:"checks"`
}

func (r *Report) has(target string) bool {
	for _, t := range r.Targets {
		if t == target {
			return true
		}
	}
	return false
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// bad is the cell of a target without figures: skipped or failed.
func bad(s *TargetStats) string {
	if s != nil && s.Skipped != "" {
		return "—"
	}
	return "ERR"
}

func num(s *TargetStats, tps bool) string {
	if !s.ok() {
		return bad(s)
	}
	if tps {
		return fmt.Sprintf("%.0f", s.TPS) + s.halfRange("tps", s.TPS)
	}
	return fmt.Sprintf("%.3f", s.LatencyMS) + s.halfRange("latency_ms", s.LatencyMS)
}

func val(s *TargetStats, tps bool) float64 {
	if !s.ok() {
		return 0
	}
	if tps {
		return s.TPS
	}
	return s.LatencyMS
}

// rows renders the comparison table: header then one row per config.
func (r *Report) rows() [][]string {
	header := []string{"config"}
	for _, t := range r.Targets {
		header = append(header, t+" TPS")
	}
	ratios := r.ratioPairs()
	for _, p := range ratios {
		header = append(header, p[0]+"/"+p[1]+" TPS")
	}
	for _, t := range r.Targets {
		header = append(header, t+" lat ms")
	}
	for _, p := range ratios {
		header = append(header, p[0]+"/"+p[1]+" lat")
	}
	out := [][]string{header}
	for _, c := range r.Configs {
		row := []string{c.Name}
		for _, t := range r.Targets {
			row = append(row, num(c.Targets[t], true))
		}
		for _, p := range ratios {
			row = append(row, ratio(val(c.Targets[p[0]], true), val(c.Targets[p[1]], true)))
		}
		for _, t := range r.Targets {
			row = append(row, num(c.Targets[t], false))
		}
		for _, p := range ratios {
			row = append(row, ratio(val(c.Targets[p[0]], false), val(c.Targets[p[1]], false)))
		}
		out = append(out, row)
	}
	return out
}

// ratioPairs are the (numerator, denominator) columns: nlproxy against each
// baseline (and nlproxy-alt, a before/after build, against the PgBouncers)
// when nlproxy runs, otherwise PgBouncer against direct.
func (r *Report) ratioPairs() [][2]string {
	var pairs [][2]string
	if r.has(targetNlproxy) {
		for _, b := range []string{targetDirect, targetPgbouncer, targetPgbouncerSrc} {
			if r.has(b) {
				pairs = append(pairs, [2]string{targetNlproxy, b})
			}
		}
		pairs = append(pairs, r.altPairs()...)
		if r.has(targetNlproxyLearn) {
			pairs = append(pairs, [2]string{targetNlproxyLearn, targetNlproxy})
		}
	} else if r.has(targetPgbouncer) && r.has(targetDirect) {
		pairs = append(pairs, [2]string{targetPgbouncer, targetDirect})
	}
	return pairs
}

// altPairs are nlproxy-alt against each PgBouncer.
func (r *Report) altPairs() [][2]string {
	var pairs [][2]string
	if r.has(targetNlproxyAlt) {
		for _, b := range []string{targetPgbouncer, targetPgbouncerSrc} {
			if r.has(b) {
				pairs = append(pairs, [2]string{targetNlproxyAlt, b})
			}
		}
	}
	return pairs
}

// cpuPairs are the CPU-per-transaction ratio columns: nlproxy and
// nlproxy-alt against each PgBouncer.
func (r *Report) cpuPairs() [][2]string {
	var pairs [][2]string
	if r.has(targetNlproxy) {
		for _, b := range []string{targetPgbouncer, targetPgbouncerSrc} {
			if r.has(b) {
				pairs = append(pairs, [2]string{targetNlproxy, b})
			}
		}
	}
	return append(pairs, r.altPairs()...)
}

// proxies are the targets whose process use is measured.
func (r *Report) proxies() []string {
	var ps []string
	for _, t := range r.Targets {
		if t != targetDirect {
			ps = append(ps, t)
		}
	}
	return ps
}

// percentileRows renders latency p50 and p99 (medians over the runs) when
// pgbench logged every transaction (-percentiles).
func (r *Report) percentileRows() [][]string {
	have := false
	for _, c := range r.Configs {
		for _, s := range c.Targets {
			if s.ok() && s.P50MS > 0 {
				have = true
			}
		}
	}
	if !have {
		return nil
	}
	header := []string{"config"}
	for _, t := range r.Targets {
		header = append(header, t+" p50 ms", t+" p99 ms")
	}
	out := [][]string{header}
	for _, c := range r.Configs {
		row := []string{c.Name}
		for _, t := range r.Targets {
			if s := c.Targets[t]; s.ok() {
				row = append(row, fmt.Sprintf("%.3f", s.P50MS)+s.halfRange("p50_ms", s.P50MS),
					fmt.Sprintf("%.3f", s.P99MS)+s.halfRange("p99_ms", s.P99MS))
			} else {
				row = append(row, bad(s), bad(s))
			}
		}
		out = append(out, row)
	}
	return out
}

// useRows renders the per-transaction proxy use: CPU µs median (min–max),
// context switches and, when counted, system calls.
func (r *Report) useRows() [][]string {
	ps := r.proxies()
	if len(ps) == 0 {
		return nil
	}
	syscalls := false
	for _, c := range r.Configs {
		for _, t := range ps {
			if s := c.Targets[t]; s.ok() && s.Syscalls > 0 {
				syscalls = true
			}
		}
	}
	header := []string{"config"}
	for _, t := range ps {
		header = append(header, t+" CPU µs/txn")
	}
	pairs := r.cpuPairs()
	for _, p := range pairs {
		header = append(header, p[0]+"/"+p[1]+" CPU")
	}
	for _, t := range ps {
		header = append(header, t+" cs/txn")
	}
	if syscalls {
		for _, t := range ps {
			header = append(header, t+" syscalls/txn")
		}
	}
	out := [][]string{header}
	for _, c := range r.Configs {
		row := []string{c.Name}
		for _, t := range ps {
			s := c.Targets[t]
			if !s.ok() {
				row = append(row, bad(s))
				continue
			}
			sp := s.Spread["cpu_us"]
			row = append(row, fmt.Sprintf("%.1f (%.1f–%.1f)", s.CPUus, sp.Min, sp.Max))
		}
		for _, p := range pairs {
			n, d := c.Targets[p[0]], c.Targets[p[1]]
			if n.ok() && d.ok() {
				row = append(row, ratio(n.CPUus, d.CPUus))
			} else {
				row = append(row, "—")
			}
		}
		for _, t := range ps {
			if s := c.Targets[t]; s.ok() {
				row = append(row, fmt.Sprintf("%.2f", s.Switches))
			} else {
				row = append(row, bad(s))
			}
		}
		if syscalls {
			for _, t := range ps {
				if s := c.Targets[t]; s.ok() {
					row = append(row, fmt.Sprintf("%.2f", s.Syscalls))
				} else {
					row = append(row, bad(s))
				}
			}
		}
		out = append(out, row)
	}
	return out
}

func (r *Report) streamLines() []string {
	var lines []string
	for _, t := range r.Targets {
		s := r.Stream[t]
		if s == nil {
			continue
		}
		if len(s.Errors) > 0 {
			lines = append(lines, fmt.Sprintf("large result %-9s ERROR: %s", t, s.Errors[0]))
			continue
		}
		line := fmt.Sprintf("large result %-9s %d rows, %.0f MB DataRow, %.0f MB wire in %.2f s = %.1f MB/s",
			t, s.Rows, s.DataRowMB, s.WireMB, s.Seconds, s.MBPerSecond)
		if d := r.Stream[targetDirect]; t != targetDirect && d != nil && len(d.Errors) == 0 {
			line += fmt.Sprintf(" (%s× direct)", ratio(s.MBPerSecond, d.MBPerSecond))
		}
		lines = append(lines, line)
	}
	if r.has(targetNlproxy) && (r.NlproxyHWM > 0 || r.NlproxyMaxRSS > 0) {
		lines = append(lines, fmt.Sprintf("nlproxy memory: peak VmRSS while streaming %.1f MB, VmHWM (lifetime peak RSS) %.1f MB",
			float64(r.NlproxyMaxRSS)/1024, float64(r.NlproxyHWM)/1024))
	}
	for _, h := range r.OtherHWM {
		lines = append(lines, fmt.Sprintf("%s memory: VmHWM (lifetime peak RSS) %.1f MB", h.Target, float64(h.KB)/1024))
	}
	return lines
}

// TargetHWM is the lifetime peak RSS of another nlproxy target (the same
// workload, e.g. a before/after pair).
type TargetHWM struct {
	Target string `json:"target"`
	KB     int64  `json:"vmhwm_kb"`
}

// WriteText prints the aligned tables, the large-result lines and the checks.
func (r *Report) WriteText(w io.Writer) {
	for _, table := range [][][]string{r.rows(), r.percentileRows(), r.useRows()} {
		if len(table) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, row := range table {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	for _, l := range r.streamLines() {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-4s %s — %s\n", c.Status, c.Name, c.Detail)
	}
	for _, c := range r.Configs {
		for _, t := range r.Targets {
			if s := c.Targets[t]; s != nil {
				for _, e := range s.Errors {
					fmt.Fprintf(w, "error %s %s: %s\n", c.Name, t, firstLine(e))
				}
			}
		}
	}
}

// WriteMarkdown prints the same results as Markdown tables for the README.
func (r *Report) WriteMarkdown(w io.Writer) {
	for _, table := range [][][]string{r.rows(), r.percentileRows(), r.useRows()} {
		for i, row := range table {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				seps := make([]string, len(row))
				seps[0] = "---"
				for j := 1; j < len(seps); j++ {
					seps[j] = "---:"
				}
				fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
			}
		}
		if len(table) > 0 {
			fmt.Fprintln(w)
		}
	}
	for _, l := range r.streamLines() {
		fmt.Fprintf(w, "- %s\n", l)
	}
	for _, c := range r.Checks {
		fmt.Fprintf(w, "- **%s** %s — %s\n", c.Status, c.Name, c.Detail)
	}
	fmt.Fprintf(w, "\n_%s; pgbench -S -n, %s per run, median of %d (± = half the range, CPU min–max), scale %d; `%s`_\n",
		r.Host, r.Duration, r.Repeat, r.Scale, r.Command)
}

// evaluate fills r.Checks with the targets.
func (r *Report) evaluate(maxRSSMB float64) {
	r.Checks = nil
	skip := func(name, why string) { r.Checks = append(r.Checks, Check{name, "SKIP", why}) }
	verdict := func(name string, pass bool, detail string) {
		s := "MISS"
		if pass {
			s = "PASS"
		}
		r.Checks = append(r.Checks, Check{name, s, detail})
	}
	both := r.has(targetNlproxy) && r.has(targetPgbouncer)
	// versus checks one measure of nlproxy against PgBouncer's in config c.
	versus := func(name string, c *ConfigResult, check func(n, p *TargetStats) (bool, string)) {
		n, p := c.Targets[targetNlproxy], c.Targets[targetPgbouncer]
		switch {
		case !both:
			skip(name, "needs targets nlproxy and pgbouncer")
		case !n.ok() || !p.ok():
			verdict(name, false, "a run failed")
		default:
			pass, detail := check(n, p)
			verdict(name, pass, detail)
		}
	}
	for _, c := range r.Configs {
		versus("nlproxy TPS ≥ PgBouncer TPS, "+c.Name, c, func(n, p *TargetStats) (bool, string) {
			return n.TPS >= p.TPS, fmt.Sprintf("%.0f vs %.0f (%s×)", n.TPS, p.TPS, ratio(n.TPS, p.TPS))
		})
	}
	for _, c := range r.Configs {
		if c.Config.Clients == 1 {
			versus("nlproxy latency ≤ PgBouncer latency, "+c.Name, c, func(n, p *TargetStats) (bool, string) {
				return n.LatencyMS <= p.LatencyMS, fmt.Sprintf("%.3f ms vs %.3f ms", n.LatencyMS, p.LatencyMS)
			})
		}
	}
	for _, c := range r.Configs {
		versus("nlproxy CPU/txn ≤ PgBouncer CPU/txn, "+c.Name, c, func(n, p *TargetStats) (bool, string) {
			if n.CPUus <= 0 || p.CPUus <= 0 {
				return false, "CPU not measured"
			}
			return n.CPUus <= p.CPUus, fmt.Sprintf("%.1f µs vs %.1f µs (%s×)", n.CPUus, p.CPUus, ratio(n.CPUus, p.CPUus))
		})
	}
	name := "large result through nlproxy ≥ 0.9× direct"
	n, d := r.Stream[targetNlproxy], r.Stream[targetDirect]
	switch {
	case n == nil || d == nil:
		skip(name, "needs targets nlproxy and direct with streaming on")
	case len(n.Errors) > 0 || len(d.Errors) > 0:
		verdict(name, false, "a transfer failed")
	default:
		verdict(name, n.MBPerSecond >= 0.9*d.MBPerSecond,
			fmt.Sprintf("%.1f vs %.1f MB/s (%s×)", n.MBPerSecond, d.MBPerSecond, ratio(n.MBPerSecond, d.MBPerSecond)))
	}
	name = fmt.Sprintf("nlproxy peak RSS < %.0f MB", maxRSSMB)
	switch {
	case !r.has(targetNlproxy):
		skip(name, "nlproxy not benchmarked")
	case r.NlproxyHWM <= 0:
		verdict(name, false, "VmHWM could not be read")
	default:
		mb := float64(r.NlproxyHWM) / 1024
		verdict(name, mb < maxRSSMB, fmt.Sprintf("VmHWM %.1f MB", mb))
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
