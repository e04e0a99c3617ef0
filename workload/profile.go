package workload

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Limits bound what a Profile keeps.
type Limits struct {
	// MaxQueries is the most fingerprints kept per database; beyond it the
	// least recently seen is evicted. 0 means DefaultMaxQueries.
	MaxQueries int
	// MaxAge drops fingerprints not seen for longer. 0 means DefaultMaxAge;
	// negative keeps them however old.
	MaxAge time.Duration
}

// Defaults for Limits.
const (
	DefaultMaxQueries = 2000
	DefaultMaxAge     = 30 * 24 * time.Hour
	// MaxRoles is the most roles a query remembers; later ones are not added.
	MaxRoles = 32
	// MaxSessions is the most sessions a query remembers.
	MaxSessions = 64
)

func (l Limits) maxQueries() int {
	if l.MaxQueries > 0 {
		return l.MaxQueries
	}
	return DefaultMaxQueries
}

func (l Limits) maxAge() time.Duration {
	if l.MaxAge == 0 {
		return DefaultMaxAge
	}
	return l.MaxAge
}

// Query is one fingerprint as the workload ran it.
type Query struct {
	Shape
	// Count is how many times it was learnt (after sampling).
	Count     int64
	FirstSeen time.Time
	LastSeen  time.Time
	// Roles are the roles that ran it, sorted, at most MaxRoles.
	Roles []string
	// Sessions are digests of the relayed sessions that ran it, sorted, at
	// most MaxSessions (pg_stat_statements names no session).
	Sessions []string `json:",omitempty"`
}

// Origin is who ran a statement: the role, and the relayed session ("" when
// unknown, as for pg_stat_statements).
type Origin struct{ Role, Session string }

// Weight is how a query, join or column is ranked against others: by how
// many distinct roles taught it, then distinct sessions, and only then by
// how many times it ran. One role running a statement a thousand times in
// a thousand sessions weighs less than two roles running it once each, so
// no single role outranks what several use.
type Weight struct {
	Roles, Sessions int
	Count           int64
}

// Compare orders weights, heavier first when used in a descending sort:
// it is negative when w weighs less than v.
func (w Weight) Compare(v Weight) int {
	return cmp.Or(cmp.Compare(w.Roles, v.Roles), cmp.Compare(w.Sessions, v.Sessions), cmp.Compare(w.Count, v.Count))
}

// Weight is the query's weight.
func (q Query) Weight() Weight {
	return Weight{Roles: len(q.Roles), Sessions: len(q.Sessions), Count: q.Count}
}

// JoinUse is a join predicate with how much the workload uses it.
type JoinUse struct {
	Join
	// Count sums the Counts of the queries holding the join; Queries is how
	// many fingerprints hold it; Roles and Sessions how many distinct roles
	// and sessions ran one of them.
	Count           int64
	Queries         int
	Roles, Sessions int
}

// Weight is the join's weight (see Weight).
func (j JoinUse) Weight() Weight { return Weight{Roles: j.Roles, Sessions: j.Sessions, Count: j.Count} }

// ColumnUse is a column with how often the workload filters, groups and
// orders by it (sums of the Counts of the queries that do), and how many
// distinct roles and sessions did.
type ColumnUse struct {
	Col
	Filtered, Grouped, Ordered int64
	Roles, Sessions            int
}

// Total is the column's use of all three kinds.
func (c ColumnUse) Total() int64 { return c.Filtered + c.Grouped + c.Ordered }

// Profile is one database's learnt workload. Safe for concurrent use.
type Profile struct {
	database string
	limits   Limits

	mu      sync.Mutex
	queries map[string]*Query
	version uint64 // +1 per change
	// derived views, rebuilt when version moves on
	viewAt  uint64
	joins   []JoinUse
	columns []ColumnUse
}

// NewProfile is an empty profile for database.
func NewProfile(database string, l Limits) *Profile {
	return &Profile{database: database, limits: l, queries: map[string]*Query{}, viewAt: ^uint64(0)}
}

// Database is the database the profile is for.
func (p *Profile) Database() string { return p.database }

// Add learns one run of s by role at time at, then applies the bounds.
func (p *Profile) Add(s Shape, role string, at time.Time) { p.AddRuns(s, role, at, 1) }

// AddRuns learns n runs of s at once (pg_stat_statements' calls).
func (p *Profile) AddRuns(s Shape, role string, at time.Time, n int64) {
	p.AddFrom(s, Origin{Role: role}, at, n)
}

// AddFrom learns n runs of s by o.
func (p *Profile) AddFrom(s Shape, o Origin, at time.Time, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queries[s.Fingerprint]
	if q == nil {
		q = &Query{Shape: s, FirstSeen: at.UTC()}
		p.queries[s.Fingerprint] = q
	}
	p.seenLocked(q, o, at, n)
}

// Seen learns one more run of a fingerprint already held, as Add would,
// and reports whether it was held: the worker then skips analysing a
// statement whose shape it knows.
func (p *Profile) Seen(fingerprint, role string, at time.Time) bool {
	return p.SeenRuns(fingerprint, role, at, 1)
}

// SeenRuns is Seen for n runs.
func (p *Profile) SeenRuns(fingerprint, role string, at time.Time, n int64) bool {
	return p.SeenFrom(fingerprint, Origin{Role: role}, at, n)
}

// SeenFrom is Seen for n runs by o.
func (p *Profile) SeenFrom(fingerprint string, o Origin, at time.Time, n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queries[fingerprint]
	if q == nil {
		return false
	}
	p.seenLocked(q, o, at, n)
	return true
}

func (p *Profile) seenLocked(q *Query, o Origin, at time.Time, n int64) {
	role := o.Role
	at = at.UTC()
	q.Count += n
	if at.After(q.LastSeen) {
		q.LastSeen = at
	}
	if role != "" {
		if i, found := slices.BinarySearch(q.Roles, role); !found && len(q.Roles) < MaxRoles {
			q.Roles = slices.Insert(q.Roles, i, role)
		}
	}
	if o.Session != "" {
		if i, found := slices.BinarySearch(q.Sessions, o.Session); !found && len(q.Sessions) < MaxSessions {
			q.Sessions = slices.Insert(q.Sessions, i, o.Session)
		}
	}
	p.version++
	p.pruneLocked(at)
}

// put stores q as read from a file.
func (p *Profile) put(q Query) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := q
	p.queries[q.Fingerprint] = &c
	p.version++
}

// Prune drops what is over the bounds at time now; it returns how many
// fingerprints went.
func (p *Profile) Prune(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pruneLocked(now)
}

func (p *Profile) pruneLocked(now time.Time) int {
	n := 0
	if age := p.limits.maxAge(); age > 0 {
		for fp, q := range p.queries {
			if now.Sub(q.LastSeen) > age {
				delete(p.queries, fp)
				n++
			}
		}
	}
	for len(p.queries) > p.limits.maxQueries() {
		var oldest *Query
		for _, q := range p.queries {
			if oldest == nil || q.LastSeen.Before(oldest.LastSeen) ||
				q.LastSeen.Equal(oldest.LastSeen) && q.Fingerprint < oldest.Fingerprint {
				oldest = q
			}
		}
		delete(p.queries, oldest.Fingerprint)
		n++
	}
	if n > 0 {
		p.version++
	}
	return n
}

// Forget drops one fingerprint; it reports whether it was there.
func (p *Profile) Forget(fingerprint string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.queries[fingerprint]; !ok {
		return false
	}
	delete(p.queries, fingerprint)
	p.version++
	return true
}

// Clear drops everything.
func (p *Profile) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.queries)
	p.version++
}

// Len is how many fingerprints the profile holds.
func (p *Profile) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queries)
}

// Version moves on with every change; equal versions mean equal contents.
func (p *Profile) Version() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// Query is one fingerprint's entry.
func (p *Profile) Query(fingerprint string) (Query, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.queries[fingerprint]
	if !ok {
		return Query{}, false
	}
	return copyQuery(q), true
}

func copyQuery(q *Query) Query {
	c := *q
	c.Roles = slices.Clone(q.Roles)
	c.Sessions = slices.Clone(q.Sessions)
	return c
}

// Queries lists the fingerprints, heaviest first (Weight: distinct roles,
// then sessions, then runs; then most recent, then by fingerprint). Shapes
// are shared and must not be modified.
func (p *Profile) Queries() []Query {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Query, 0, len(p.queries))
	for _, q := range p.queries {
		out = append(out, copyQuery(q))
	}
	slices.SortFunc(out, func(a, b Query) int {
		return cmp.Or(b.Weight().Compare(a.Weight()), b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	return out
}

// Joins lists the join predicates of the held queries, heaviest first
// (Weight, then Queries, then canonical order).
func (p *Profile) Joins() []JoinUse {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.viewLocked()
	return slices.Clone(p.joins)
}

// Columns lists the columns the held queries filter, group or order by,
// most used first (distinct roles, then sessions, then Total, then
// canonical order).
func (p *Profile) Columns() []ColumnUse {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.viewLocked()
	return slices.Clone(p.columns)
}

// viewLocked rebuilds the aggregate views after a change: they are derived
// from the held queries, so eviction and Forget take their share away.
func (p *Profile) viewLocked() {
	if p.viewAt == p.version {
		return
	}
	// Distinct roles and sessions are unions over the queries: a role
	// that runs a join in ten statements is still one role.
	type who struct{ roles, sessions map[string]bool }
	union := func(w *who, q *Query) {
		if w.roles == nil {
			w.roles, w.sessions = map[string]bool{}, map[string]bool{}
		}
		for _, r := range q.Roles {
			w.roles[r] = true
		}
		for _, s := range q.Sessions {
			w.sessions[s] = true
		}
	}
	joins := map[Join]*JoinUse{}
	joinWho := map[Join]*who{}
	columns := map[Col]*ColumnUse{}
	colWho := map[Col]*who{}
	colUse := func(c Col, q *Query) *ColumnUse {
		u := columns[c]
		if u == nil {
			u = &ColumnUse{Col: c}
			columns[c] = u
			colWho[c] = &who{}
		}
		union(colWho[c], q)
		return u
	}
	for _, q := range p.queries {
		for _, j := range q.Joins {
			u := joins[j]
			if u == nil {
				u = &JoinUse{Join: j}
				joins[j] = u
				joinWho[j] = &who{}
			}
			union(joinWho[j], q)
			u.Count += q.Count
			u.Queries++
		}
		for _, c := range q.Filtered {
			colUse(c, q).Filtered += q.Count
		}
		for _, c := range q.Grouped {
			colUse(c, q).Grouped += q.Count
		}
		for _, c := range q.Ordered {
			colUse(c, q).Ordered += q.Count
		}
	}
	p.joins = p.joins[:0]
	for j, u := range joins {
		u.Roles, u.Sessions = len(joinWho[j].roles), len(joinWho[j].sessions)
		p.joins = append(p.joins, *u)
	}
	slices.SortFunc(p.joins, func(a, b JoinUse) int {
		return cmp.Or(b.Weight().Compare(a.Weight()), cmp.Compare(b.Queries, a.Queries), cmpJoin(a.Join, b.Join))
	})
	p.columns = p.columns[:0]
	for c, u := range columns {
		u.Roles, u.Sessions = len(colWho[c].roles), len(colWho[c].sessions)
		p.columns = append(p.columns, *u)
	}
	slices.SortFunc(p.columns, func(a, b ColumnUse) int {
		return cmp.Or(cmp.Compare(b.Roles, a.Roles), cmp.Compare(b.Sessions, a.Sessions), cmp.Compare(b.Total(), a.Total()), cmpCol(a.Col, b.Col))
	})
	p.viewAt = p.version
}
