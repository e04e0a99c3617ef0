package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// factsSQL asks the client's own session, under the pinned resolution of
// every scope, which tables have row-level security in force for it, which
// relations and types would make the server run code the guard cannot judge
// (see guard.Names.Unsafe), the user-defined types it may name, and a
// digest of everything column visibility depends on (ACLs, owners,
// memberships, role attributes), which keys the visibility cache. A type
// is unsafe when a cast to or from it (unless it is pg_catalog's and the
// other side is not: such a cast runs only on values of the other, user
// type), its input/output, or a domain check calls a function
// outside pg_catalog that no extension owns, or a volatile one; and when it
// holds an unsafe type (domain, array, range, composite, a relation's row).
// A view is unsafe when its rules call such a function, use an operator
// implemented by one, or use an unsafe type: the dependencies Postgres
// recorded, not the view's text, decide.
const factsSQL = `WITH RECURSIVE
bad_fn AS (
  SELECT p.oid FROM pg_catalog.pg_proc p
  WHERE p.provolatile = 'v'
     OR (p.pronamespace NOT IN ('pg_catalog'::pg_catalog.regnamespace, 'information_schema'::pg_catalog.regnamespace)
         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                         WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e'))
),
seed AS (
  SELECT c.castsource AS t, 'a cast from it calls ' || c.castfunc::pg_catalog.regprocedure::text AS why
  FROM pg_catalog.pg_cast c JOIN pg_catalog.pg_type s ON s.oid = c.castsource JOIN pg_catalog.pg_type d ON d.oid = c.casttarget
  WHERE c.castfunc IN (SELECT b.oid FROM bad_fn b)
    AND (s.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace OR d.typnamespace = 'pg_catalog'::pg_catalog.regnamespace)
  UNION ALL
  SELECT c.casttarget, 'a cast to it calls ' || c.castfunc::pg_catalog.regprocedure::text
  FROM pg_catalog.pg_cast c JOIN pg_catalog.pg_type s ON s.oid = c.castsource JOIN pg_catalog.pg_type d ON d.oid = c.casttarget
  WHERE c.castfunc IN (SELECT b.oid FROM bad_fn b)
    AND (d.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace OR s.typnamespace = 'pg_catalog'::pg_catalog.regnamespace)
  UNION ALL
  SELECT t.oid, 'its input or output calls ' || f.oid::pg_catalog.regprocedure::text
  FROM pg_catalog.pg_type t
  CROSS JOIN LATERAL (VALUES (t.typinput::pg_catalog.oid), (t.typoutput::pg_catalog.oid), (t.typreceive::pg_catalog.oid),
    (t.typsend::pg_catalog.oid), (t.typmodin::pg_catalog.oid), (t.typmodout::pg_catalog.oid)) AS io(fn)
  JOIN bad_fn f ON f.oid = io.fn
  UNION ALL
  SELECT con.contypid, 'its check ' || con.conname::text || ' calls ' || d.refobjid::pg_catalog.regprocedure::text
  FROM pg_catalog.pg_constraint con
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = con.oid
   AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
  WHERE con.contypid <> 0 AND d.refobjid IN (SELECT b.oid FROM bad_fn b)
  UNION ALL
  SELECT con.contypid, 'its check ' || con.conname::text || ' uses operator ' || o.oid::pg_catalog.regoperator::text
  FROM pg_catalog.pg_constraint con
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = con.oid
   AND d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
  JOIN pg_catalog.pg_operator o ON o.oid = d.refobjid
  WHERE con.contypid <> 0 AND o.oprcode IN (SELECT b.oid FROM bad_fn b)
  UNION ALL
  SELECT v.reltype, 'its definition calls ' || d.refobjid::pg_catalog.regprocedure::text
  FROM pg_catalog.pg_rewrite rw JOIN pg_catalog.pg_class v ON v.oid = rw.ev_class
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = rw.oid
   AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
  WHERE d.refobjid IN (SELECT b.oid FROM bad_fn b)
  UNION ALL
  SELECT v.reltype, 'its definition uses operator ' || o.oid::pg_catalog.regoperator::text
  FROM pg_catalog.pg_rewrite rw JOIN pg_catalog.pg_class v ON v.oid = rw.ev_class
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = rw.oid
   AND d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
  JOIN pg_catalog.pg_operator o ON o.oid = d.refobjid
  WHERE o.oprcode IN (SELECT b.oid FROM bad_fn b)
),
edge AS (
  SELECT t.oid AS child, t.typbasetype AS parent FROM pg_catalog.pg_type t WHERE t.typbasetype <> 0
  UNION ALL SELECT t.oid, t.typelem FROM pg_catalog.pg_type t WHERE t.typelem <> 0
  UNION ALL SELECT r.rngtypid, r.rngsubtype FROM pg_catalog.pg_range r
  UNION ALL SELECT r.rngmultitypid, r.rngtypid FROM pg_catalog.pg_range r
  UNION ALL SELECT c.reltype, a.atttypid FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  WHERE EXISTS (SELECT 1 FROM seed) AND a.attnum > 0 AND NOT a.attisdropped AND c.reltype <> 0
    AND (a.atttypid IN (SELECT s.t FROM seed s)
         OR a.atttypid IN (SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace))
),
taint AS (
  SELECT s.t, s.why FROM seed s
  UNION
  SELECT e.child, 'it holds ' || x.t::pg_catalog.regtype::text || ': ' || x.why FROM edge e JOIN taint x ON e.parent = x.t
)
SELECT 'unsafe', n.nspname::text, t.typname::text, pg_catalog.min(x.why)
FROM taint x JOIN pg_catalog.pg_type t ON t.oid = x.t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
GROUP BY 2, 3
UNION ALL
SELECT 'unsafe', n.nspname::text, c.relname::text, pg_catalog.min(x.why)
FROM taint x JOIN pg_catalog.pg_class c ON c.reltype = x.t JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
GROUP BY 2, 3
UNION ALL
SELECT 'unsafe', n.nspname::text, v.relname::text, 'its definition uses ' || x.t::pg_catalog.regtype::text || ': ' || pg_catalog.min(x.why)
FROM pg_catalog.pg_rewrite rw JOIN pg_catalog.pg_class v ON v.oid = rw.ev_class
JOIN pg_catalog.pg_namespace n ON n.oid = v.relnamespace
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = rw.oid
 AND d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
JOIN taint x ON x.t = d.refobjid
GROUP BY 2, 3, x.t
UNION ALL
SELECT 'acl', '', '', pg_catalog.md5(pg_catalog.concat(
  (SELECT pg_catalog.string_agg(c.oid::text || ':' || c.relowner::text || ':' || COALESCE(c.relacl::text, ''), ',' ORDER BY c.oid)
     FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')),
  (SELECT pg_catalog.string_agg(a.attrelid::text || '.' || a.attnum::text || ':' || a.attacl::text, ',' ORDER BY a.attrelid, a.attnum)
     FROM pg_catalog.pg_attribute a WHERE a.attacl IS NOT NULL),
  (SELECT pg_catalog.string_agg(s.oid::text || ':' || s.nspowner::text || ':' || COALESCE(s.nspacl::text, ''), ',' ORDER BY s.oid)
     FROM pg_catalog.pg_namespace s),
  (SELECT pg_catalog.string_agg(m.roleid::text || '>' || m.member::text || ':' || m.admin_option::text, ',' ORDER BY m.roleid, m.member)
     FROM pg_catalog.pg_auth_members m),
  (SELECT pg_catalog.string_agg(r.oid::text || ':' || r.rolsuper::text || r.rolinherit::text || r.rolbypassrls::text, ',' ORDER BY r.oid)
     FROM pg_catalog.pg_roles r)))
UNION ALL
SELECT 'rls', n.nspname::text, c.relname::text, ''
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity AND pg_catalog.row_security_active(c.oid)
UNION ALL
SELECT 'shadow', 'pg_catalog', b.typname::text, ''
FROM pg_catalog.pg_type b
WHERE b.typnamespace = 'pg_catalog'::pg_catalog.regnamespace
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_type u WHERE u.typname = b.typname AND u.typnamespace <> b.typnamespace)
UNION ALL
SELECT 'type', n.nspname::text, t.typname::text, ''
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(temp|toast)'
  AND t.typcategory <> 'A'
  AND (t.typrelid = 0 OR EXISTS (SELECT 1 FROM pg_catalog.pg_class r WHERE r.oid = t.typrelid AND r.relkind = 'c'))`

// functionsSQL lists user functions by schema, for qualifying calls of
// functions an operator allowed by an unqualified name.
const functionsSQL = `SELECT DISTINCT 'func', n.nspname::text, p.proname::text, ''
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(temp|toast)'`

// visibleColumnsSQL lists what the session's current role may SELECT. It runs
// on the asking client's session, so Postgres itself answers for that role.
const visibleColumnsSQL = `SELECT n.nspname::text, c.relname::text, a.attname::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND has_schema_privilege(n.oid, 'USAGE')
  AND has_column_privilege(c.oid, a.attnum, 'SELECT')
ORDER BY 1, 2, 3`

// internalFunctions are the built-ins the engine's own session queries
// call; they are sealed with this list rather than the database's catalog,
// which tests and tools may not have.
var internalFunctions = guard.Builtins{"min": guard.Immutable, "row_security_active": guard.Stable,
	"has_schema_privilege": guard.Stable, "has_column_privilege": guard.Stable,
	"md5": guard.Immutable, "concat": guard.Stable, "string_agg": guard.Immutable}

// sealedQueries keeps the engine's own session queries sealed once: they
// are constant, and sealing one the size of factsSQL costs milliseconds.
// They are sealed with pg_catalog resolution only (guard.SearchPath{}):
// every relation they read is pg_catalog's, and no type they name may be
// taken for a session's own type of the same name.
type sealedQueries struct {
	mu    sync.Mutex
	stmts map[string]sealed.Statement
}

func (q *sealedQueries) seal(sql string) (sealed.Statement, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st, ok := q.stmts[sql]; ok {
		return st, nil
	}
	st, err := guard.Seal(sql, guard.Options{Catalog: internalFunctions, Names: guard.SearchPath{}})
	if err != nil {
		return sealed.Statement{}, err
	}
	if q.stmts == nil {
		q.stmts = map[string]sealed.Statement{}
	}
	q.stmts[sql] = st
	return st, nil
}

// maxVisibleColumns bounds the privilege query's result.
const maxVisibleColumns = 200_000

// maxSessionRows bounds the session facts (secured tables, unsafe
// relations and types, user types and functions).
const maxSessionRows = 200_000

// session is what the asking session is at the moment of the ask.
type session struct {
	role       string
	searchPath []string
	// secured holds "schema.table" of relations whose rows the role sees
	// only through row-level security (views over them included): they give
	// the model no stored values, examples or literal corrections.
	secured map[string]bool
	// names resolves names as this session does, for the guard.
	names *sessionNames
	// privileges digests what column visibility depends on, as the
	// session sees it now.
	privileges string
}

// key is what a translation depends on besides question and schema.
func (s *session) key() string {
	sec := make([]string, 0, len(s.secured))
	for k := range s.secured {
		sec = append(sec, k)
	}
	slices.Sort(sec)
	h := sha256.Sum256([]byte(s.role + "\x00" + strings.Join(s.searchPath, "\x01") + "\x00" + strings.Join(sec, "\x01")))
	return hex.EncodeToString(h[:8])
}

// sessionNames implements guard.Names for one ask: the asker's search_path
// (temporary schemas left out: Seal never resolves to them), the catalog's
// relations, and the session facts.
type sessionNames struct {
	path      []string
	schema    *catalog.Schema
	relations map[string]map[string]bool // schema -> relation names, from the catalog
	types     map[string]map[string]bool // schema -> user type names, from the session
	functions map[string]map[string]bool // schema -> user function names
	unsafe    map[string]string          // "schema.name" -> why
	unsafeAny map[string]string          // "name" -> why, in some schema
	// builtinTypes are names pg_catalog has a type of that a user type or
	// relation has too.
	builtinTypes map[string]bool
}

func newSessionNames(path []string, schema *catalog.Schema) *sessionNames {
	n := &sessionNames{schema: schema, relations: map[string]map[string]bool{}, types: map[string]map[string]bool{},
		functions: map[string]map[string]bool{}, unsafe: map[string]string{}, unsafeAny: map[string]string{},
		builtinTypes: map[string]bool{}}
	for _, p := range path {
		if !strings.HasPrefix(p, "pg_temp") && !strings.HasPrefix(p, "pg_toast_temp") {
			n.path = append(n.path, p)
		}
	}
	if schema != nil {
		for _, t := range schema.Tables {
			add(n.relations, t.Schema, t.Name)
		}
	}
	return n
}

func add(m map[string]map[string]bool, schema, name string) {
	if m[schema] == nil {
		m[schema] = map[string]bool{}
	}
	m[schema][name] = true
}

func (n *sessionNames) find(m map[string]map[string]bool, name string) string {
	for _, s := range n.path {
		if m[s][name] {
			return s
		}
	}
	return ""
}

// Relation implements guard.Names. A name the catalog does not know (a
// table made since its last refresh) is taken to be in the first schema of
// the path; pg_* names are pg_catalog's.
func (n *sessionNames) Relation(name string) string {
	if s := n.find(n.relations, name); s != "" {
		return s
	}
	if strings.HasPrefix(name, "pg_") {
		return "pg_catalog"
	}
	for _, s := range n.path {
		if s != "pg_catalog" {
			return s
		}
	}
	return ""
}

// Type implements guard.Names: a user type, or a relation's row type, found
// as Postgres finds types: pg_catalog first unless the path names it later.
func (n *sessionNames) Type(name string) string {
	path := n.path
	if !slices.Contains(path, "pg_catalog") {
		path = append([]string{"pg_catalog"}, path...)
	}
	for _, s := range path {
		switch {
		case s == "pg_catalog":
			if n.builtinTypes[name] {
				return ""
			}
		case n.types[s][name] || n.relations[s][name]:
			return s
		}
	}
	return ""
}

// Function implements guard.Names.
func (n *sessionNames) Function(name string) string { return n.find(n.functions, name) }

// Unsafe implements guard.Names; schema "" asks about any schema.
func (n *sessionNames) Unsafe(schema, name string) string {
	if schema == "" {
		return n.unsafeAny[name]
	}
	return n.unsafe[schema+"."+name]
}

// inspectSession reads the session's role and search_path (the one probe
// that runs unpinned), then its row security and what guard.Names needs,
// through the asking session itself.
func (e *Engine) inspectSession(ctx context.Context, a *ask) error {
	st := a.trace.begin("session")
	defer a.trace.end(st)
	s, err := e.probeSession(ctx, a.req.Exec, a.snap.Schema)
	if err != nil {
		return err
	}
	// Views over secured tables are secured too: the catalog cannot tell
	// what the role sees through them.
	if a.snap.Functions != nil && len(s.secured) > 0 {
		for _, k := range a.snap.Functions.RowSecurity {
			if t := a.snap.Schema.Table(k); t != nil && t.Kind != catalog.KindTable {
				s.secured[k] = true
			}
		}
	}
	a.sess = s
	st.Note = fmt.Sprintf("role %s, %d secured, %d unsafe names", s.role, len(s.secured), len(s.names.unsafe))
	return nil
}

// probeSession asks the session who it is, what its search_path resolves
// to, and the facts in factsSQL.
func (e *Engine) probeSession(ctx context.Context, exec sealed.Executor, schema *catalog.Schema) (*session, error) {
	rows, err := exec.Trial(ctx, guard.SessionProbe(), pg.Limits{Timeout: e.TrialTimeout, MaxRows: 1, MaxBytes: 1 << 20})
	if err != nil {
		return nil, inspectError(ctx, err)
	}
	if len(rows.Values) != 1 || len(rows.Values[0]) != 2 || rows.Values[0][0] == nil || *rows.Values[0][0] == "" {
		return nil, fmt.Errorf("engine: the session did not say its role")
	}
	s := &session{role: *rows.Values[0][0], secured: map[string]bool{}}
	if p := rows.Values[0][1]; p != nil {
		if err := json.Unmarshal([]byte(*p), &s.searchPath); err != nil {
			return nil, fmt.Errorf("engine: the session's search_path: %w", err)
		}
	}
	s.names = newSessionNames(s.searchPath, schema)
	sql := factsSQL
	if len(e.Guard.AllowFunctions) > 0 {
		sql += "\nUNION ALL\n" + functionsSQL
	}
	stmt, err := e.internal.seal(sql)
	if err != nil {
		return nil, fmt.Errorf("engine: session query refused: %w", err)
	}
	facts, err := exec.Trial(ctx, stmt, pg.Limits{Timeout: e.TrialTimeout, MaxRows: maxSessionRows, MaxBytes: maxInternalBytes})
	if err != nil {
		return nil, inspectError(ctx, err)
	}
	if facts.Truncated {
		return nil, fmt.Errorf("engine: the session's facts exceed %d rows", maxSessionRows)
	}
	for _, r := range facts.Values {
		if len(r) != 4 || r[0] == nil || r[1] == nil || r[2] == nil {
			continue
		}
		schema, name := *r[1], *r[2]
		switch *r[0] {
		case "rls":
			s.secured[schema+"."+name] = true
		case "acl":
			if r[3] != nil {
				s.privileges = *r[3]
			}
		case "type":
			add(s.names.types, schema, name)
		case "shadow":
			s.names.builtinTypes[name] = true
		case "func":
			add(s.names.functions, schema, name)
		case "unsafe":
			why := "unsafe"
			if r[3] != nil {
				why = *r[3]
			}
			s.names.unsafe[schema+"."+name] = why
			s.names.unsafeAny[name] = why
		}
	}
	return s, nil
}

// inspectError wraps a failed session probe; when the ask's own time ran
// out or it was cancelled meanwhile, that is what it reports.
func inspectError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("engine: inspect the asking session: %w", cerr)
	}
	return fmt.Errorf("engine: inspect the asking session: %w", err)
}

// SessionNames reads, through exec (the asking client's session), how that
// session resolves names, for sealing SQL outside Translate (optimize:).
func (e *Engine) SessionNames(ctx context.Context, database string, exec sealed.Executor) (guard.Names, error) {
	e.once.Do(e.applyDefaults)
	snap, err := e.Catalogs.Get(ctx, database)
	if err != nil {
		return nil, fmt.Errorf("engine: catalog of %s: %w", database, err)
	}
	s, err := e.probeSession(ctx, exec, snap.Schema)
	if err != nil {
		return nil, err
	}
	return s.names, nil
}

// visibility caches, per database, role, schema fingerprint and privilege
// digest (read from the session on every ask), the part of the catalog
// schema the role may read: the model is shown only that.
type visibility struct {
	mu      sync.Mutex
	schemas map[visibilityKey]*catalog.Schema
}

type visibilityKey struct{ database, role, fingerprint, privileges string }

const maxVisibilityEntries = 256

func (v *visibility) get(k visibilityKey) *catalog.Schema {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.schemas[k]
}

func (v *visibility) put(k visibilityKey, s *catalog.Schema) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.schemas == nil || len(v.schemas) >= maxVisibilityEntries {
		v.schemas = map[visibilityKey]*catalog.Schema{} // cheap to recompute
	}
	v.schemas[k] = s
}

// restrictToRole replaces the snapshot's schema, for this ask, with the part
// the asking role may SELECT, without stored examples of secured tables.
// The session's privilege digest, read on this ask, keys the cache: a
// GRANT, REVOKE, ownership or membership change misses it, and the columns
// are asked of the session again.
func (e *Engine) restrictToRole(ctx context.Context, a *ask) error {
	st := a.trace.begin("privileges")
	defer a.trace.end(st)
	full := a.snap.Schema
	k := visibilityKey{a.req.Database, a.sess.role, full.Fingerprint, a.sess.privileges}
	s := e.visible.get(k)
	if s == nil || a.sess.privileges == "" {
		rows, err := e.internalQuery(ctx, a, visibleColumnsSQL, maxVisibleColumns)
		if err != nil {
			return fmt.Errorf("engine: privileges of %s: %w", a.sess.role, err)
		}
		type col struct{ s, t, c string }
		ok := make(map[col]bool, len(rows.Values))
		for _, r := range rows.Values {
			if len(r) == 3 && r[0] != nil && r[1] != nil && r[2] != nil {
				ok[col{*r[0], *r[1], *r[2]}] = true
			}
		}
		s = full.Filter(func(t *catalog.Table, c *catalog.Column) bool { return ok[col{t.Schema, t.Name, c.Name}] })
		if a.sess.privileges != "" {
			e.visible.put(k, s)
		}
		st.Note = fmt.Sprintf("%d of %d tables readable", len(s.Tables), len(full.Tables))
	} else {
		st.Note = "unchanged privileges"
	}
	a.schema0 = withoutSecuredExamples(s, a.sess.secured)
	return nil
}

// withoutSecuredExamples returns s with the stored examples (pg_stats most
// common values, read by the catalog role) of secured tables removed. s is
// shared, so changed tables are copied.
func withoutSecuredExamples(s *catalog.Schema, secured map[string]bool) *catalog.Schema {
	if len(secured) == 0 {
		return s
	}
	out := *s
	out.Tables = slices.Clone(s.Tables)
	for i := range out.Tables {
		t := &out.Tables[i]
		if !secured[t.Schema+"."+t.Name] {
			continue
		}
		t.Columns = slices.Clone(t.Columns)
		for j := range t.Columns {
			if c := &t.Columns[j]; c.Stats != nil && len(c.Stats.Examples) > 0 {
				st := *c.Stats
				st.Examples = nil
				c.Stats = &st
			}
		}
	}
	return &out
}

// visibleValues drops value matches in tables or columns the role cannot
// read, and in tables whose rows it sees only through row-level security.
func visibleValues(s *catalog.Schema, secured map[string]bool, ms []valueindex.Match) []valueindex.Match {
	out := ms[:0:0]
	for _, m := range ms {
		if secured[m.Schema+"."+m.Table] {
			continue
		}
		if t := s.Table(m.Schema + "." + m.Table); t != nil && t.Column(m.Column) != nil {
			out = append(out, m)
		}
	}
	return out
}

// visibleDescriptions drops comments of tables or columns the role cannot
// read, and glossary entries over a table it cannot read; glossary entries
// without a table stay.
func visibleDescriptions(s *catalog.Schema, hits []descindex.Hit) []descindex.Hit {
	out := hits[:0:0]
	for _, h := range hits {
		if h.Table != "" {
			t := s.Table(h.Table)
			if h.Schema != "" {
				t = s.Table(h.Schema + "." + h.Table)
			}
			if t == nil || (h.Column != "" && t.Column(h.Column) == nil) {
				continue
			}
		}
		// A term over a join is shown only to a role that may read every
		// table it reads.
		if slices.ContainsFunc(h.Also, func(name string) bool { return s.Table(name) == nil }) {
			continue
		}
		out = append(out, h)
	}
	return out
}
