package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// visibleColumnsSQL lists what the session's current role may SELECT. It runs
// on the asking client's session, so Postgres itself answers for that role.
const visibleColumnsSQL = `SELECT n.nspname::text, c.relname::text, a.attname::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND has_schema_privilege(n.oid, 'USAGE')
  AND has_column_privilege(c.oid, a.attnum, 'SELECT')`

// maxVisibleColumns bounds the privilege query's result.
const maxVisibleColumns = 200_000

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
// the asking role may SELECT, and drops value matches outside it later.
func (e *Engine) restrictToRole(ctx context.Context, a *ask) error {
	st := a.trace.begin("privileges")
	defer a.trace.end(st)
	full := a.snap.Schema
	k := visibilityKey{a.req.Database, a.req.Role, full.Fingerprint}
	if s := e.visible.get(k); s != nil {
		a.schema0 = s
		st.Note = "cached"
		return nil
	}
	rows, err := trialRun(ctx, a.req.Exec, a.req.TxStatus, visibleColumnsSQL, e.TrialTimeout, maxVisibleColumns)
	if err != nil {
		return fmt.Errorf("engine: privileges of %s: %w", a.req.Role, err)
	}
	type col struct{ s, t, c string }
	ok := make(map[col]bool, len(rows.Values))
	for _, r := range rows.Values {
		if len(r) == 3 && r[0] != nil && r[1] != nil && r[2] != nil {
			ok[col{*r[0], *r[1], *r[2]}] = true
		}
	}
	s := full.Filter(func(t *catalog.Table, c *catalog.Column) bool { return ok[col{t.Schema, t.Name, c.Name}] })
	e.visible.put(k, s)
	a.schema0 = s
	st.Note = fmt.Sprintf("%d of %d tables readable", len(s.Tables), len(full.Tables))
	return nil
}

// visibleValues drops value matches in tables or columns the role cannot read.
func visibleValues(s *catalog.Schema, ms []valueindex.Match) []valueindex.Match {
	out := ms[:0:0]
	for _, m := range ms {
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
