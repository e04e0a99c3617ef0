// Package evalsim is the simulated model CI evaluates the harness with: a
// fake Ollama (testkit/fakeollama) that knows every question's gold SQL
// and answers each SQL-writing call with the gold query, written another way,
// with probability P, and otherwise with a realistic wrong variant checked to
// give a different result; pairwise-selector and unit-test calls pick the
// right candidate with probability Q. Draws are independent per call and
// reproducible from Seed. Its figures are simulated, never accuracy.
package evalsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// Call kinds the simulated model recognises.
const (
	CallKeywords  = "keywords"
	CallSchema    = "schema-selection"
	CallLiteral   = "literal"
	CallSQL       = "sql" // generation and fixing: SQL in a ```sql fence
	CallSelector  = "pairwise-selector"
	CallTestsGen  = "unit-tests"
	CallTestsEval = "unit-test-evaluation"
	CallExamples  = "synthetic-examples"
	CallDecompose = "decomposition" // targets and conditions, before sub-SQL steps
	// The optimizer's instruction and rewrite steps (max profile, costly
	// queries): the simulated model proposes no change, so the optimizer
	// keeps the chosen SQL and the figures measure selection only.
	CallOptInstruction = "optimizer-instruction"
	CallOptRewrite     = "optimizer-rewrite"
	// CallFollowup rewrites a follow-up into a standalone question.
	CallFollowup = "followup"
	CallUnknown  = "unknown"
)

// Options configure the simulated model.
type Options struct {
	P, Q float64
	Seed uint64
	// Kinds of wrong variant used (default AllKinds).
	Kinds []string
	// MaxVariants kept per question (default 6).
	MaxVariants int
	// ExampleLift models what a workload example teaches: when an
	// SQL-writing prompt lists, among the queries the database runs, one
	// reading exactly the gold's tables (other than the gold's own shape,
	// which the workload of a real database would not hold for a new
	// question), the probability of a right answer rises from P to
	// P + ExampleLift·(1 − P): the example closes that share of the gap.
	// 0 leaves examples without effect.
	ExampleLift float64
	// Followups are the follow-up questions the model can rewrite, by their
	// text: with probability P it answers the standalone reading, else the
	// previous turn's question (the follow-up's change is lost).
	Followups map[string]Followup
}

// Followup is a follow-up question's right and wrong rewrites.
type Followup struct {
	Standalone string // the right reading
	Previous   string // the question before it, as the engine read it
}

// Sim is the simulated model. Prepare it, then serve Rule() from a fake Ollama.
type Sim struct {
	opts Options
	qs   map[string]*simQuestion // by the question's first line

	mu      sync.Mutex
	calls   map[string]int // per question, kind and prompt: how many so far
	kinds   map[string]int // calls answered per kind
	unknown []string       // prompts of unknown kinds (first lines)
	emitted map[string]bool
	lifted  int // SQL calls whose prompt held an example over the gold's tables
	// connect runs candidates it does not recognise, to judge them.
	connect func(ctx context.Context, db string) (*pgx.Conn, error)
}

type simQuestion struct {
	q        dataset.Question
	idk      bool      // unanswerable: the right answer is to say so
	right    []string  // gold, written other ways, each checked correct
	wrong    []variant // each checked wrong
	gold     map[string]bool
	tables   []string
	columns  map[string][]string
	literals []string
}

// Stats of a prepared simulation.
type Stats struct {
	Questions    int // answerable
	Unanswerable int // the right answer is UNANSWERABLE (abstaining)
	// Unplantable questions have no wrong variant that gives another
	// result: the model answers them right whatever P is, so with P = 0
	// they are the whole of the expected score (the planted rate).
	Unplantable int
	Variants    map[string]int // verified wrong variants by kind
	Rejected    int            // variants dropped because they gave the gold result or failed
	Reformatted int            // right answers that differ from the gold's text
}

// PlantedRate is the share of questions the model answers right at P = 0.
func (s Stats) PlantedRate() float64 {
	if s.Questions == 0 {
		return 0
	}
	return float64(s.Unplantable) / float64(s.Questions)
}

// New prepares a simulation of ds's answerable questions: for each, the
// right answers and the wrong variants, every one run on the databases
// (connect opens a session to a dataset database) and judged with sql-eval's
// rules against the gold.
func New(ctx context.Context, ds *dataset.Dataset, connect func(ctx context.Context, db string) (*pgx.Conn, error), opts Options) (*Sim, Stats, error) {
	if len(opts.Kinds) == 0 {
		opts.Kinds = AllKinds
	}
	if opts.MaxVariants <= 0 {
		opts.MaxVariants = 6
	}
	s := &Sim{opts: opts, qs: map[string]*simQuestion{}, calls: map[string]int{}, kinds: map[string]int{}, emitted: map[string]bool{}, connect: connect}
	st := Stats{Variants: map[string]int{}}
	schemas := map[string]schemaInfo{}
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	for _, q := range ds.Questions {
		if _, ok := schemas[q.DB]; !ok {
			meta, err := dataset.ReadMetadata(ds.Dir, q.DB)
			if err != nil {
				return nil, st, err
			}
			si := schemaInfo{}
			for t, cols := range meta {
				si[strings.ToLower(t)] = cols
			}
			schemas[q.DB] = si
			if conns[q.DB], err = connect(ctx, q.DB); err != nil {
				return nil, st, err
			}
		}
		var sq *simQuestion
		var err error
		if q.Unanswerable {
			sq = unanswerable(q, schemas[q.DB])
			st.Unanswerable++
		} else {
			sq, err = s.prepare(ctx, conns[q.DB], q, schemas[q.DB], &st)
		}
		if err != nil {
			return nil, st, fmt.Errorf("evalsim: %s: %w", q.ID, err)
		}
		key := firstLine(q.Question)
		if _, dup := s.qs[key]; dup {
			return nil, st, fmt.Errorf("evalsim: two questions start %q", key)
		}
		s.qs[key] = sq
		if q.Unanswerable {
			continue
		}
		st.Questions++
		if len(sq.wrong) == 0 {
			st.Unplantable++
		}
	}
	return s, st, nil
}

func (s *Sim) prepare(ctx context.Context, conn *pgx.Conn, q dataset.Question, schema schemaInfo, st *Stats) (*simQuestion, error) {
	sq := &simQuestion{q: q, gold: map[string]bool{}, columns: map[string][]string{}}
	alts := compare.Alternatives(q.Gold)
	golds := make([]compare.Side, 0, len(alts))
	for _, a := range alts {
		t, err := run(ctx, conn, a)
		if err != nil {
			return nil, fmt.Errorf("gold %q: %w", a, err)
		}
		side := compare.Side{Table: t}
		if k, ok := compare.OrderKeys(a, t.Columns); ok {
			side.Keys = k
		}
		golds = append(golds, side)
		sq.gold[Canonical(a)] = true
	}
	judge := func(sql string) (compare.Verdict, error) {
		t, err := run(ctx, conn, sql)
		if err != nil {
			return compare.Wrong, err
		}
		gen := compare.Side{Table: t}
		if k, ok := compare.OrderKeys(sql, t.Columns); ok {
			gen.Keys = k
		}
		best := compare.Wrong
		for _, g := range golds {
			best = max(best, compare.SQLEval(g, gen, compare.OrderMatters(q.Category, q.Question)))
		}
		return best, nil
	}
	full := compare.Full(q.Gold)
	for _, r := range reformats(full) {
		if v, err := judge(r); err == nil && v == compare.Exact {
			sq.right = append(sq.right, r)
		}
	}
	if len(sq.right) == 0 {
		sq.right = []string{full} // the gold as written; its own alternative
	}
	if sq.right[0] != full {
		st.Reformatted++
	}
	vars, err := mutations(full, schema, s.opts.Kinds)
	if err != nil {
		return nil, fmt.Errorf("gold does not parse: %w", err)
	}
	// Spread the kept variants over kinds: one of each kind first.
	sort.SliceStable(vars, func(i, j int) bool { return kindRank(vars, i) < kindRank(vars, j) })
	for _, v := range vars {
		if len(sq.wrong) == s.opts.MaxVariants {
			break
		}
		if verdict, err := judge(v.sql); err != nil || verdict != compare.Wrong {
			st.Rejected++
			continue
		}
		sq.wrong = append(sq.wrong, v)
		st.Variants[v.kind]++
	}
	sq.tables, sq.columns, sq.literals = goldParts(full, schema)
	return sq, nil
}

// unanswerable: the right answer says the data cannot answer; the wrong
// one answers anyway with a query over one of the database's tables.
func unanswerable(q dataset.Question, schema schemaInfo) *simQuestion {
	var tables []string
	for t := range schema {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	sq := &simQuestion{q: q, idk: true, gold: map[string]bool{}, columns: map[string][]string{}}
	if len(tables) > 0 {
		sq.wrong = []variant{{sql: "SELECT count(*) AS n FROM " + tables[0], kind: "answers-unanswerable"}}
	}
	return sq
}

// unanswerableReply is what a generator writes when the schema cannot answer.
const unanswerableReply = "Sub-questions: none of them maps to the schema.\nUNANSWERABLE: no table holds what the question asks about"

// kindRank orders variants so that the n-th of a kind comes after the
// (n-1)-th of every kind.
func kindRank(vs []variant, i int) int {
	n := 0
	for j := 0; j < i; j++ {
		if vs[j].kind == vs[i].kind {
			n++
		}
	}
	return n
}

// run executes sql read-only and reads the result as text.
func run(ctx context.Context, conn *pgx.Conn, sql string) (compare.Table, error) {
	return runner.ReadOnlyQuery(ctx, conn, sql, 20*time.Second, 0)
}

// goldParts: the gold's tables, its columns per table, its string literals.
func goldParts(sql string, schema schemaInfo) ([]string, map[string][]string, []string) {
	tree, err := pg_query.Parse(sql)
	cols := map[string][]string{}
	if err != nil {
		return nil, cols, nil
	}
	refs := tablesOf(tree)
	var tables, lits []string
	for _, t := range refs {
		if !slices.Contains(tables, t) {
			tables = append(tables, t)
		}
	}
	sort.Strings(tables)
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		switch n := m.Interface().(type) {
		case *pg_query.ColumnRef:
			if t, c, ok := columnTable(n, refs, schema); ok && !slices.Contains(cols[t], c) {
				cols[t] = append(cols[t], c)
			}
		case *pg_query.A_Const:
			if sv := n.GetSval(); sv != nil {
				lits = append(lits, sv.Sval)
			}
		}
		return true
	})
	return tables, cols, lits
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// Rule is the fake Ollama rule that answers every chat and generate call.
func (s *Sim) Rule() *fakeollama.Rule {
	return &fakeollama.Rule{Name: "evalsim", ReplyFunc: s.reply}
}

// Counts reports the calls answered per kind.
func (s *Sim) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.kinds {
		out[k] = v
	}
	return out
}

// Unknown returns the first lines of prompts the model did not recognise
// (an unknown kind of call, or a question it does not know). A pipeline
// change that adds a kind of call shows here, not as a silent default.
func (s *Sim) Unknown() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unknown...)
}

// askedQuestion finds the question a prompt asks: the line after a line
// "Question:" in the last user message (few-shot examples put their
// questions inline, "Question: …", and are not it).
func askedQuestion(v fakeollama.ChatView) string {
	lines := strings.Split(v.LastUser(), "\n")
	for i := len(lines) - 2; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) == "Question:" {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// callKind tells the kinds of call apart by the JSON schema's properties
// (steps answering in JSON) or the ```sql instruction (steps answering SQL).
func callKind(v fakeollama.ChatView) string {
	if len(v.Format) > 0 && string(v.Format) != "null" {
		var f struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(v.Format, &f) != nil {
			return CallUnknown
		}
		has := func(k string) bool { _, ok := f.Properties[k]; return ok }
		switch {
		case has("keywords") && has("entities"):
			return CallKeywords
		case has("tables") && has("columns"):
			return CallSchema
		case has("value") && len(f.Properties) == 1:
			return CallLiteral
		case has("better"):
			return CallSelector
		case has("passing"):
			return CallTestsEval
		case has("tests"):
			return CallTestsGen
		case has("examples"):
			return CallExamples
		case has("targets") && has("conditions"):
			return CallDecompose
		case has("policy") && has("instruction"):
			return CallOptInstruction
		case has("question") && len(f.Properties) == 1:
			return CallFollowup
		}
		return CallUnknown
	}
	if strings.Contains(v.System, "You rewrite a query so that it runs faster") {
		return CallOptRewrite
	}
	if strings.Contains(v.Prompt, "```sql") {
		return CallSQL
	}
	return CallUnknown
}

// draw is a reproducible uniform number in [0,1) for one call: the seed,
// the question, the kind, the prompt's system text and how many such calls
// came before. Parallel asks get the same draws whatever the order.
func (s *Sim) draw(question, kind string, v fakeollama.ChatView) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", question, kind, v.System)
	key := h.Sum64()
	s.mu.Lock()
	n := s.calls[strconv.FormatUint(key, 16)]
	s.calls[strconv.FormatUint(key, 16)]++
	s.mu.Unlock()
	return rand.New(rand.NewPCG(s.opts.Seed^key, uint64(n)))
}

func (s *Sim) reply(v fakeollama.ChatView) string {
	kind := callKind(v)
	switch kind {
	case CallOptInstruction, CallOptRewrite:
		s.mu.Lock()
		s.kinds[kind]++
		s.mu.Unlock()
		return optimizerReply(kind, v)
	case CallFollowup:
		return s.followupReply(v)
	}
	qtext := askedQuestion(v)
	sq := s.qs[qtext]
	s.mu.Lock()
	if kind == CallUnknown || sq == nil {
		first := firstLine(v.System)
		if first == "" {
			first = firstLine(v.LastUser())
		}
		s.unknown = append(s.unknown, kind+": "+first+" | question: "+qtext)
	}
	s.kinds[kind]++
	s.mu.Unlock()
	if sq == nil {
		return defaultReply(kind)
	}
	r := s.draw(qtext, kind, v)
	switch kind {
	case CallKeywords:
		return keywordsReply(sq)
	case CallSchema:
		b, _ := json.Marshal(map[string]any{"reasoning": "the tables the question needs", "tables": sq.tables, "columns": sq.columns})
		return string(b)
	case CallLiteral:
		return s.literalReply(v, sq, r)
	case CallSQL:
		if sq.idk {
			if r.Float64() < s.opts.P || len(sq.wrong) == 0 {
				return unanswerableReply
			}
			s.mu.Lock()
			s.emitted[Canonical(sq.wrong[0].sql)] = false
			s.mu.Unlock()
			return sqlReply(sq.wrong[0].sql)
		}
		p := s.opts.P
		if s.opts.ExampleLift > 0 && exampleOverGold(v.LastUser(), sq) {
			p += s.opts.ExampleLift * (1 - p)
			s.mu.Lock()
			s.lifted++
			s.mu.Unlock()
		}
		return sqlReply(s.sqlAnswer(sq, r, p))
	case CallSelector:
		return s.selectorReply(v, sq, r)
	case CallTestsGen:
		return `{"tests": ["The result has the columns the question asks for.", "Every row satisfies the question's conditions.", "The number of rows matches the question."]}`
	case CallTestsEval:
		return s.testsEvalReply(v, sq, r)
	case CallDecompose:
		b, _ := json.Marshal(map[string][]string{"targets": {"what the question asks for"}, "conditions": {"as the question states"}})
		return string(b)
	case CallExamples:
		t := "x"
		if len(sq.tables) > 0 {
			t = sq.tables[0]
		}
		b, _ := json.Marshal(map[string]any{"examples": []map[string]string{{"question": "How many rows does " + t + " have?", "sql": "SELECT COUNT(*) FROM " + t}}})
		return string(b)
	}
	return defaultReply(kind)
}

// optimizerReply proposes no change: the first policy, and the original
// query (the prompt's first ```sql block) as the rewrite.
func optimizerReply(kind string, v fakeollama.ChatView) string {
	if kind == CallOptInstruction {
		policy := "removal"
		if _, rest, ok := strings.Cut(v.LastUser(), "Policies:\n- "); ok {
			policy, _, _ = strings.Cut(rest, ":")
		}
		b, _ := json.Marshal(map[string]string{"policy": policy, "instruction": "keep the query as it is"})
		return string(b)
	}
	_, rest, _ := strings.Cut(v.LastUser(), "```sql\n")
	sql, _, _ := strings.Cut(rest, "```")
	return sqlReply(strings.TrimSpace(sql))
}

func defaultReply(kind string) string {
	switch kind {
	case CallKeywords:
		return `{"keywords": [], "entities": []}`
	case CallSQL:
		return "```sql\nSELECT 1\n```"
	}
	return "{}"
}

// sqlAnswer is the right SQL with probability p, else a wrong variant.
func (s *Sim) sqlAnswer(sq *simQuestion, r *rand.Rand, p float64) string {
	var sql string
	right := r.Float64() < p || len(sq.wrong) == 0
	if right {
		sql = sq.right[r.IntN(len(sq.right))]
	} else {
		sql = sq.wrong[r.IntN(len(sq.wrong))].sql
	}
	s.mu.Lock()
	s.emitted[Canonical(sql)] = right
	s.mu.Unlock()
	return sql
}

func sqlReply(sql string) string {
	return "Sub-questions:\n1. what the question asks -> the query below\nCombined: one query.\n```sql\n" + sql + "\n```"
}

func keywordsReply(sq *simQuestion) string {
	var kws []string
	for _, w := range strings.FieldsFunc(sq.q.Question, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	}) {
		if len(w) > 3 && !slices.Contains(kws, w) {
			kws = append(kws, w)
		}
	}
	ents := append([]string{}, sq.literals...)
	for i, e := range ents {
		ents[i] = strings.Trim(e, "%")
	}
	b, _ := json.Marshal(map[string][]string{"keywords": kws, "entities": ents})
	return string(b)
}

var literalRe = regexp.MustCompile(`with '((?:[^']|'')*)', but no row`)
var optionRe = regexp.MustCompile(`(?m)^- '((?:[^']|'')*)'\s*$`)

// literalReply picks the stored value the gold uses with probability P,
// else keeps the literal.
func (s *Sim) literalReply(v fakeollama.ChatView, sq *simQuestion, r *rand.Rand) string {
	prompt := v.LastUser()
	lit := ""
	if m := literalRe.FindStringSubmatch(prompt); m != nil {
		lit = strings.ReplaceAll(m[1], "''", "'")
	}
	choice := lit
	if r.Float64() < s.opts.P {
		for _, m := range optionRe.FindAllStringSubmatch(prompt, -1) {
			o := strings.ReplaceAll(m[1], "''", "'")
			if slices.Contains(sq.literals, o) {
				choice = o
				break
			}
		}
	}
	b, _ := json.Marshal(map[string]string{"value": choice})
	return string(b)
}

// candidates returns the SQL after each "Candidate <label>:" in the prompt.
func candidates(prompt string, labels []string) map[string]string {
	out := map[string]string{}
	for _, l := range labels {
		i := strings.Index(prompt, "Candidate "+l+":")
		if i < 0 {
			continue
		}
		rest := prompt[i:]
		j := strings.Index(rest, "```sql")
		if j < 0 {
			continue
		}
		body := rest[j+len("```sql"):]
		if k := strings.Index(body, "```"); k >= 0 {
			out[l] = strings.TrimSpace(body[:k])
		}
	}
	return out
}

var numberedRe = regexp.MustCompile(`Candidate (\d+):`)

// isRight judges a candidate: by the SQL this model wrote, by the gold's
// alternatives, and failing both by running it against the gold.
func (s *Sim) isRight(sq *simQuestion, sql string) bool {
	c := Canonical(sql)
	s.mu.Lock()
	right, known := s.emitted[c]
	s.mu.Unlock()
	if known {
		return right
	}
	if sq.gold[c] {
		return true
	}
	for _, r := range sq.right {
		if Canonical(r) == c {
			return true
		}
	}
	ok, err := s.judgeLive(sq, sql)
	return err == nil && ok
}

func (s *Sim) judgeLive(sq *simQuestion, sql string) (bool, error) {
	ctx := context.Background()
	conn, err := s.connect(ctx, sq.q.DB)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	gen, err := run(ctx, conn, sql)
	if err != nil {
		return false, err
	}
	side := compare.Side{Table: gen}
	if k, ok := compare.OrderKeys(sql, gen.Columns); ok {
		side.Keys = k
	}
	for _, a := range compare.Alternatives(sq.q.Gold) {
		g, err := run(ctx, conn, a)
		if err != nil {
			continue
		}
		gs := compare.Side{Table: g}
		if k, ok := compare.OrderKeys(a, g.Columns); ok {
			gs.Keys = k
		}
		if compare.SQLEval(gs, side, compare.OrderMatters(sq.q.Category, sq.q.Question)) != compare.Wrong {
			return true, nil
		}
	}
	return false, errors.New("no alternative matches")
}

func (s *Sim) selectorReply(v fakeollama.ChatView, sq *simQuestion, r *rand.Rand) string {
	c := candidates(v.LastUser(), []string{"A", "B"})
	a, b := s.isRight(sq, c["A"]), s.isRight(sq, c["B"])
	better := "A"
	switch {
	case a == b:
		if r.IntN(2) == 1 {
			better = "B"
		}
	case r.Float64() < s.opts.Q:
		if b {
			better = "B"
		}
	default:
		if a {
			better = "B"
		}
	}
	out, _ := json.Marshal(map[string]string{"reasoning": "compared what each candidate returns with the question", "better": better})
	return string(out)
}

func (s *Sim) testsEvalReply(v fakeollama.ChatView, sq *simQuestion, r *rand.Rand) string {
	prompt := v.LastUser()
	var labels []string
	for _, m := range numberedRe.FindAllStringSubmatch(prompt, -1) {
		if !slices.Contains(labels, m[1]) {
			labels = append(labels, m[1])
		}
	}
	c := candidates(prompt, labels)
	truth := r.Float64() < s.opts.Q
	passing := []int{}
	for _, l := range labels {
		n, _ := strconv.Atoi(l)
		if s.isRight(sq, c[l]) == truth {
			passing = append(passing, n)
		}
	}
	out, _ := json.Marshal(map[string]any{"reasoning": "ran each test against each candidate", "passing": passing})
	return string(out)
}

// With returns a fresh simulated model over the same prepared questions
// (no model state carried over: call counts, recognised SQL) answering with
// other probabilities, seed and kinds of wrong variant — a subset of the
// kinds s was prepared with. Preparing runs every gold query and variant on
// the databases; this does not.
func (s *Sim) With(opts Options) (*Sim, Stats) {
	if len(opts.Kinds) == 0 {
		opts.Kinds = s.opts.Kinds
	}
	opts.MaxVariants = s.opts.MaxVariants
	n := &Sim{opts: opts, qs: map[string]*simQuestion{}, calls: map[string]int{}, kinds: map[string]int{}, emitted: map[string]bool{}, connect: s.connect}
	st := Stats{Variants: map[string]int{}}
	for key, q := range s.qs {
		cp := *q
		cp.wrong = nil
		for _, v := range q.wrong {
			if q.idk || slices.Contains(opts.Kinds, v.kind) {
				cp.wrong = append(cp.wrong, v)
			}
		}
		n.qs[key] = &cp
		if q.idk {
			st.Unanswerable++
			continue
		}
		st.Questions++
		if len(cp.wrong) == 0 {
			st.Unplantable++
		}
		if cp.right[0] != compare.Full(q.q.Gold) {
			st.Reformatted++
		}
		for _, v := range cp.wrong {
			st.Variants[v.kind]++
		}
	}
	return n, st
}

// followupReply rewrites the follow-up the prompt asks about: the
// standalone reading with probability P, else the previous question.
func (s *Sim) followupReply(v fakeollama.ChatView) string {
	lines := strings.Split(v.LastUser(), "\n")
	q := ""
	for i := 0; i+1 < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == "Follow-up question:" {
			q = strings.TrimSpace(lines[i+1])
			break
		}
	}
	f, ok := s.opts.Followups[q]
	s.mu.Lock()
	s.kinds[CallFollowup]++
	if !ok {
		s.unknown = append(s.unknown, CallFollowup+": "+q)
	}
	s.mu.Unlock()
	out := q
	if ok {
		out = f.Previous
		if s.draw(q, CallFollowup, v).Float64() < s.opts.P {
			out = f.Standalone
		}
	}
	b, _ := json.Marshal(map[string]string{"question": out})
	return string(b)
}
