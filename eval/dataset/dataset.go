// Package dataset reads text-to-SQL evaluation sets — Defog's sql-eval
// (questions.csv, idk.csv, databases/<db>/<db>.sql + .json) and BIRD (a JSON
// list of questions, databases as .sql files) — into one question model, and
// loads their databases into a PostgreSQL server: each as a database of its
// own (Load) or as a schema of a shared database (LoadSchema).
package dataset

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Formats a Dataset can be read from.
const (
	FormatSQLEval = "sql-eval"
	FormatBIRD    = "bird"
)

// ErrDataset marks a data directory that cannot be read as the format says.
var ErrDataset = errors.New("dataset")

// Question is one evaluation item.
type Question struct {
	ID         string `json:"id"` // stable across runs: results are resumed and compared by it
	DB         string `json:"db"` // database name in the dataset (before any prefix)
	Question   string `json:"question"`
	Gold       string `json:"gold"`                 // gold SQL as the dataset writes it
	Category   string `json:"category,omitempty"`   // sql-eval query_category
	Difficulty string `json:"difficulty,omitempty"` // BIRD difficulty
	// Instructions (sql-eval) or evidence (BIRD): passed to the model
	// appended to the question, on its own line.
	Instructions string `json:"instructions,omitempty"`
	// Unanswerable: the data cannot answer it (sql-eval idk.csv); abstaining
	// is the right outcome.
	Unanswerable bool `json:"unanswerable,omitempty"`
	// Conversation and Turn place a question in a conversation (see
	// Conversation): its turns are asked in order in one session.
	// Standalone is how the question reads without the turns before it.
	Conversation string `json:"conversation,omitempty"`
	Turn         int    `json:"turn,omitempty"`
	Standalone   string `json:"standalone,omitempty"`
}

// Text is what is asked: the question, then the instructions on the next line.
func (q Question) Text() string {
	t := strings.TrimSpace(q.Question)
	if in := strings.TrimSpace(q.Instructions); in != "" {
		t += "\n" + in
	}
	return t
}

// Dataset is a set of questions over databases in one directory.
type Dataset struct {
	Name      string // "sql-eval" or "bird"
	Dir       string
	Questions []Question
}

// DBs lists the databases the questions use, sorted.
func (d *Dataset) DBs() []string {
	var out []string
	for _, q := range d.Questions {
		if !slices.Contains(out, q.DB) {
			out = append(out, q.DB)
		}
	}
	slices.Sort(out)
	return out
}

// Filter keeps the questions whose database is in dbs (all when empty) and,
// unless withUnanswerable, drops the unanswerable ones.
func (d *Dataset) Filter(dbs []string, withUnanswerable bool) {
	out := d.Questions[:0]
	for _, q := range d.Questions {
		if len(dbs) > 0 && !slices.Contains(dbs, q.DB) {
			continue
		}
		if q.Unanswerable && !withUnanswerable {
			continue
		}
		out = append(out, q)
	}
	d.Questions = out
}

// Open reads a dataset in the given format from dir.
func Open(format, dir string) (*Dataset, error) {
	switch format {
	case FormatSQLEval, "":
		return OpenSQLEval(dir)
	case FormatBIRD:
		return OpenBIRD(dir)
	}
	return nil, fmt.Errorf("%w: unknown format %q (sql-eval or bird)", ErrDataset, format)
}

// OpenSQLEval reads dir/questions.csv and, when present, dir/idk.csv.
// Question IDs are "<db>/q<row>" and "<db>/idk<row>" (row within the file,
// from 1), so they survive filtering.
func OpenSQLEval(dir string) (*Dataset, error) {
	ds := &Dataset{Name: FormatSQLEval, Dir: dir}
	qs, err := readSQLEvalCSV(filepath.Join(dir, "questions.csv"), "q", false)
	if err != nil {
		return nil, err
	}
	ds.Questions = qs
	idk, err := readSQLEvalCSV(filepath.Join(dir, "idk.csv"), "idk", true)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		ds.Questions = append(ds.Questions, idk...)
	}
	return ds, nil
}

func readSQLEvalCSV(path, prefix string, unanswerable bool) ([]Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: header: %w", ErrDataset, path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"question", "query", "db_name"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%w: %s: no %q column", ErrDataset, path, need)
		}
	}
	get := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	var out []Question
	for row := 1; ; row++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrDataset, path, err)
		}
		db := strings.TrimSpace(get(rec, "db_name"))
		out = append(out, Question{
			ID:           fmt.Sprintf("%s/%s%d", db, prefix, row),
			DB:           db,
			Question:     strings.TrimSpace(get(rec, "question")),
			Gold:         strings.TrimSpace(get(rec, "query")),
			Category:     strings.TrimSpace(get(rec, "query_category")),
			Instructions: strings.TrimSpace(get(rec, "instructions")),
			Unanswerable: unanswerable,
		})
	}
	return out, nil
}

// birdItem is one entry of BIRD's dev.json / train.json.
type birdItem struct {
	QuestionID *int   `json:"question_id"`
	DBID       string `json:"db_id"`
	Question   string `json:"question"`
	Evidence   string `json:"evidence"`
	SQL        string `json:"SQL"`
	Difficulty string `json:"difficulty"`
}

// OpenBIRD reads the first of dir/dev.json, dir/mini_dev_postgresql.json (BIRD
// Mini-Dev's PostgreSQL version), dir/questions.json, dir/train.json.
// Databases are dir/databases/<db_id>/<db_id>.sql (a Postgres dump or plain
// SQL). IDs are "<db_id>/<question_id>" (or the position when absent).
func OpenBIRD(dir string) (*Dataset, error) {
	var path string
	for _, name := range []string{"dev.json", "mini_dev_postgresql.json", "questions.json", "train.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			path = filepath.Join(dir, name)
			break
		}
	}
	if path == "" {
		return nil, fmt.Errorf("%w: %s has no dev.json, mini_dev_postgresql.json, questions.json or train.json", ErrDataset, dir)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	var items []birdItem
	if err := json.Unmarshal(b, &items); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDataset, path, err)
	}
	ds := &Dataset{Name: FormatBIRD, Dir: dir}
	for i, it := range items {
		if it.DBID == "" || it.Question == "" || it.SQL == "" {
			return nil, fmt.Errorf("%w: %s: item %d needs db_id, question and SQL", ErrDataset, path, i)
		}
		id := i
		if it.QuestionID != nil {
			id = *it.QuestionID
		}
		ds.Questions = append(ds.Questions, Question{
			ID:           fmt.Sprintf("%s/%d", it.DBID, id),
			DB:           it.DBID,
			Question:     strings.TrimSpace(it.Question),
			Gold:         strings.TrimSpace(it.SQL),
			Difficulty:   strings.TrimSpace(it.Difficulty),
			Instructions: strings.TrimSpace(it.Evidence),
		})
	}
	return ds, nil
}
