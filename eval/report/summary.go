// Package report summarises evaluation results: a text table by database,
// category and difficulty, a self-contained HTML report with plots and a
// per-question drill-down, and the questions that flipped between two runs.
package report

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nlproxy/nlproxy/eval/runner"
)

// Series is the results of one run and profile: the unit plots compare.
type Series struct {
	Name    string // "<run> / <profile>"
	Results []runner.Result
}

// SplitSeries groups results by run label and profile, in order of appearance.
func SplitSeries(results []runner.Result) []Series {
	var out []Series
	idx := map[string]int{}
	for _, r := range results {
		name := seriesName(r)
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, Series{Name: name})
		}
		out[i].Results = append(out[i].Results, r)
	}
	return out
}

func seriesName(r runner.Result) string {
	run, prof := r.Run, r.Profile
	if run == "" {
		run = r.Dataset
	}
	if prof == "" {
		prof = "default profile" // per result the engine's choice is in ProfileUsed
	}
	return run + " / " + prof
}

// Stats are the figures of a group of results.
type Stats struct {
	N, Right                                 int
	Correct, Subset, Wrong, Error, Abstained int
	LLMCalls, PromptTokens, CompletionTokens int
	AskMS                                    []int64 // sorted
}

// Of computes the figures of results.
func Of(results []runner.Result) Stats {
	var s Stats
	for _, r := range results {
		s.N++
		if r.Right() {
			s.Right++
		}
		switch r.Outcome {
		case runner.Correct:
			s.Correct++
		case runner.Subset:
			s.Subset++
		case runner.Wrong:
			s.Wrong++
		case runner.Error:
			s.Error++
		case runner.Abstained:
			s.Abstained++
		}
		s.LLMCalls += r.LLMCalls
		s.PromptTokens += r.PromptTokens
		s.CompletionTokens += r.CompTokens
		s.AskMS = append(s.AskMS, r.AskMS)
	}
	slices.Sort(s.AskMS)
	return s
}

// Rate is the share of right outcomes.
func (s Stats) Rate() float64 {
	if s.N == 0 {
		return 0
	}
	return float64(s.Right) / float64(s.N)
}

// MeanCalls is LLM calls per question.
func (s Stats) MeanCalls() float64 {
	if s.N == 0 {
		return 0
	}
	return float64(s.LLMCalls) / float64(s.N)
}

// Percentile of the ask latency in ms (nearest rank).
func (s Stats) Percentile(p float64) int64 {
	if len(s.AskMS) == 0 {
		return 0
	}
	i := int(p*float64(len(s.AskMS))+0.5) - 1
	return s.AskMS[min(max(i, 0), len(s.AskMS)-1)]
}

// Row is one line of the summary: a dimension, a value, its figures.
type Row struct {
	Dim, Value string
	Stats
}

// Rows breaks a series down: all answerable questions, then by database,
// category and difficulty, then the unanswerable ones on their own.
func Rows(results []runner.Result) []Row {
	var ans, idk []runner.Result
	for _, r := range results {
		if r.Unanswerable {
			idk = append(idk, r)
		} else {
			ans = append(ans, r)
		}
	}
	var out []Row
	if len(ans) > 0 {
		out = append(out, Row{Dim: "all", Value: "answerable", Stats: Of(ans)})
	}
	for _, dim := range []struct {
		name string
		key  func(runner.Result) string
	}{
		{"database", func(r runner.Result) string { return r.DB }},
		{"category", func(r runner.Result) string { return r.Category }},
		{"difficulty", func(r runner.Result) string { return r.Difficulty }},
	} {
		groups := map[string][]runner.Result{}
		for _, r := range ans {
			if k := dim.key(r); k != "" {
				groups[k] = append(groups[k], r)
			}
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, Row{Dim: dim.name, Value: k, Stats: Of(groups[k])})
		}
	}
	if len(idk) > 0 {
		out = append(out, Row{Dim: "unanswerable", Value: "abstained is right", Stats: Of(idk)})
	}
	return out
}

// WriteTable prints the summary of every series as aligned text.
func WriteTable(w io.Writer, results []runner.Result) error {
	for i, s := range SplitSeries(results) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s — %d questions\n", s.Name, len(s.Results))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\t\tn\tright\t%\tcorrect\tsubset\twrong\terror\tabstained\tcalls/q\ttokens/q\tp50 ms\tp90 ms\t")
		for _, r := range Rows(s.Results) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.0f\t%d\t%d\t\n",
				r.Dim, r.Value, r.N, r.Right, 100*r.Rate(), r.Correct, r.Subset, r.Wrong, r.Error, r.Abstained,
				r.MeanCalls(), float64(r.PromptTokens+r.CompletionTokens)/float64(max(r.N, 1)), r.Percentile(0.5), r.Percentile(0.9))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// Flip is a question whose rightness differs between two runs.
type Flip struct {
	ID, Question string
	A, B         runner.Result
}

// Compare pairs the results of a and b by question (and profile when both
// have one) and returns the questions that went from right to wrong (lost)
// and from wrong to right (gained), and how many were in both.
func Compare(a, b []runner.Result) (gained, lost []Flip, common int) {
	key := func(r runner.Result) string { return r.ID }
	byID := map[string]runner.Result{}
	for _, r := range a {
		byID[key(r)] = r
	}
	for _, rb := range b {
		ra, ok := byID[key(rb)]
		if !ok {
			continue
		}
		common++
		switch {
		case ra.Right() && !rb.Right():
			lost = append(lost, Flip{ID: rb.ID, Question: rb.Question, A: ra, B: rb})
		case !ra.Right() && rb.Right():
			gained = append(gained, Flip{ID: rb.ID, Question: rb.Question, A: ra, B: rb})
		}
	}
	less := func(x, y Flip) int { return strings.Compare(x.ID, y.ID) }
	slices.SortFunc(gained, less)
	slices.SortFunc(lost, less)
	return gained, lost, common
}

// WriteCompare prints the flips between two runs.
func WriteCompare(w io.Writer, nameA string, a []runner.Result, nameB string, b []runner.Result) {
	gained, lost, common := Compare(a, b)
	sa, sb := 0, 0
	for _, r := range a {
		if r.Right() {
			sa++
		}
	}
	for _, r := range b {
		if r.Right() {
			sb++
		}
	}
	fmt.Fprintf(w, "A %s: %d/%d right\nB %s: %d/%d right\n%d questions in both; %d gained, %d lost (B against A)\n",
		nameA, sa, len(a), nameB, sb, len(b), common, len(gained), len(lost))
	for _, f := range []struct {
		title string
		list  []Flip
	}{{"gained (wrong in A, right in B)", gained}, {"lost (right in A, wrong in B)", lost}} {
		if len(f.list) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", f.title)
		for _, x := range f.list {
			fmt.Fprintf(w, "  %-18s %-9s → %-9s %s\n", x.ID, x.A.Outcome, x.B.Outcome, oneLine(x.Question, 90))
		}
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
