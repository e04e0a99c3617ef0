package workload

import (
	"hash/maphash"
	"sync"
)

// The relay's side of capture is a bounded table of the texts seen
// recently, keyed by database, role and textKey: a statement whose key is
// held is counted there (a hash, a lock held for a map lookup, an
// increment: no copy, no allocation, no send), and only a new key's text
// is copied and queued for the worker, which fingerprints it once. The
// worker collects the counts every DrainEvery and credits them to the
// fingerprint the first text resolved to, with the sessions that ran them
// (at most MaxSessions per key, as a profile keeps).
//
// The table never evicts a key that is in use: a key is dropped only after
// idling for recentIdle (or when the fingerprint it counts for left the
// profile). When it is full, a new key's statement takes the old path,
// queued and fingerprinted alone, so a flood of distinct texts costs what
// it did and cannot push out what the application runs.

// DefaultRecent is how many keys the table holds by default.
const DefaultRecent = 4096

// recentShards spreads the table's lock: relay goroutines on different
// cores rarely meet on one.
const recentShards = 64

type recent struct {
	seed     maphash.Seed
	perShard int
	// exact keys the raw text (literals included): with a deny pattern,
	// which may match a literal, texts differing only there must each be
	// matched.
	exact  bool
	shards [recentShards]recentShard
}

type recentShard struct {
	mu    sync.Mutex
	slots map[uint64]*slot
	// captured counts the statements this shard took (queued or
	// repeats); repeats those counted against a held key. Under mu.
	captured, repeats uint64
	_                 [64]byte // keep shards on separate cache lines
}

// slot is one recently seen key.
type slot struct {
	key            uint64
	database, role string

	// Under the shard's lock (the relay's side):
	runs        int64    // repeats not yet collected by the worker
	sessions    []uint64 // sessions seen, at most MaxSessions
	reported    int      // sessions[:reported] were credited
	lastSession uint64   // the last session seen: most repeats come from it
	idle        int      // collections in a row that found nothing

	// The worker's alone: what the first text resolved to. Until then
	// (resolved false) runs wait.
	resolved bool
	parts    []part
}

// part is the worker's verdict on one statement of a slot's text.
type part struct {
	fingerprint string // set for learnt
	outcome     outcome
}

type outcome uint8

const (
	outLearnt outcome = iota
	outDenied
	outUnparsable
	outSkipped
)

func newRecent(size int, exact bool) *recent {
	r := &recent{seed: maphash.MakeSeed(), perShard: max(1, size/recentShards), exact: exact}
	for i := range r.shards {
		r.shards[i].slots = map[uint64]*slot{}
	}
	return r
}

// key hashes the statement's identity: database, role and text.
func (r *recent) key(database, role string, sql []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(database)
	h.WriteByte(0)
	h.WriteString(role)
	h.WriteByte(0)
	if r.exact || !textKey(&h, sql) {
		h.Reset()
		h.WriteString(database)
		h.WriteByte(0)
		h.WriteString(role)
		h.WriteByte(1) // raw text: never equal to a textKey
		h.Write(sql)
	}
	return h.Sum64()
}

func (r *recent) shard(k uint64) *recentShard { return &r.shards[k%recentShards] }

// seenSession records session on s (under the shard's lock).
func (s *slot) seenSession(session uint64) {
	if session == s.lastSession || session == 0 {
		return
	}
	s.lastSession = session
	for _, x := range s.sessions {
		if x == session {
			return
		}
	}
	if len(s.sessions) < MaxSessions {
		s.sessions = append(s.sessions, session)
	}
}

// harvested is what the worker took from one slot.
type harvested struct {
	s        *slot
	runs     int64
	sessions []uint64 // new since the last collection
}

// collect takes every resolved slot's runs and new sessions into out,
// ages idle slots and drops those idle for idleLimit collections.
func (r *recent) collect(out []harvested, idleLimit int) []harvested {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for k, s := range sh.slots {
			if !s.resolved {
				continue
			}
			if s.runs == 0 && s.reported == len(s.sessions) {
				if s.idle++; s.idle >= idleLimit {
					delete(sh.slots, k)
				}
				continue
			}
			s.idle = 0
			out = append(out, harvested{s: s, runs: s.runs, sessions: s.sessions[s.reported:len(s.sessions):len(s.sessions)]})
			s.runs, s.reported = 0, len(s.sessions)
		}
		sh.mu.Unlock()
	}
	return out
}

// forget drops a slot whose fingerprint left the profile; the runs it
// took since the last collection are returned (they are not learnt).
func (r *recent) forget(s *slot) int64 {
	sh := r.shard(s.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.slots[s.key] == s {
		delete(sh.slots, s.key)
	}
	n := s.runs
	s.runs = 0
	return n
}

func (r *recent) totals() (captured, repeats uint64) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		captured += sh.captured
		repeats += sh.repeats
		sh.mu.Unlock()
	}
	return captured, repeats
}
