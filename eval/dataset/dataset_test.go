package dataset

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpenSQLEval(t *testing.T) {
	ds, err := OpenSQLEval(filepath.Join("..", "..", "datasets", "sql-eval"))
	if err != nil {
		t.Fatal(err)
	}
	ans, idk := 0, 0
	ids := map[string]bool{}
	for _, q := range ds.Questions {
		if q.Unanswerable {
			idk++
		} else {
			ans++
		}
		if ids[q.ID] {
			t.Errorf("duplicate ID %s", q.ID)
		}
		ids[q.ID] = true
		if q.Question == "" || q.Gold == "" || q.DB == "" {
			t.Errorf("%s incomplete: %+v", q.ID, q)
		}
	}
	if ans != 190 || idk != 105 {
		t.Errorf("%d answerable, %d unanswerable; want 190, 105", ans, idk)
	}
	if got := len(ds.DBs()); got != 7 {
		t.Errorf("%d databases", got)
	}
	ds.Filter([]string{"yelp"}, false)
	if len(ds.Questions) != 30 {
		t.Errorf("yelp: %d questions", len(ds.Questions))
	}
	q := Question{Question: "How many?", Instructions: "Count distinct ids."}
	if q.Text() != "How many?\nCount distinct ids." {
		t.Errorf("Text() = %q", q.Text())
	}
}

func TestOpenBIRD(t *testing.T) {
	dir := t.TempDir()
	js := `[{"question_id": 7, "db_id": "cards", "question": "How many cards?", "evidence": "cards refers to table cards", "SQL": "SELECT count(*) FROM cards", "difficulty": "simple"}]`
	if err := os.WriteFile(filepath.Join(dir, "dev.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := OpenBIRD(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Question{ID: "cards/7", DB: "cards", Question: "How many cards?", Gold: "SELECT count(*) FROM cards", Difficulty: "simple", Instructions: "cards refers to table cards"}
	if len(ds.Questions) != 1 || ds.Questions[0] != want {
		t.Fatalf("got %+v", ds.Questions)
	}
	if err := os.WriteFile(filepath.Join(dir, "dev.json"), []byte(`[{"db_id": "x"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBIRD(dir); err == nil {
		t.Error("an item without question and SQL was accepted")
	}
	if _, err := Open("spider", dir); err == nil {
		t.Error("unknown format accepted")
	}
}
