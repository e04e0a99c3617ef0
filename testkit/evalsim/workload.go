package evalsim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/learned"
	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/workload"
)

// workloadHeader starts the prompt's list of queries the database runs
// (prompts/templates/common.tmpl, "workload").
const workloadHeader = "Queries this database runs"

// exampleOverGold reports whether the prompt lists, among the queries the
// database runs, one reading exactly the gold's tables that is not of the
// gold's own shape (its fingerprint).
func exampleOverGold(prompt string, sq *simQuestion) bool {
	if sq.idk || len(sq.tables) == 0 {
		return false
	}
	_, rest, ok := strings.Cut(prompt, workloadHeader)
	if !ok {
		return false
	}
	own := map[string]bool{}
	for _, alt := range compare.Alternatives(sq.q.Gold) {
		if fp, err := pg_query.Fingerprint(alt); err == nil {
			own[fp] = true
		}
	}
	lines := strings.Split(rest, "\n")
	for _, l := range lines[1:] {
		sql, ok := strings.CutPrefix(l, "- ")
		if !ok {
			break
		}
		tree, err := pg_query.Parse(sql)
		if err != nil {
			continue
		}
		if fp, err := pg_query.Fingerprint(sql); err != nil || own[fp] {
			continue
		}
		var ts []string
		for _, t := range tablesOf(tree) {
			if !slices.Contains(ts, t) {
				ts = append(ts, t)
			}
		}
		sort.Strings(ts)
		if slices.Equal(ts, sq.tables) {
			return true
		}
	}
	return false
}

// Lifted is how many SQL-writing calls had their probability raised by an
// example over the gold's tables (Options.ExampleLift).
func (s *Sim) Lifted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lifted
}

// Workload is a learned workload for the engine: every answerable
// question's gold SQL (its first alternative) analysed as the proxy
// analyses what it relays, in one profile per database (named prefix +
// the dataset's name). The simulated model discounts a question's own gold
// shape (exampleOverGold), as if each question were left out of its
// workload.
func (s *Sim) Workload(prefix string) (engine.Workload, error) {
	ps := learned.Profiles{}
	// Sorted questions: the same profile every run.
	keys := make([]string, 0, len(s.qs))
	for k := range s.qs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	now := time.Now()
	for _, k := range keys {
		sq := s.qs[k]
		if sq.idk {
			continue
		}
		sh, err := workload.Analyze(compare.Alternatives(sq.q.Gold)[0])
		if err != nil {
			return nil, fmt.Errorf("gold of %q: %w", sq.q.Question, err)
		}
		db := prefix + sq.q.DB
		if ps[db] == nil {
			ps[db] = workload.NewProfile(db, workload.Limits{MaxAge: -1})
		}
		ps[db].Add(sh, "", now)
	}
	return ps, nil
}
