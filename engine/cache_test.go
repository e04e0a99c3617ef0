package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog/memory"
)

func TestCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(2, time.Minute)
	c.now = func() time.Time { return now }
	k := func(q string) CacheKey {
		return CacheKey{Question: q, Database: "shop", Fingerprint: "f1", Role: "alice"}
	}

	c.Put(k("How many orders?"), memory.CacheEntry{SQL: "SELECT count(*) FROM orders", Confidence: 0.75})
	tests := []struct {
		name string
		key  CacheKey
		hit  bool
	}{
		{"same question normalized", k("  how many   ORDERS "), true},
		{"other role", CacheKey{Question: "how many orders", Database: "shop", Fingerprint: "f1", Role: "bob"}, false},
		{"schema changed", CacheKey{Question: "how many orders", Database: "shop", Fingerprint: "f2", Role: "alice"}, false},
		{"other database", CacheKey{Question: "how many orders", Database: "crm", Fingerprint: "f1", Role: "alice"}, false},
	}
	for _, tt := range tests {
		got, hit := c.Get(tt.key)
		if hit != tt.hit {
			t.Errorf("%s: hit = %v, want %v", tt.name, hit, tt.hit)
		}
		if hit && !reflect.DeepEqual(got, memory.CacheEntry{SQL: "SELECT count(*) FROM orders", Confidence: 0.75}) {
			t.Errorf("%s: got %+v", tt.name, got)
		}
	}

	now = now.Add(2 * time.Minute)
	if _, hit := c.Get(k("how many orders")); hit {
		t.Error("expired entry still served")
	}

	c.Put(k("a"), memory.CacheEntry{SQL: "SELECT 1", Confidence: -1})
	c.Put(k("b"), memory.CacheEntry{SQL: "SELECT 2", Confidence: -1})
	c.Get(k("a")) // a becomes most recent, so b is evicted next
	c.Put(k("c"), memory.CacheEntry{SQL: "SELECT 3", Confidence: -1})
	if _, hit := c.Get(k("b")); hit {
		t.Error("least recently used entry not evicted")
	}
	if tr, hit := c.Get(k("a")); !hit || tr.SQL != "SELECT 1" || tr.Confidence != -1 {
		t.Errorf("a = %+v %v", tr, hit)
	}
	if c.Len() != 2 {
		t.Errorf("len = %d, want 2", c.Len())
	}
}
