package askall

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/internal/ownconn"
)

// perimeterSQL reads, as the authenticator on the target database, what
// Postgres checks before it lets a role start a session there: the login
// role may log in (rolcanlogin), the database accepts connections
// (datallowconn), the role holds CONNECT on it (directly, through a role it
// inherits, or through PUBLIC), and the role's and the database's connection
// limits. The backends are counted from pg_stat_activity, whose user and
// database columns every role may read (backend_type is hidden from a
// role without pg_read_all_stats); a parallel worker caught in passing
// counts too, which errs towards keeping the asker out. Every
// name is pg_catalog-qualified and every operator pinned, so nothing in a
// search_path or pg_temp can stand in; the role name travels as a parameter
// of type name, and the limits are compared in Go.
const perimeterSQL = `SELECT r.rolcanlogin, r.rolsuper, r.rolconnlimit, d.datallowconn, d.datconnlimit,
  pg_catalog.has_database_privilege(r.oid, d.oid, 'CONNECT'),
  (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a WHERE a.usesysid OPERATOR(pg_catalog.=) r.oid),
  (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a WHERE a.datid OPERATOR(pg_catalog.=) d.oid)
FROM pg_catalog.pg_roles r, pg_catalog.pg_database d
WHERE r.rolname OPERATOR(pg_catalog.=) $1 AND d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()`

// nameOID is the type of the role-name parameter.
const nameOID = 19

// perimeter says why login could not start a session on conn's database,
// or "" when Postgres would let it. It runs on the authenticator's own
// connection before any role is taken on: never on the client's session,
// whose search_path and temp objects are the client's.
//
// login is the asking session's session_user: a direct connection is
// checked for the role that logs in, and SET ROLE afterwards needs only
// membership, which is the same on every database of a server. So a
// session that did SET ROLE to a NOLOGIN group role still reaches the
// databases its login role may connect to, and no others.
func perimeter(ctx context.Context, conn *pgconn.PgConn, login string) (reason string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The check runs as ownconn says of the proxy's own connections: a
	// READ ONLY transaction, resolution pinned, statement and lock timeouts,
	// ended before anything else runs on the connection.
	if _, err := conn.Exec(ctx, "BEGIN READ ONLY; "+ownconn.PinLocal(ownconn.Bounds{Statement: 10 * time.Second})).ReadAll(); err != nil {
		return "", fmt.Errorf("ask(all): perimeter check: %w", err)
	}
	res := conn.ExecParams(ctx, perimeterSQL, [][]byte{[]byte(login)}, []uint32{nameOID}, nil, nil).Read()
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll(); err != nil && res.Err == nil {
		res.Err = err
	}
	if res.Err != nil {
		return "", fmt.Errorf("ask(all): perimeter check: %w", res.Err)
	}
	if len(res.Rows) == 0 {
		return fmt.Sprintf("role %s does not exist there", login), nil
	}
	r := res.Rows[0]
	if len(r) != 8 {
		return "", fmt.Errorf("ask(all): perimeter check: %d columns", len(r))
	}
	b := func(i int) bool { return string(r[i]) == "t" }
	n := func(i int) (int64, error) { return strconv.ParseInt(string(r[i]), 10, 64) }
	var lim [4]int64 // rolconnlimit, datconnlimit, role backends, database backends
	for j, i := range []int{2, 4, 6, 7} {
		if lim[j], err = n(i); err != nil {
			return "", fmt.Errorf("ask(all): perimeter check: %w", err)
		}
	}
	super := b(1)
	switch {
	case !b(0):
		return fmt.Sprintf("role %s may not log in (NOLOGIN)", login), nil
	case !b(3):
		return "it does not accept connections (datallowconn is off)", nil
	case !b(5):
		return fmt.Sprintf("role %s has no CONNECT privilege on it", login), nil
	// A new session would be one more backend of the role: Postgres refuses
	// it when the role already has its limit. Superusers are exempt there too.
	case !super && lim[0] >= 0 && lim[2] >= lim[0]:
		return fmt.Sprintf("role %s is at its connection limit (%d)", login, lim[0]), nil
	// The authenticator's own session already counts against the database's
	// limit, in place of the session the asker would have opened.
	case !super && lim[1] >= 0 && lim[3] > lim[1]:
		return fmt.Sprintf("it is at its connection limit (%d)", lim[1]), nil
	}
	return "", nil
}

// Perimeter is perimeter for callers outside the package: the tests that
// check the proxy's own connections (integration/ownconn) run it against
// a database full of users' look-alike objects.
func Perimeter(ctx context.Context, conn *pgconn.PgConn, login string) (reason string, err error) {
	return perimeter(ctx, conn, login)
}
