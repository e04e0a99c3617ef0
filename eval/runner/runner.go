// Package runner asks every question of a dataset through a real proxy
// session — `ask-sql` for the SQL and the engine's figures, then the SQL
// itself on the same session — runs the gold query, compares the results
// and appends one JSON line per question to a results file, so that an
// interrupted run resumes where it stopped.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Options configure a run.
type Options struct {
	// Connect opens a session through the proxy to a dataset database
	// (the caller maps dataset names to server names).
	Connect func(ctx context.Context, db string) (*pgx.Conn, error)
	// Profile is put in the marker, ask-sql(<profile>); "" asks plainly.
	Profile string
	// Run labels the results (e.g. the model name).
	Run string
	// Compare is "sql-eval" or "bird" (default: the dataset's own format).
	Compare string
	// Parallel bounds the questions in flight (default 1).
	Parallel int
	// Timeout bounds each question: the ask and running its SQL (default 5m).
	Timeout time.Duration
	// StatementTimeout bounds each run of generated or gold SQL (default 1m).
	StatementTimeout time.Duration
	// MaxRows read of a result (default 100000; more is an error).
	MaxRows int
	// HeadRows of each result kept in the record for the report (default 5).
	HeadRows int
	// Results is the JSONL file appended to; questions already in it (same
	// profile and ID) are skipped. "" keeps results in memory only.
	Results string
	// RetryErrors asks again the questions whose recorded outcome is error.
	RetryErrors bool
	// Progress receives a progress bar (nil: none); TTY redraws it in place.
	Progress io.Writer
	TTY      bool
	// FailedAsk, when set, gives the model calls and tokens of the ask that
	// just failed on the backend with this PID (a failed ask answers no
	// ask-sql row to read them from); ok is false when unknown. The
	// in-process proxy of `eval run --upstream` knows them.
	FailedAsk func(pid uint32) (calls, prompt, completion int, ok bool)
}

func (o *Options) defaults(ds *dataset.Dataset) {
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = time.Minute
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 100000
	}
	if o.HeadRows <= 0 {
		o.HeadRows = 5
	}
	if o.Compare == "" {
		o.Compare = ds.Name
	}
}

// Run asks the questions of ds and returns every result of this profile —
// those recorded earlier in the results file and the new ones.
func Run(ctx context.Context, ds *dataset.Dataset, opts Options) ([]Result, error) {
	opts.defaults(ds)
	if opts.Connect == nil {
		return nil, errors.New("runner: no Connect")
	}
	var (
		done []Result
		app  *appender
	)
	skip := map[string]bool{}
	if opts.Results != "" {
		prev, err := ReadResults(opts.Results)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("runner: %w", err)
		}
		for _, r := range prev {
			if r.Profile != opts.Profile || (opts.RetryErrors && r.Outcome == Error) {
				continue
			}
			if !skip[r.ID] {
				skip[r.ID] = true
				done = append(done, r)
			}
		}
		if app, err = openAppender(opts.Results); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		defer app.Close()
	}
	// A job is one question, or the turns of one conversation, asked in
	// order in one session; a conversation not wholly recorded is asked
	// again from its first turn (its history is gone with its session).
	var todo [][]dataset.Question
	asked := 0
	for _, g := range groups(ds.Questions) {
		all := true
		for _, q := range g {
			all = all && skip[q.ID]
		}
		if all {
			continue
		}
		if len(g) > 1 || g[0].Conversation != "" {
			done = slices.DeleteFunc(done, func(r Result) bool { return r.Conversation == g[0].Conversation })
		}
		todo = append(todo, g)
		asked += len(g)
	}
	bar := newProgress(opts.Progress, opts.TTY, len(done)+asked, done)
	defer bar.finish()

	jobs := make(chan []dataset.Question)
	var (
		mu      sync.Mutex
		results = done
		werr    error
		wg      sync.WaitGroup
	)
	for range min(opts.Parallel, max(len(todo), 1)) {
		wg.Go(func() {
			w := &worker{opts: &opts, ds: ds, conns: map[string]*pgx.Conn{}}
			defer w.close()
			for g := range jobs {
				w.fresh(ctx, g[0].DB)
				for _, q := range g {
					res := w.ask(ctx, q)
					mu.Lock()
					if ctx.Err() == nil || res.Outcome != Error {
						results = append(results, res)
						if app != nil && werr == nil {
							werr = app.write(res)
						}
						bar.add(res)
					}
					mu.Unlock()
				}
			}
		})
	}
feed:
	for _, g := range todo {
		select {
		case jobs <- g:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if werr != nil {
		return results, fmt.Errorf("runner: write results: %w", werr)
	}
	return results, ctx.Err()
}

// worker holds one session per database it has asked about.
type worker struct {
	opts  *Options
	ds    *dataset.Dataset
	conns map[string]*pgx.Conn
}

func (w *worker) close() {
	for _, c := range w.conns {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Close(ctx)
		cancel()
	}
}

func (w *worker) conn(ctx context.Context, db string) (*pgx.Conn, error) {
	if c := w.conns[db]; c != nil && !c.IsClosed() && c.PgConn().TxStatus() == 'I' {
		return c, nil
	} else if c != nil {
		_ = c.Close(ctx)
		delete(w.conns, db)
	}
	c, err := w.opts.Connect(ctx, db)
	if err != nil {
		return nil, err
	}
	w.conns[db] = c
	return c, nil
}

// groups are the questions as the runner asks them: each conversation's
// turns together, in turn order, each other question alone.
func groups(qs []dataset.Question) [][]dataset.Question {
	var out [][]dataset.Question
	at := map[string]int{}
	for _, q := range qs {
		if q.Conversation == "" {
			out = append(out, []dataset.Question{q})
			continue
		}
		i, ok := at[q.Conversation]
		if !ok {
			i = len(out)
			at[q.Conversation] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], q)
	}
	for _, g := range out {
		slices.SortStableFunc(g, func(a, b dataset.Question) int { return a.Turn - b.Turn })
	}
	return out
}

// fresh starts a new conversation on the session for db: DISCARD ALL makes
// nlproxy forget the earlier asks, so a question is not read as a
// follow-up of another. A session that fails it is closed (the next ask
// opens another, with no history either).
func (w *worker) fresh(ctx context.Context, db string) {
	c := w.conns[db]
	if c == nil || c.IsClosed() {
		return
	}
	if _, err := c.Exec(ctx, "DISCARD ALL", pgx.QueryExecModeSimpleProtocol); err != nil {
		_ = c.Close(ctx)
		delete(w.conns, db)
	}
}

// Marker is the statement that asks q with the given profile.
func Marker(profile, text string) string {
	// The question travels in a block comment: "*/" inside would end it.
	text = strings.ReplaceAll(text, "*/", "* /")
	if profile == "" {
		return "/* ask-sql: " + text + " */"
	}
	return "/* ask-sql(" + profile + "): " + text + " */"
}

func (w *worker) ask(ctx context.Context, q dataset.Question) Result {
	res := Result{
		Run: w.opts.Run, Dataset: w.ds.Name, ID: q.ID, DB: q.DB, Question: q.Text(), Category: q.Category,
		Difficulty: q.Difficulty, Unanswerable: q.Unanswerable, Profile: w.opts.Profile, Gold: q.Gold, Time: time.Now().UTC(),
		Conversation: q.Conversation, Turn: q.Turn, Standalone: q.Standalone,
	}
	qctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	conn, err := w.conn(qctx, q.DB)
	if err != nil {
		return fail(res, "connect", err)
	}
	start := time.Now()
	ok := w.askSQL(qctx, conn, q, &res)
	res.AskMS = time.Since(start).Milliseconds()
	if !ok {
		return res
	}
	start = time.Now()
	gen, err := w.query(qctx, conn, res.SQL)
	res.ExecMS = time.Since(start).Milliseconds()
	if err != nil {
		return fail(res, "generated SQL", err)
	}
	res.GenRows = len(gen.Rows)
	res.GenHead = head(gen, w.opts.HeadRows)
	// The gold runs with its own time limit: a slow model must not make
	// the gold look broken.
	gctx, gcancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer gcancel()
	gconn, err := w.conn(gctx, q.DB)
	if err != nil {
		return fail(res, "connect", err)
	}
	w.judge(gctx, gconn, q, gen, &res)
	return res
}

// askSQL asks for the SQL and fills the engine's figures; false means the
// outcome is settled (abstained or error).
func (w *worker) askSQL(ctx context.Context, conn *pgx.Conn, q dataset.Question, res *Result) bool {
	failed := func(err error) bool {
		*res = askFailed(*res, err)
		if w.opts.FailedAsk != nil {
			if calls, prompt, completion, ok := w.opts.FailedAsk(conn.PgConn().PID()); ok {
				res.LLMCalls, res.PromptTokens, res.CompTokens = calls, prompt, completion
			}
		}
		return false
	}
	rows, err := conn.Query(ctx, Marker(w.opts.Profile, q.Text()), pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return failed(err)
	}
	var cols map[string]*string
	for rows.Next() {
		if cols != nil {
			continue
		}
		cols = map[string]*string{}
		vals := rows.RawValues()
		for i, fd := range rows.FieldDescriptions() {
			if i < len(vals) && vals[i] != nil {
				s := string(vals[i])
				cols[strings.ToLower(fd.Name)] = &s
			} else {
				cols[strings.ToLower(fd.Name)] = nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		return failed(err)
	}
	if cols == nil || cols["sql"] == nil {
		*res = fail(*res, "ask", errors.New("ask-sql answered no sql column"))
		return false
	}
	res.SQL = *cols["sql"]
	atoi := func(name string) int {
		if v := cols[name]; v != nil {
			n, _ := strconv.Atoi(strings.TrimSpace(*v))
			return n
		}
		return 0
	}
	res.LLMCalls, res.PromptTokens, res.CompTokens = atoi("llm_calls"), atoi("prompt_tokens"), atoi("completion_tokens")
	res.EngineMS = int64(atoi("ms"))
	if v := cols["cached"]; v != nil {
		res.Cached = *v == "true" || *v == "t"
	}
	if v := cols["profile"]; v != nil {
		res.ProfileUsed = *v
	}
	if v := cols["confidence"]; v != nil {
		if f, err := strconv.ParseFloat(strings.TrimSpace(*v), 64); err == nil {
			res.Confidence = &f
		}
	}
	if v := cols["trace"]; v != nil && json.Valid([]byte(*v)) {
		res.Trace = json.RawMessage(*v)
	}
	if v := cols["understood_as"]; v != nil {
		res.Understood = *v
	}
	if v := cols["verified"]; v != nil {
		res.Verified = *v
	}
	if v := cols["literals"]; v != nil {
		if err := json.Unmarshal([]byte(*v), &res.Rewrites); err != nil {
			*res = fail(*res, "ask", fmt.Errorf("ask-sql's literals column: %w", err))
			return false
		}
	}
	if v := cols["error"]; v != nil {
		// A failed ask-sql answers with its row: sql is the last attempt
		// (kept for the report), error why it failed; the figures above
		// are the failed ask's own.
		*res = askFailed(*res, askSQLError(*v))
		return false
	}
	return true
}

// askSQLError reads ask-sql's error column ("SQLSTATE: message", then
// "DETAIL: …" and "HINT: …" lines) back into the error a failed ask: gives.
func askSQLError(col string) *pgconn.PgError {
	lines := strings.Split(col, "\n")
	pe := &pgconn.PgError{Severity: "ERROR", Message: lines[0]}
	if code, msg, ok := strings.Cut(lines[0], ": "); ok && len(code) == 5 {
		pe.Code, pe.Message = code, msg
	}
	field := &pe.Message
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "DETAIL: "):
			pe.Detail, field = strings.TrimPrefix(l, "DETAIL: "), &pe.Detail
		case strings.HasPrefix(l, "HINT: "):
			pe.Hint, field = strings.TrimPrefix(l, "HINT: "), &pe.Hint
		default: // a field of several lines
			*field += "\n" + l
		}
	}
	return pe
}

// askFailed records a failed ask: abstained when the engine declined
// (42N02), else an error.
func askFailed(res Result, err error) Result {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pg.CodeAbstained {
		res.Outcome, res.SQLState, res.Error, res.Hint = Abstained, pe.Code, pe.Message, pe.Hint
		if pe.Detail != "" {
			res.Error += " (" + pe.Detail + ")"
		}
		return res
	}
	return fail(res, "ask", err)
}

// query runs sql read-only under the run's statement time limit and row cap.
func (w *worker) query(ctx context.Context, conn *pgx.Conn, sql string) (compare.Table, error) {
	return ReadOnlyQuery(ctx, conn, sql, w.opts.StatementTimeout, w.opts.MaxRows)
}

// ReadOnlyQuery runs sql in a read-only transaction with statement_timeout
// timeout, rolled back, and reads its result as text; more than maxRows rows
// (when > 0) is an error.
func ReadOnlyQuery(ctx context.Context, conn *pgx.Conn, sql string, timeout time.Duration, maxRows int) (compare.Table, error) {
	var t compare.Table
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return t, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
	}()
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", timeout.Milliseconds())); err != nil {
		return t, err
	}
	rows, err := tx.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for _, fd := range rows.FieldDescriptions() {
		t.Columns = append(t.Columns, fd.Name)
	}
	for rows.Next() {
		if maxRows > 0 && len(t.Rows) == maxRows {
			return t, fmt.Errorf("more than %d rows", maxRows)
		}
		vals := rows.RawValues()
		row := make([]*string, len(vals))
		for i, v := range vals {
			if v != nil {
				s := string(v)
				row[i] = &s
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t, rows.Err()
}

// judge runs every gold alternative and sets the outcome.
func (w *worker) judge(ctx context.Context, conn *pgx.Conn, q dataset.Question, gen compare.Table, res *Result) {
	if w.opts.Compare == dataset.FormatBIRD {
		gold, err := w.query(ctx, conn, q.Gold)
		if err != nil {
			*res = fail(*res, "gold SQL", err)
			return
		}
		res.GoldRows, res.GoldHead = len(gold.Rows), head(gold, w.opts.HeadRows)
		res.Outcome = compare.BIRD(gold, gen).String()
		if res.Outcome == Correct {
			res.GoldMatched = q.Gold
		}
		return
	}
	ordered := compare.OrderMatters(q.Category, q.Question)
	genSide := compare.Side{Table: gen}
	if keys, ok := compare.OrderKeys(res.SQL, gen.Columns); ok {
		genSide.Keys = keys
	}
	best, bestSQL := compare.Wrong, ""
	var firstErr error
	for _, alt := range compare.Alternatives(q.Gold) {
		gold, err := w.query(ctx, conn, alt)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("gold %q: %w", alt, err)
			}
			if c, cerr := w.conn(ctx, q.DB); cerr == nil {
				conn = c // a failed query can leave the session closed
			}
			continue
		}
		if res.GoldHead == nil {
			res.GoldRows, res.GoldHead = len(gold.Rows), head(gold, w.opts.HeadRows)
		}
		side := compare.Side{Table: gold}
		if keys, ok := compare.OrderKeys(alt, gold.Columns); ok {
			side.Keys = keys
		}
		if v := compare.SQLEval(side, genSide, ordered); v > best {
			best, bestSQL = v, alt
			res.GoldRows, res.GoldHead = len(gold.Rows), head(gold, w.opts.HeadRows)
			if v == compare.Exact {
				break
			}
		}
	}
	if res.GoldHead == nil && firstErr != nil {
		*res = fail(*res, "gold SQL", firstErr)
		return
	}
	res.Outcome, res.GoldMatched = best.String(), bestSQL
}

func head(t compare.Table, n int) *compare.Table {
	h := compare.Table{Columns: t.Columns, Rows: t.Rows[:min(n, len(t.Rows))]}
	return &h
}

// fail records an error outcome with the SQLSTATE when the server sent one.
func fail(res Result, stage string, err error) Result {
	res.Outcome = Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		res.SQLState, res.Error, res.Hint = pe.Code, stage+": "+pe.Message, pe.Hint
	case errors.Is(err, context.DeadlineExceeded):
		res.Error = stage + ": time limit per question reached"
	default:
		res.Error = stage + ": " + err.Error()
	}
	return res
}
