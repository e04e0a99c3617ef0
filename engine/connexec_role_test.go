package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestConnExecutorAsRole: on an authenticator's connection, a run takes on
// the asking role (privileges, row-level security, current_user), cannot
// write, and leaves the authenticator idle and itself again; a role it is
// not a member of, or one that does not exist, fails with Postgres's error.
func TestConnExecutorAsRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{})
	auth := pgtest.UniqueName(t, "auth")
	alice := pgtest.UniqueName(t, "alice")
	bob := pgtest.UniqueName(t, "bob")
	stranger := pgtest.UniqueName(t, "stranger")
	carol := pgtest.UniqueName(t, "carol")
	askers := pgtest.UniqueName(t, "askers")
	setup := `
CREATE ROLE ` + auth + ` LOGIN NOINHERIT PASSWORD 'auth-pw';
CREATE ROLE ` + alice + `; CREATE ROLE ` + bob + `; CREATE ROLE ` + stranger + `;
GRANT ` + alice + ` TO ` + auth + `; GRANT ` + bob + ` TO ` + auth + `;
CREATE ROLE ` + carol + `; CREATE ROLE ` + askers + `;
GRANT ` + carol + ` TO ` + askers + `; GRANT ` + askers + ` TO ` + auth + `;
CREATE TABLE notes (owner text, body text);
INSERT INTO notes VALUES ('` + alice + `', 'a1'), ('` + alice + `', 'a2'), ('` + bob + `', 'b1');
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON notes USING (owner = current_user);
GRANT SELECT, INSERT ON notes TO ` + alice + `;
CREATE TABLE secret (x int); INSERT INTO secret VALUES (1);
GRANT SELECT ON secret TO ` + auth + `;`
	if err := cluster.Exec(ctx, "postgres", setup); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(cluster.URL(auth, "auth-pw", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seal := func(sql string) sealed.Statement {
		t.Helper()
		st, err := guard.Seal(sql, guard.Options{Names: guard.SearchPath{"public"}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	lim := pg.Limits{Timeout: 5 * time.Second, MaxRows: 100, MaxBytes: 1 << 20}
	tests := []struct {
		name, role, sql string
		want            string // rows joined, when no error
		wantCode        string
		wantErr         error
	}{
		{name: "current_user is the asker", role: alice, sql: "SELECT current_user::text", want: alice},
		{name: "row-level security of the asker", role: alice, sql: "SELECT body FROM notes ORDER BY body", want: "a1,a2"},
		{name: "no grant, no rows", role: bob, sql: "SELECT body FROM notes", wantCode: "42501"},
		{name: "authenticator's own grant does not apply", role: alice, sql: "SELECT x FROM secret", wantCode: "42501"},
		{name: "member through an intermediate role", role: carol, sql: "SELECT current_user::text", want: carol},
		{name: "not a member", role: stranger, sql: "SELECT 1", wantCode: "42501"},
		{name: "no such role", role: stranger + "_missing", sql: "SELECT 1", wantCode: "22023"},
		{name: "reset to the authenticator refused", role: "NONE", sql: "SELECT 1", wantErr: sealed.ErrBadRole},
	}
	// The scope itself is read-only even for a role that may write.
	t.Run("scope is read-only", func(t *testing.T) {
		scope, err := sealed.TrialScopeAs(sealed.Statement{}, pg.TxIdle, time.Second, alice)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scope.Enter {
			if _, err := conn.Exec(ctx, s).ReadAll(); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		_, werr := conn.Exec(ctx, "INSERT INTO public.notes VALUES ('"+alice+"', 'x')").ReadAll()
		for _, s := range scope.Exit {
			if _, err := conn.Exec(ctx, s).ReadAll(); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var pe *pgconn.PgError
		if !errors.As(werr, &pe) || pe.Code != "25006" {
			t.Fatalf("insert in the scope: %v, want 25006", werr)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := ConnExecutor{Conn: conn, Role: tt.role}.Trial(ctx, seal(tt.sql), lim)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
			case tt.wantCode != "":
				var se *pg.Error
				if !errors.As(err, &se) || se.Code != tt.wantCode {
					t.Fatalf("err %v, want SQLSTATE %s", err, tt.wantCode)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, r := range rows.Values {
					got = append(got, *r[0])
				}
				if s := strings.Join(got, ","); s != tt.want {
					t.Fatalf("rows %q, want %q", s, tt.want)
				}
			}
			if s := conn.TxStatus(); s != 'I' {
				t.Fatalf("authenticator left in state %c", s)
			}
			res, err := conn.Exec(ctx, "SELECT current_user::text").ReadAll()
			if err != nil || string(res[0].Rows[0][0]) != auth {
				t.Fatalf("authenticator is not itself again: %v %v", res, err)
			}
		})
	}
}
