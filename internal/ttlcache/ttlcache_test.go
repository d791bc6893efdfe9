package ttlcache_test

import (
	"strconv"
	"testing"

	"github.com/seckill/seckill/internal/ttlcache"
)

// TestBounded: however many distinct keys are set, the cache holds at most
// its bound; the newest key is always kept.
func TestBounded(t *testing.T) {
	c := ttlcache.New[int](100)
	for i := range 10_000 {
		key := strconv.Itoa(i)
		c.Set(key, i, 1_000, 0) // none expires
		if n := c.Len(); n > 100 {
			t.Fatalf("after %d keys the cache holds %d, bound 100", i+1, n)
		}
		if v, ok := c.Get(key, 0); !ok || v != i {
			t.Fatalf("Get(%s) just after Set = %d, %v", key, v, ok)
		}
	}
}

// TestExpiredDroppedFirst: a full cache drops its expired entries before
// any live one.
func TestExpiredDroppedFirst(t *testing.T) {
	c := ttlcache.New[int](10)
	for i := range 5 {
		c.Set("old"+strconv.Itoa(i), i, 100, 0)
	}
	for i := range 5 {
		c.Set("live"+strconv.Itoa(i), i, 1_000, 0)
	}
	c.Set("new", 0, 1_000, 200) // the old ones expired at 100
	if n := c.Len(); n != 6 {
		t.Errorf("Len = %d, want 6: the 5 expired entries dropped, nothing else", n)
	}
	for i := range 5 {
		if _, ok := c.Get("live"+strconv.Itoa(i), 200); !ok {
			t.Errorf("live%d was dropped while expired entries were there", i)
		}
	}
	if _, ok := c.Get("old0", 50); ok {
		t.Error("old0 still there")
	}
}

func TestGetDeleteClear(t *testing.T) {
	c := ttlcache.New[string](10)
	c.Set("s1\x00A", "a", 100, 0)
	c.Set("s1\x00B", "b", 100, 0)
	c.Set("s2\x00A", "c", 100, 0)
	if _, ok := c.Get("s1\x00A", 100); ok {
		t.Error("an entry is there at its expiry")
	}
	if v, ok := c.Get("s1\x00A", 99); !ok || v != "a" {
		t.Errorf("Get = %q, %v", v, ok)
	}
	c.Set("s1\x00A", "a2", 200, 0) // replaces: still 3
	if n := c.Len(); n != 3 {
		t.Errorf("Len after replacing = %d, want 3", n)
	}
	c.DeletePrefix("s1\x00")
	if n := c.Len(); n != 1 {
		t.Errorf("Len after DeletePrefix = %d, want 1", n)
	}
	c.Delete("s2\x00A")
	c.Delete("s2\x00A")
	if n := c.Len(); n != 0 {
		t.Errorf("Len after Delete = %d, want 0", n)
	}
	c.Set("x", "x", 100, 0)
	c.Clear()
	if _, ok := c.Get("x", 0); ok || c.Len() != 0 {
		t.Error("Clear left an entry")
	}
}
