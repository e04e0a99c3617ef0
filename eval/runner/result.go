package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nlproxy/nlproxy/eval/compare"
)

// Outcomes of one question.
const (
	Correct   = "correct"   // the result equals the gold's (some alternative)
	Subset    = "subset"    // sql-eval's subset-correct: the gold's columns and more
	Wrong     = "wrong"     // ran, different result
	Error     = "error"     // no SQL, SQL that failed, or the time limit
	Abstained = "abstained" // the engine declined (SQLSTATE 42N02)
)

// Result is one question's record, one JSON line in the results file.
type Result struct {
	Run          string          `json:"run,omitempty"` // label of the run (model, profile, …)
	Dataset      string          `json:"dataset"`
	ID           string          `json:"id"`
	DB           string          `json:"db"`
	Question     string          `json:"question"`
	Category     string          `json:"category,omitempty"`
	Difficulty   string          `json:"difficulty,omitempty"`
	Unanswerable bool            `json:"unanswerable,omitempty"`
	Profile      string          `json:"profile,omitempty"`      // the profile asked for ("" for the proxy's default)
	ProfileUsed  string          `json:"profile_used,omitempty"` // the profile the engine says it used
	Outcome      string          `json:"outcome"`
	SQL          string          `json:"sql,omitempty"`
	Gold         string          `json:"gold"`
	GoldMatched  string          `json:"gold_matched,omitempty"` // the alternative that matched
	Confidence   *float64        `json:"confidence,omitempty"`
	LLMCalls     int             `json:"llm_calls"`
	PromptTokens int             `json:"prompt_tokens"`
	CompTokens   int             `json:"completion_tokens"`
	Cached       bool            `json:"cached,omitempty"`
	AskMS        int64           `json:"ask_ms"`              // the ask round trip, as the client saw it
	EngineMS     int64           `json:"engine_ms,omitempty"` // the engine's own figure (ms column)
	ExecMS       int64           `json:"exec_ms"`             // running the generated SQL
	Trace        json.RawMessage `json:"trace,omitempty"`
	// Rewrites are the literals the engine's literal correction changed in
	// SQL (ask-sql's literals column), so their effect can be counted.
	Rewrites []Rewrite      `json:"rewrites,omitempty"`
	SQLState string         `json:"sqlstate,omitempty"`
	Error    string         `json:"error,omitempty"`
	Hint     string         `json:"hint,omitempty"`
	GoldRows int            `json:"gold_rows"`
	GenRows  int            `json:"gen_rows"`
	GoldHead *compare.Table `json:"gold_head,omitempty"` // first rows, for the report
	GenHead  *compare.Table `json:"gen_head,omitempty"`
	Time     time.Time      `json:"time"`
	// Conversation and Turn place the question in a conversation;
	// Standalone is the dataset's reading of a follow-up, Understood the
	// engine's (ask-sql's understood_as; "" when it read none).
	Conversation string `json:"conversation,omitempty"`
	Turn         int    `json:"turn,omitempty"`
	Standalone   string `json:"standalone,omitempty"`
	Understood   string `json:"understood_as,omitempty"`
	// Verified names the verified query that answered ("" when the SQL was
	// generated).
	Verified string `json:"verified,omitempty"`
}

// Rewrite is one literal the engine changed to a stored value.
type Rewrite struct {
	Table  string `json:"table"`
	Column string `json:"column"`
	From   string `json:"from"`
	To     string `json:"to"`
	Kind   string `json:"kind"` // case, whitespace, value or code
}

// Right is whether the outcome is the one wanted: correct or subset-correct
// for an answerable question, abstaining for an unanswerable one.
func (r Result) Right() bool {
	if r.Unanswerable {
		return r.Outcome == Abstained || r.Outcome == Correct
	}
	return r.Outcome == Correct || r.Outcome == Subset
}

// Key identifies a question within a results file: a file may hold several
// profiles' runs.
func (r Result) Key() string { return r.Profile + "\x00" + r.ID }

// ReadResults reads a JSONL results file. A last line cut short by an
// interruption is ignored; any other bad line is an error.
func ReadResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeResults(f, path)
}

func decodeResults(r io.Reader, name string) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var pending error
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if pending != nil {
			return nil, pending
		}
		var res Result
		if err := json.Unmarshal(b, &res); err != nil {
			pending = fmt.Errorf("%s:%d: %w", name, line, err)
			continue
		}
		out = append(out, res)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// appender appends results to a file, one line each, after trimming a last
// line an interruption cut short.
type appender struct {
	f *os.File
}

func openAppender(path string) (*appender, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if n := len(b); n > 0 && b[n-1] != '\n' {
		keep := int64(bytes.LastIndexByte(b, '\n') + 1)
		if err := f.Truncate(keep); err != nil {
			f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return &appender{f: f}, nil
}

func (a *appender) write(r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = a.f.Write(append(b, '\n'))
	return err
}

func (a *appender) Close() error {
	if a == nil || a.f == nil {
		return nil
	}
	return errors.Join(a.f.Sync(), a.f.Close())
}
