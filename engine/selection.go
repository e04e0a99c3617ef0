package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// clusterCandidates groups usable candidates by their trial result (CHASE-SQL:
// candidates that return the same rows are one answer), largest cluster
// first, ties in generator order. Each cluster's members are ordered by
// fewest fixes, so Candidates[0] is the most direct form of that answer.
func clusterCandidates(cands []*Candidate) []Cluster {
	index := map[string]int{}
	var clusters []Cluster
	for _, c := range cands {
		c.Cluster = -1
		if !c.Usable {
			continue
		}
		k := resultKey(c.Rows)
		i, ok := index[k]
		if !ok {
			i = len(clusters)
			index[k] = i
			clusters = append(clusters, Cluster{})
		}
		clusters[i].Candidates = append(clusters[i].Candidates, c)
	}
	sort.SliceStable(clusters, func(i, j int) bool { return len(clusters[i].Candidates) > len(clusters[j].Candidates) })
	for i := range clusters {
		sort.SliceStable(clusters[i].Candidates, func(a, b int) bool {
			return clusters[i].Candidates[a].Fixes < clusters[i].Candidates[b].Fixes
		})
		for _, c := range clusters[i].Candidates {
			c.Cluster = i
		}
	}
	return clusters
}

// resultKey is a canonical form of a result as a multiset of rows: column
// order and names ignored, numbers compared by value, a midnight timestamp
// equal to its date. Empty results are all equal.
func resultKey(rows *pg.Rows) string {
	if rows == nil || len(rows.Values) == 0 {
		return "∅"
	}
	ncol := len(rows.Columns)
	cells := make([][]string, len(rows.Values))
	for i, r := range rows.Values {
		cells[i] = make([]string, ncol)
		for j := 0; j < ncol && j < len(r); j++ {
			if r[j] == nil {
				cells[i][j] = "\x00NULL"
			} else {
				cells[i][j] = canonicalValue(*r[j])
			}
		}
	}
	// Order columns by their sorted values, so a permutation of columns
	// gives the same key.
	sigs := make([]string, ncol)
	for j := 0; j < ncol; j++ {
		col := make([]string, len(cells))
		for i := range cells {
			col[i] = cells[i][j]
		}
		sort.Strings(col)
		sigs[j] = strings.Join(col, "\x1f")
	}
	order := make([]int, ncol)
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(a, b int) bool { return sigs[order[a]] < sigs[order[b]] })
	lines := make([]string, len(cells))
	for i, r := range cells {
		parts := make([]string, ncol)
		for k, j := range order {
			parts[k] = r[j]
		}
		lines[i] = strings.Join(parts, "\x1f")
	}
	sort.Strings(lines)
	return strconv.Itoa(ncol) + "\x1e" + strings.Join(lines, "\x1e")
}

// canonicalValue normalizes one text-format value for comparison.
func canonicalValue(v string) string {
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		if f == math.Trunc(f) && math.Abs(f) < 1e15 {
			return strconv.FormatFloat(f, 'f', 0, 64)
		}
		return strconv.FormatFloat(f, 'g', 9, 64)
	}
	if len(v) == 19 && strings.HasSuffix(v, " 00:00:00") {
		return v[:10]
	}
	return v
}

// confidence scores the chosen cluster: the share of the answering
// candidates (usable or declaring the question unanswerable) that agree with
// it, averaged with the selector's score for it when a selector ran. It is
// -1 (unknown) when only one candidate was made.
func confidence(cands []*Candidate, clusters []Cluster, winner int, choice *Choice) float64 {
	voters := 0
	for _, c := range cands {
		if c.Usable || c.Unanswerable {
			voters++
		}
	}
	if voters <= 1 && len(cands) <= 1 {
		return -1
	}
	agree := float64(len(clusters[winner].Candidates)) / float64(voters)
	if choice != nil && winner < len(choice.Scores) {
		return (agree + choice.Scores[winner]) / 2
	}
	return agree
}

// pairwiseSelector is CHASE-SQL's selection agent: the representatives of
// the largest clusters are compared two at a time, in both orders, over the
// union of the schema the candidates saw; cumulative wins decide, ties go to
// the larger cluster.
type pairwiseSelector struct{ maxClusters int }

func (s pairwiseSelector) Name() string { return "pairwise" }

func (s pairwiseSelector) Select(ctx context.Context, in *GenInput, m Model, clusters []Cluster) (Choice, error) {
	n := min(len(clusters), s.maxClusters)
	wins := make([]int, len(clusters))
	played := make([]int, len(clusters))
	compared := 0
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			a, b := clusters[i].Candidates[0], clusters[j].Candidates[0]
			p, err := prompts.Pairwise(prompts.PairwiseParams{
				Question: in.Question, Schema: in.Schema, Descriptions: in.Descriptions,
				A: in.view.sql(a.SQL, a.Rewrites), B: in.view.sql(b.SQL, b.Rewrites), ResultA: in.view.sample(a.Rows, 5), ResultB: in.view.sample(b.Rows, 5),
			})
			if err != nil {
				return Choice{}, err
			}
			var out prompts.PairwiseResult
			err = m.JSON(ctx, p, 0, &out)
			if errors.Is(err, ErrBudget) {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return Choice{}, err
				}
				continue // one unusable verdict does not decide anything
			}
			played[i]++
			played[j]++
			compared++
			switch strings.ToUpper(strings.TrimSpace(out.Better)) {
			case "A":
				wins[i]++
			case "B":
				wins[j]++
			}
		}
	}
	ch := Choice{Scores: make([]float64, len(clusters))}
	for i := range clusters {
		if played[i] > 0 {
			ch.Scores[i] = float64(wins[i]) / float64(played[i])
		}
		if wins[i] > wins[ch.Cluster] {
			ch.Cluster = i
		}
	}
	ch.Note = fmt.Sprintf("%d comparisons, wins %v", compared, wins[:n])
	return ch, nil
}

// unitTestSelector is CHESS's unit tester: the model writes k unit tests
// that tell the candidates apart, then judges each test on all candidates at
// once; the cluster passing the most tests wins, ties to the larger one.
type unitTestSelector struct{ tests int }

func (s unitTestSelector) Name() string { return "unit-tests" }

func (s unitTestSelector) Select(ctx context.Context, in *GenInput, m Model, clusters []Cluster) (Choice, error) {
	views := make([]prompts.CandidateView, len(clusters))
	for i, c := range clusters {
		c0 := c.Candidates[0]
		views[i] = prompts.CandidateView{SQL: in.view.sql(c0.SQL, c0.Rewrites), Result: in.view.sample(c0.Rows, 5)}
	}
	p, err := prompts.UnitTests(prompts.UnitTestsParams{Question: in.Question, Schema: in.Schema, Candidates: views, Count: s.tests})
	if err != nil {
		return Choice{}, err
	}
	var tests prompts.UnitTestsResult
	if err := m.JSON(ctx, p, 0, &tests); err != nil {
		return Choice{}, err
	}
	passed := make([]int, len(clusters))
	judged := 0
	for i, t := range tests.Tests {
		if i == s.tests {
			break
		}
		if strings.TrimSpace(t) == "" {
			continue
		}
		ep, err := prompts.UnitTestEval(prompts.UnitTestEvalParams{Question: in.Question, Schema: in.Schema, Test: t, Candidates: views})
		if err != nil {
			return Choice{}, err
		}
		var out prompts.UnitTestEvalResult
		err = m.JSON(ctx, ep, 0, &out)
		if errors.Is(err, ErrBudget) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return Choice{}, err
			}
			continue
		}
		judged++
		seen := map[int]bool{}
		for _, k := range out.Passing {
			if k >= 1 && k <= len(clusters) && !seen[k] {
				seen[k] = true
				passed[k-1]++
			}
		}
	}
	ch := Choice{Scores: make([]float64, len(clusters))}
	for i := range clusters {
		if judged > 0 {
			ch.Scores[i] = float64(passed[i]) / float64(judged)
		}
		if passed[i] > passed[ch.Cluster] {
			ch.Cluster = i
		}
	}
	ch.Note = fmt.Sprintf("%d tests judged, passed %v", judged, passed)
	return ch, nil
}
