package asksafety_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// The hidden patient's name is the most common value of patients.name, so
// the catalog role (which sees every row) has it in pg_stats and in the
// value index.
const hiddenName = "Zebediah Hiddenname"

var rlsDDL = `
CREATE TABLE patients (id int PRIMARY KEY, clerk text NOT NULL, name text NOT NULL, diagnosis text NOT NULL);
INSERT INTO patients VALUES (1, 'clerk_a', 'Alice Visible', 'flu'), (2, 'clerk_a', 'Albert Visible', 'cold');
INSERT INTO patients SELECT g, 'clerk_b', '` + hiddenName + `', 'secret' FROM generate_series(3, 40) g;
ALTER TABLE patients ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON patients USING (clerk = current_user);
CREATE VIEW patient_names AS SELECT id, name FROM patients;
CREATE TABLE salaries (id int PRIMARY KEY, holder text NOT NULL, amount int NOT NULL);
INSERT INTO salaries VALUES (1, 'Quentin Payroll', 100);
GRANT SELECT ON patients, patient_names TO clerk_a, clerk_b;
GRANT SELECT ON salaries TO boss;
GRANT clerk_a TO boss;
ANALYZE;
`

// rlsFixture adds roles and a database with row-level security to f.
func (f *fixture) rlsDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range []string{"clerk_a", "clerk_b", "boss"} {
		if err := f.cluster.CreateRole(ctx, r, r+"-secret", false); err != nil {
			t.Fatal(err)
		}
	}
	db := "rls_" + randomSuffix(t)
	if err := f.cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Exec(ctx, db, rlsDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cats.Get(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func (f *fixture) connectAs(t *testing.T, addr, user, db string) (*pgx.Conn, *[]string) {
	t.Helper()
	password := user + "-secret"
	if user == pgtest.Superuser {
		password = pgtest.SuperuserPassword
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", user, password, addr, db))
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, &notices
}

// prompts returns everything the fake model was sent since the last Reset.
func (f *fixture) prompts() string {
	var b strings.Builder
	for _, r := range f.fake.Requests() {
		b.WriteString(r.System)
		for _, m := range r.Messages {
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestRowLevelSecurity: values of rows a role cannot see (read by the
// catalog role into the value index and pg_stats) reach neither the model,
// nor the NOTICE, nor ask-sql; a role that sees them gets them.
func TestRowLevelSecurity(t *testing.T) {
	f := newFixture(t)
	db := f.rlsDatabase(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["patients", "name"], "entities": ["zebedia hidenname"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM patients WHERE name = 'zebedia hidenname'")},
		fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer}, Reply: sqlReply("SELECT count(*) FROM patients WHERE name = 'zebedia hidenname'")},
	)
	ask := func(t *testing.T, user, q string) (string, string, []string) {
		t.Helper()
		f.fake.Reset()
		conn, notices := f.connectAs(t, f.proxy, user, db)
		rs, err := conn.Query(ctx, "-- ask-sql: "+q)
		if err != nil {
			t.Fatal(err)
		}
		var askSQL string
		for rs.Next() {
			askSQL = string(rs.RawValues()[0])
		}
		if rs.Close(); rs.Err() != nil {
			t.Fatal(rs.Err())
		}
		rows, err := conn.Query(ctx, "-- ask: "+q+" (run)")
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		return f.prompts(), askSQL, *notices
	}

	t.Run("secured role", func(t *testing.T) {
		prompts, askSQL, notices := ask(t, "clerk_a", "how many patients are called zebedia hidenname")
		for where, text := range map[string]string{"prompts": prompts, "ask-sql": askSQL, "notices": strings.Join(notices, "\n")} {
			if strings.Contains(text, "Hiddenname") {
				t.Errorf("a value of rows clerk_a cannot see reached the %s:\n%s", where, text)
			}
		}
		if !strings.Contains(prompts, "patients") {
			t.Fatalf("the prompt does not even show the table:\n%s", prompts)
		}
	})
	// The control: the same ask by a role that sees every row does get the
	// stored value (retrieval, examples and literal correction work), so
	// the absence above is row-level security, not a blind engine.
	t.Run("unrestricted role", func(t *testing.T) {
		prompts, askSQL, _ := ask(t, pgtest.Superuser, "how many patients are called zebedia hidenname")
		if !strings.Contains(prompts, hiddenName) || !strings.Contains(askSQL, hiddenName) {
			t.Fatalf("superuser ask lacks the stored value: ask-sql %q\nprompts:\n%s", askSQL, prompts)
		}
	})
}

// TestSetRole: what the model sees follows current_user, not the startup
// user, and translations are not shared between the two.
func TestSetRole(t *testing.T) {
	f := newFixture(t)
	db := f.rlsDatabase(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["salaries", "amount", "patients"], "entities": []}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM patients")},
	)
	conn, _ := f.connectAs(t, f.proxy, "boss", db)
	askPrompt := func(t *testing.T) string {
		t.Helper()
		f.fake.Reset()
		var n int
		// Simple protocol: a statement prepared earlier would be the client's
		// own cache of an earlier translation, executed with the current
		// role's privileges (as any prepared statement).
		if err := conn.QueryRow(ctx, "-- ask: total of the salaries and the patients", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			t.Fatal(err)
		}
		var p string
		for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
			for _, m := range r.Messages {
				if strings.Contains(m.Content, fakeollama.PromptCandidate) {
					p += m.Content
				}
			}
		}
		return p
	}
	// "holder" is a column of salaries, which only boss may read; the
	// question itself names the table, so the column is what tells.
	if p := askPrompt(t); !strings.Contains(p, "holder") {
		t.Fatalf("boss's prompt lacks the salaries table:\n%s", p)
	}
	steps := []struct {
		name  string
		setup func(t *testing.T)
	}{
		{"SET ROLE clerk_a", func(t *testing.T) {
			if _, err := conn.Exec(ctx, "SET ROLE clerk_a", pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
		}},
		{"SET SESSION AUTHORIZATION clerk_b", func(t *testing.T) {
			conn, _ = f.connectAs(t, f.proxy, pgtest.Superuser, db)
			if p := askPrompt(t); !strings.Contains(p, "holder") {
				t.Fatalf("the superuser's prompt lacks the salaries table:\n%s", p)
			}
			if _, err := conn.Exec(ctx, "SET SESSION AUTHORIZATION clerk_b", pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.setup(t)
			p := askPrompt(t)
			if p == "" {
				t.Fatal("the translation made for another role was served from the cache")
			}
			if strings.Contains(p, "holder") || strings.Contains(p, "Quentin") {
				t.Fatalf("after %s the prompt shows what only the earlier role may read:\n%s", st.name, p)
			}
		})
	}
}
