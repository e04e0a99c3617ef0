package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// sessionSQL asks the client's own session who is asking now (current_user
// follows SET ROLE and SET SESSION AUTHORIZATION), what its search_path
// resolves to, and which tables have row-level security in force for it.
const sessionSQL = `SELECT 'user', current_user::text, '', 0
UNION ALL
SELECT 'path', s.name::text, '', s.n::int FROM unnest(current_schemas(false)) WITH ORDINALITY AS s(name, n)
UNION ALL
SELECT 'rls', n.nspname::text, c.relname::text, 0
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity AND row_security_active(c.oid)`

// visibleColumnsSQL lists what the session's current role may SELECT. It runs
// on the asking client's session, so Postgres itself answers for that role.
const visibleColumnsSQL = `SELECT n.nspname::text, c.relname::text, a.attname::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND has_schema_privilege(n.oid, 'USAGE')
  AND has_column_privilege(c.oid, a.attnum, 'SELECT')`

// maxVisibleColumns bounds the privilege query's result.
const maxVisibleColumns = 200_000

// maxSessionRows bounds the session query's result (path entries and
// secured tables).
const maxSessionRows = 10_000

// session is what the asking session is at the moment of the ask.
type session struct {
	role       string
	searchPath []string
	// secured holds "schema.table" of relations whose rows the role sees
	// only through row-level security (views over them included): they give
	// the model no stored values, examples or literal corrections.
	secured map[string]bool
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

// inspectSession reads the session's role, search_path and row security
// through the asking session itself.
func (e *Engine) inspectSession(ctx context.Context, a *ask) error {
	st := a.trace.begin("session")
	defer a.trace.end(st)
	rows, err := e.internalQuery(ctx, a, sessionSQL, maxSessionRows)
	if err != nil {
		return fmt.Errorf("engine: inspect the asking session: %w", err)
	}
	s := &session{secured: map[string]bool{}}
	type pathEntry struct {
		name string
		n    int
	}
	var path []pathEntry
	for _, r := range rows.Values {
		if len(r) != 4 || r[0] == nil || r[1] == nil {
			continue
		}
		switch *r[0] {
		case "user":
			s.role = *r[1]
		case "path":
			n := 0
			if r[3] != nil {
				n, _ = strconv.Atoi(*r[3])
			}
			path = append(path, pathEntry{*r[1], n})
		case "rls":
			if r[2] != nil {
				s.secured[*r[1]+"."+*r[2]] = true
			}
		}
	}
	if s.role == "" {
		return fmt.Errorf("engine: the session did not say its role")
	}
	slices.SortStableFunc(path, func(x, y pathEntry) int { return x.n - y.n })
	for _, p := range path {
		s.searchPath = append(s.searchPath, p.name)
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
	st.Note = fmt.Sprintf("role %s, %d secured", s.role, len(s.secured))
	return nil
}

// visibility caches, per database, role and schema fingerprint, the part of
// the catalog schema the role may read: the model is shown only that.
type visibility struct {
	mu      sync.Mutex
	schemas map[visibilityKey]*catalog.Schema
}

type visibilityKey struct{ database, role, fingerprint string }

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
		v.schemas = map[visibilityKey]*catalog.Schema{} // cheap to recompute: one query
	}
	v.schemas[k] = s
}

// restrictToRole replaces the snapshot's schema, for this ask, with the part
// the asking role may SELECT, without stored examples of secured tables.
func (e *Engine) restrictToRole(ctx context.Context, a *ask) error {
	st := a.trace.begin("privileges")
	defer a.trace.end(st)
	full := a.snap.Schema
	k := visibilityKey{a.req.Database, a.sess.role, full.Fingerprint}
	s := e.visible.get(k)
	if s == nil {
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
		e.visible.put(k, s)
		st.Note = fmt.Sprintf("%d of %d tables readable", len(s.Tables), len(full.Tables))
	} else {
		st.Note = "cached"
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
// read; glossary entries without a table stay.
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
		out = append(out, h)
	}
	return out
}
