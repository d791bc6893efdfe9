// Package ttlcache is a map of entries that expire, bounded in size, for
// the in-process caches and flags read on hot paths: a read takes no lock
// (a sync.Map load); writes take one mutex.
//
// When a new key would take the cache past its bound, the expired entries
// are dropped first (at most once per expiry: a sweep remembers when the
// next entry expires); if the cache is still full, arbitrary entries are
// dropped, an eighth of the bound at a time, so the cost of the scan is
// spread over many writes. A cache holds only what can be read again from
// elsewhere: a dropped entry costs one look-up, never a wrong answer.
package ttlcache

import (
	"strings"
	"sync"
)

// Cache maps string keys to values of type V, each until a time (unix ns).
type Cache[V any] struct {
	max int
	m   sync.Map // string -> entry[V]

	mu sync.Mutex // writers
	n  int        // entries in m
	// quietUntil: no entry expires before then (as of the last sweep), so
	// a sweep before it would find nothing to drop.
	quietUntil int64
}

type entry[V any] struct {
	v     V
	until int64
}

// New returns a cache of at most size entries (at least 1).
func New[V any](size int) *Cache[V] {
	return &Cache[V]{max: max(size, 1)}
}

// Get returns the value of key if it is there and has not expired at now
// (unix ns).
func (c *Cache[V]) Get(key string, now int64) (V, bool) {
	if v, ok := c.m.Load(key); ok {
		if e := v.(entry[V]); e.until > now {
			return e.v, true
		}
	}
	var zero V
	return zero, false
}

// Set stores v under key until the time until (unix ns); now is the
// current time, to tell expired entries.
func (c *Cache[V]) Set(key string, v V, until, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// An entry that expires before the last sweep's next expiry brings the
	// next sweep forward: else, full, the cache would drop live entries
	// while this one, expired, stays.
	if until < c.quietUntil {
		c.quietUntil = until
	}
	if _, loaded := c.m.Swap(key, entry[V]{v: v, until: until}); loaded {
		return
	}
	c.n++
	if c.n <= c.max {
		return
	}
	if now >= c.quietUntil {
		c.sweep(now)
	}
	if c.n <= c.max {
		return
	}
	keep := c.max - max(c.max/8, 1)
	c.m.Range(func(k, _ any) bool {
		if k.(string) != key {
			c.m.Delete(k)
			c.n--
		}
		return c.n > keep
	})
}

// sweep drops the entries expired at now and notes when the next expires.
func (c *Cache[V]) sweep(now int64) {
	next := int64(0)
	c.m.Range(func(k, v any) bool {
		until := v.(entry[V]).until
		switch {
		case until <= now:
			c.m.Delete(k)
			c.n--
		case next == 0 || until < next:
			next = until
		}
		return true
	})
	c.quietUntil = next
}

// Delete removes key.
func (c *Cache[V]) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m.LoadAndDelete(key); ok {
		c.n--
	}
}

// DeletePrefix removes every key that starts with prefix.
func (c *Cache[V]) DeletePrefix(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			if _, ok := c.m.LoadAndDelete(k); ok {
				c.n--
			}
		}
		return true
	})
}

// Clear removes every entry.
func (c *Cache[V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.Clear()
	c.n = 0
}

// Len returns how many entries the cache holds, expired ones included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
