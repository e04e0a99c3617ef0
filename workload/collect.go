package workload

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/metrics"
)

// CollectorOptions configure a Collector.
type CollectorOptions struct {
	// QueueSize bounds the statements waiting for the worker; when full,
	// Observe drops. Default 1024.
	QueueSize int
	// Sample is the share of statements captured, in (0, 1]; 0 means 1.
	Sample float64
	// Recent bounds the table of recently seen statement texts (see
	// recent.go): a statement whose text is held, literals and comments
	// aside, is counted there instead of queued and fingerprinted again.
	// 0 means DefaultRecent; negative: no table, every statement queued.
	Recent int
	// Deny, when set, is matched against each statement's raw text (its
	// literals included); a match is never learnt from.
	Deny *regexp.Regexp
	// Roles, when not empty, are the only roles whose statements teach
	// (--workload-roles): the application's, say, and not every user who
	// can run a query. Statements of other roles count as denied.
	Roles []string
	// SaveEvery is how often the worker saves the store and applies the age
	// bound. Default one minute.
	SaveEvery time.Duration
	// DrainEvery is how often the worker empties the queue. It wakes on a
	// clock rather than per statement, so that capture costs the relay no
	// wake-up of another goroutine (a context switch per statement when
	// the worker is idle). The queue must hold what arrives in between.
	// Default 50ms.
	DrainEvery time.Duration
	// Stats, when set, is a second source: pg_stat_statements read every
	// StatsEvery (default one minute) for each database with a profile.
	Stats      StatsSource
	StatsEvery time.Duration
	Logger     *zap.Logger
}

// Stats are a Collector's running totals.
type Stats struct {
	// Captured: statements taken, queued or counted as Repeats (of a
	// text held in the recently seen table, literals and comments aside;
	// the worker credits them to the fingerprint the first one resolved
	// to). Dropped: statements not queued because the queue was full (the
	// relay never waits), or repeats whose fingerprint left the profile
	// before they were credited.
	Captured, Repeats, Dropped uint64
	// Denied: matched the deny pattern, or ran as a role that does not
	// teach. Unparsable: pg_query could not
	// parse them. Skipped: not a SELECT, or a literal survived
	// normalisation. Learnt: added to a profile.
	Denied, Unparsable, Skipped, Learnt uint64
	// StatReads: reads of pg_stat_statements that succeeded; StatFailures:
	// those that did not (extension missing, not readable).
	StatReads, StatFailures uint64
	// Stored: fingerprints held now, over all databases.
	Stored int
}

type observed struct {
	database, role, sql string
	session             string // digest of the relayed session; "" from pg_stat_statements
	at                  time.Time
	runs                int64 // how many runs it stands for; 0 is 1
	fromStats           bool
	slot                *slot // the relay's entry for its text, resolved by the worker; nil: none
}

// Collector is the capture side: Observe (a proxy.StatementObserver)
// queues statements without ever blocking, and Run's worker analyses them
// into the Store.
type Collector struct {
	store  *Store
	opts   CollectorOptions
	queue  chan observed
	log    *zap.Logger
	before func() // test hook: called by the worker before each statement
	// refused holds fingerprints Analyze refused (not a SELECT, a literal
	// left): the worker's own, bounded by maxRefused.
	refused map[string]struct{}
	// stats carries pg_stat_statements' rows from the reader to the
	// worker; lastCalls (the worker's) is each row's calls when last read.
	stats     chan statsBatch
	lastCalls map[string]map[statKey]int64
	// relayed is what the relay captured per database, by fingerprint and
	// role, since the last reads of pg_stat_statements: those runs are in
	// its calls too, and are not counted twice (the worker's).
	relayed map[string]*relayCredit
	// teach is Roles as a set; nil: every role teaches.
	teach map[string]bool
	// recent is the relay's table of texts seen recently (nil: none);
	// idleLimit is how many collections a key may find nothing before it
	// goes, and harvest the worker's buffer for collecting.
	recent    *recent
	idleLimit int
	harvest   []harvested

	captured, dropped, denied, unparsable, skipped, learnt atomic.Uint64
	statReads, statFailures                                atomic.Uint64
}

// NewCollector is a collector feeding store.
func NewCollector(store *Store, o CollectorOptions) *Collector {
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.Sample <= 0 || o.Sample > 1 {
		o.Sample = 1
	}
	if o.SaveEvery <= 0 {
		o.SaveEvery = time.Minute
	}
	if o.DrainEvery <= 0 {
		o.DrainEvery = 50 * time.Millisecond
	}
	if o.StatsEvery <= 0 {
		o.StatsEvery = time.Minute
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Collector{store: store, opts: o, queue: make(chan observed, o.QueueSize), log: log, refused: map[string]struct{}{},
		stats: make(chan statsBatch, 1), lastCalls: map[string]map[statKey]int64{}, relayed: map[string]*relayCredit{}}
	if o.Recent >= 0 {
		c.recent = newRecent(cmp.Or(o.Recent, DefaultRecent), o.Deny != nil)
		c.idleLimit = max(1, int(recentIdle/o.DrainEvery))
	}
	if len(o.Roles) > 0 {
		c.teach = map[string]bool{}
		for _, r := range o.Roles {
			c.teach[r] = true
		}
	}
	return c
}

// Store is the store the collector feeds.
func (c *Collector) Store() *Store { return c.store }

// recentIdle is how long a key of the recently seen table may go unused
// before it is dropped (its text is fingerprinted again when it comes back).
const recentIdle = 10 * time.Second

// Observe counts sql, when sampled, against its key in the recently seen
// table, or else queues a copy for the worker when the queue has room
// (counting the drop when not). It never blocks and, for a text held,
// neither copies nor allocates. sql may be the caller's buffer. session
// tells the relayed sessions apart (0: unknown).
func (c *Collector) Observe(database, role string, session uint64, sql []byte) {
	if c.opts.Sample < 1 && rand.Float64() >= c.opts.Sample {
		return
	}
	if len(sql) > MaxLen {
		c.skipped.Add(1)
		return
	}
	if r := c.recent; r != nil {
		k := r.key(database, role, sql)
		sh := r.shard(k)
		sh.mu.Lock()
		s := sh.slots[k]
		if s != nil && s.database == database && s.role == role {
			s.runs++
			s.seenSession(session)
			sh.captured++
			sh.repeats++
			sh.mu.Unlock()
			return
		}
		if s == nil && len(sh.slots) < r.perShard {
			s = &slot{key: k, database: database, role: role}
			if session != 0 {
				s.sessions, s.reported, s.lastSession = []uint64{session}, 1, session
			}
			if c.enqueue(database, role, session, sql, s) {
				sh.slots[k] = s
				sh.captured++
			}
			sh.mu.Unlock()
			return
		}
		sh.mu.Unlock() // full: this statement is learnt alone
	}
	if c.enqueue(database, role, session, sql, nil) {
		c.captured.Add(1)
	}
}

// enqueue hands a copy of sql to the worker, or counts the drop.
func (c *Collector) enqueue(database, role string, session uint64, sql []byte, s *slot) bool {
	select {
	case c.queue <- observed{database: database, role: role, session: sessionDigest(role, session), sql: string(sql), at: time.Now(), slot: s}:
		return true
	default:
		c.dropped.Add(1)
		return false
	}
}

// Run analyses queued statements every DrainEvery until ctx ends, saving
// the store every SaveEvery and once more at the end.
func (c *Collector) Run(ctx context.Context) error {
	drain := time.NewTicker(c.opts.DrainEvery)
	defer drain.Stop()
	save := time.NewTicker(c.opts.SaveEvery)
	defer save.Stop()
	if c.opts.Stats != nil {
		readerCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.readStats(readerCtx)
		}()
		defer func() { cancel(); <-done }()
	}
	for {
		select {
		case <-ctx.Done():
			c.drain()
			c.learnRepeats(time.Now())
			return c.save()
		case <-save.C:
			_ = c.save()
		case <-drain.C:
			c.drain()
			c.learnRepeats(time.Now())
		case b := <-c.stats:
			c.learnStats(b)
		}
	}
}

// drain learns what was queued when it started, so that statements
// arriving faster than they are learnt cannot keep the worker from saving
// or stopping.
func (c *Collector) drain() {
	for n := len(c.queue); n > 0; n-- {
		c.learn(<-c.queue)
	}
}

func (c *Collector) save() error {
	err := c.store.Save(time.Now())
	if err != nil {
		c.log.Warn("workload: save", zap.Error(err))
	}
	return err
}

func (c *Collector) learn(o observed) {
	if c.before != nil {
		c.before()
	}
	parts := c.resolve(o)
	if o.slot != nil {
		o.slot.parts, o.slot.resolved = parts, true
	}
}

// resolve learns one text and says what became of each of its statements,
// so that the repeats of a relayed text are counted alike (learnRepeats).
func (c *Collector) resolve(o observed) []part {
	if c.teach != nil && !c.teach[o.role] || c.opts.Deny != nil && c.opts.Deny.MatchString(o.sql) {
		c.denied.Add(1)
		return []part{{outcome: outDenied}}
	}
	if !utf8.ValidString(o.sql) {
		c.unparsable.Add(1) // another client encoding: pg_query reads UTF-8
		return []part{{outcome: outUnparsable}}
	}
	stmts := []string{o.sql}
	if strings.IndexByte(o.sql, ';') >= 0 {
		var err error
		if stmts, err = pg_query.SplitWithParser(o.sql, true); err != nil {
			c.unparsable.Add(1)
			return []part{{outcome: outUnparsable}}
		}
	}
	p, err := c.store.Profile(o.database)
	if err != nil {
		c.log.Warn("workload: profile file", zap.String("database", o.database), zap.Error(err))
	}
	parts := make([]part, 0, len(stmts))
	for _, stmt := range stmts {
		// The fingerprint costs a few µs, a full analysis ~50 times more:
		// a statement whose fingerprint is held (or known not to be
		// learnable) is counted without one.
		fp, err := pg_query.Fingerprint(stmt)
		if err != nil {
			c.unparsable.Add(1)
			parts = append(parts, part{outcome: outUnparsable})
			continue
		}
		learnt := part{fingerprint: fp, outcome: outLearnt}
		runs := max(o.runs, 1)
		if c.opts.Stats != nil {
			// Each statement is counted once whatever the source: runs
			// the relay saw are taken off pg_stat_statements' calls.
			k := creditKey{fp, o.role}
			if !o.fromStats {
				c.credit(o.database).add(k, runs)
			} else if runs -= c.credit(o.database).take(k, runs); runs == 0 {
				c.learnt.Add(1)
				parts = append(parts, learnt)
				continue
			}
		}
		who := Origin{Role: o.role, Session: o.session}
		if p.SeenFrom(fp, who, o.at, runs) {
			c.learnt.Add(1)
			parts = append(parts, learnt)
			continue
		}
		if _, ok := c.refused[fp]; ok {
			c.skipped.Add(1)
			parts = append(parts, part{outcome: outSkipped})
			continue
		}
		s, err := Analyze(stmt)
		switch {
		case err == nil:
			p.AddFrom(s, who, o.at, runs)
			c.learnt.Add(1)
			parts = append(parts, learnt)
		case errors.Is(err, ErrParse):
			c.unparsable.Add(1)
			parts = append(parts, part{outcome: outUnparsable})
		default:
			c.skipped.Add(1)
			parts = append(parts, part{outcome: outSkipped})
			if len(c.refused) >= maxRefused {
				clear(c.refused)
			}
			c.refused[fp] = struct{}{}
		}
	}
	return parts
}

// credit is the relay's credit against database's pg_stat_statements.
func (c *Collector) credit(database string) *relayCredit {
	rc := c.relayed[database]
	if rc == nil {
		rc = &relayCredit{}
		c.relayed[database] = rc
	}
	return rc
}

// learnRepeats credits what the relay counted against the recently seen
// texts since the last call to what each text resolved to: as many runs,
// with the sessions new to it, as if each had been queued and learnt.
func (c *Collector) learnRepeats(at time.Time) {
	if c.recent == nil {
		return
	}
	c.harvest = c.recent.collect(c.harvest[:0], c.idleLimit)
	for _, h := range c.harvest {
		c.learnRepeat(h, at)
	}
	clear(c.harvest) // let slots dropped meanwhile go
}

func (c *Collector) learnRepeat(h harvested, at time.Time) {
	s, runs := h.s, h.runs
	gone := false
	for _, pt := range s.parts {
		switch pt.outcome {
		case outDenied:
			c.denied.Add(uint64(runs))
		case outUnparsable:
			c.unparsable.Add(uint64(runs))
		case outSkipped:
			c.skipped.Add(uint64(runs))
		case outLearnt:
			p, err := c.store.Profile(s.database)
			if err != nil {
				c.log.Warn("workload: profile file", zap.String("database", s.database), zap.Error(err))
			}
			ok := runs == 0 || p.SeenFrom(pt.fingerprint, Origin{Role: s.role}, at, runs)
			for _, sess := range h.sessions {
				ok = ok && p.SeenFrom(pt.fingerprint, Origin{Role: s.role, Session: sessionDigest(s.role, sess)}, at, 0)
			}
			if !ok {
				// Evicted or forgotten since: its text is needed to learn
				// it again, and comes with the next run.
				gone = true
				c.dropped.Add(uint64(runs))
				continue
			}
			if c.opts.Stats != nil && runs > 0 {
				c.credit(s.database).add(creditKey{pt.fingerprint, s.role}, runs)
			}
			c.learnt.Add(uint64(runs))
		}
	}
	if gone {
		c.dropped.Add(uint64(c.recent.forget(s)))
	}
}

// maxRefused bounds the fingerprints remembered as not learnable.
const maxRefused = 4096

// sessionDigest names a relayed session by role and the relay's number for
// it, short: a profile keeps at most MaxSessions per query.
func sessionDigest(role string, session uint64) string {
	if session == 0 {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(role))
	_ = binary.Write(h, binary.LittleEndian, session)
	return strconv.FormatUint(h.Sum64()&0xffffffffff, 36)
}

// creditKey is a fingerprint run by a role.
type creditKey struct{ fingerprint, role string }

// relayCredit holds, for one database, the runs the relay captured that
// pg_stat_statements has not yet reported: cur since the last read, prev
// the read before. Credit not taken within two reads is dropped (the
// statement failed, and pg_stat_statements counts only those that end),
// so it cannot hide later runs from outside the proxy for long.
type relayCredit struct{ prev, cur map[creditKey]int64 }

// maxCredit bounds the keys of one generation.
const maxCredit = 1 << 16

func (r *relayCredit) add(k creditKey, n int64) {
	if r.cur == nil {
		r.cur = map[creditKey]int64{}
	}
	if _, ok := r.cur[k]; ok || len(r.cur) < maxCredit {
		r.cur[k] += n
	}
}

// take uses up to n of k's credit, oldest first, and returns how much.
func (r *relayCredit) take(k creditKey, n int64) int64 {
	got := int64(0)
	for _, m := range []map[creditKey]int64{r.prev, r.cur} {
		if c := min(m[k], n-got); c > 0 {
			got += c
			if m[k] -= c; m[k] == 0 {
				delete(m, k)
			}
		}
	}
	return got
}

// age ends a read: credit from before the previous read is dropped.
func (r *relayCredit) age() { r.prev, r.cur = r.cur, nil }

// Stats reads the running totals.
func (c *Collector) Stats() Stats {
	st := Stats{
		Captured: c.captured.Load(), Dropped: c.dropped.Load(),
		Denied: c.denied.Load(), Unparsable: c.unparsable.Load(), Skipped: c.skipped.Load(), Learnt: c.learnt.Load(),
		StatReads: c.statReads.Load(), StatFailures: c.statFailures.Load(),
	}
	if c.recent != nil {
		captured, repeats := c.recent.totals()
		st.Captured += captured
		st.Repeats = repeats
	}
	for _, p := range c.store.Profiles() {
		st.Stored += p.Len()
	}
	return st
}

// WorkloadTotals is Stats for the metrics (metrics.WorkloadSource).
func (c *Collector) WorkloadTotals() metrics.WorkloadTotals {
	s := c.Stats()
	return metrics.WorkloadTotals{Captured: s.Captured, Dropped: s.Dropped, Denied: s.Denied, Unparsable: s.Unparsable, Skipped: s.Skipped, Learnt: s.Learnt,
		StatReads: s.StatReads, StatFailures: s.StatFailures, Stored: s.Stored}
}
