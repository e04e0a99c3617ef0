package guard

import (
	"github.com/nlproxy/nlproxy/guard/internal/stmt"

	"github.com/nlproxy/nlproxy/guard/sealed"
)

// sessionProbeSQL reads who is asking and the schemas the session's
// search_path resolves to. It runs unpinned (the path is what it reads), so
// it names nothing the session can stand in for: one qualified built-in
// function of the session's state and a keyword, no operator, cast,
// relation or type name.
const sessionProbeSQL = "SELECT CURRENT_USER AS role, pg_catalog.array_to_json(pg_catalog.current_schemas(false)) AS path"

// SessionProbe is the one statement that runs without pinned resolution:
// it returns one row (role, search_path as a JSON array of schema names).
// Everything else the proxy or the engine runs on a client's session is
// sealed and runs pinned.
func SessionProbe() sealed.Statement {
	st, err := Seal(sessionProbeSQL, Options{Catalog: Builtins{"array_to_json": Stable, "current_schemas": Stable}})
	if err != nil {
		panic("guard: the session probe does not seal: " + err.Error())
	}
	return sealed.Of(stmt.AsProbe(st.Body()))
}
