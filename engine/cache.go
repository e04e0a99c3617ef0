package engine

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/catalog/memory"
)

// CacheKey identifies a translation: the same question, on the same database
// and schema, asked by the same role, gets the same SQL.
type CacheKey struct {
	Question    string // as asked; normalized by the cache
	Database    string
	Fingerprint string
	Role        string // current_user of the asking session
	// Session summarizes the rest of the session that shapes the answer:
	// search_path and the tables row-level security applies to.
	Session string
	Profile string
}

func (k CacheKey) hash() string {
	h := sha256.New()
	for _, part := range []string{NormalizeQuestion(k.Question), k.Database, k.Fingerprint, k.Role, k.Session, k.Profile} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// NormalizeQuestion folds case, whitespace and trailing punctuation so that
// "How many orders?" and "how many  orders" share a cache entry.
func NormalizeQuestion(q string) string { return memory.NormalizeQuestion(q) }

// backendTimeout bounds one shared-cache round trip: a slow store must not
// hold up an ask more than a model call would save.
const backendTimeout = 2 * time.Second

// Cache is a bounded LRU of translations with a TTL. Safe for concurrent use.
type Cache struct {
	ttl time.Duration
	max int
	now func() time.Time
	// Backend, when set (before first use), is consulted on a local miss
	// and written through on Put.
	Backend memory.CacheBackend

	mu    sync.Mutex
	order *list.List // front = most recent
	items map[string]*list.Element
}

type cacheEntry struct {
	key     string
	t       memory.CacheEntry
	expires time.Time
}

// NewCache returns a cache of at most max entries that live for ttl.
// max <= 0 or ttl <= 0 gives a cache that stores nothing.
func NewCache(max int, ttl time.Duration) *Cache {
	return &Cache{ttl: ttl, max: max, now: time.Now, order: list.New(), items: map[string]*list.Element{}}
}

// Get returns the cached translation for k.
func (c *Cache) Get(k CacheKey) (memory.CacheEntry, bool) {
	if c == nil || c.max <= 0 {
		return memory.CacheEntry{}, false
	}
	h := k.hash()
	if t, ok := c.getLocal(h); ok {
		return t, true
	}
	if c.Backend == nil {
		return memory.CacheEntry{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), backendTimeout)
	defer cancel()
	t, ok, err := c.Backend.GetEntry(ctx, h)
	if err != nil || !ok {
		return memory.CacheEntry{}, false
	}
	c.putLocal(h, t)
	return t, true
}

func (c *Cache) getLocal(h string) (memory.CacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[h]
	if !ok {
		return memory.CacheEntry{}, false
	}
	e := el.Value.(*cacheEntry)
	if c.now().After(e.expires) {
		c.order.Remove(el)
		delete(c.items, h)
		return memory.CacheEntry{}, false
	}
	c.order.MoveToFront(el)
	return e.t, true
}

// Put stores t for k.
func (c *Cache) Put(k CacheKey, t memory.CacheEntry) {
	if c == nil || c.max <= 0 || c.ttl <= 0 {
		return
	}
	h := k.hash()
	c.putLocal(h, t)
	if c.Backend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), backendTimeout)
		defer cancel()
		_ = c.Backend.PutEntry(ctx, h, t, c.now().Add(c.ttl))
	}
}

func (c *Cache) putLocal(h string, t memory.CacheEntry) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[h]; ok {
		e := el.Value.(*cacheEntry)
		e.t, e.expires = t, c.now().Add(c.ttl)
		c.order.MoveToFront(el)
		return
	}
	c.items[h] = c.order.PushFront(&cacheEntry{key: h, t: t, expires: c.now().Add(c.ttl)})
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry).key)
	}
}

// Len is the number of entries, expired ones included until touched.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
