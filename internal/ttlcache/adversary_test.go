package ttlcache_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/ttlcache"
)

// TestEarlierExpiryAfterASweep: a sweep notes when the next entry expires
// and skips sweeping until then; an entry set after it that expires sooner
// must bring that time forward. Else, once it expired, a full cache kept it
// and dropped live entries instead (it skipped the sweep).
func TestEarlierExpiryAfterASweep(t *testing.T) {
	for run := range 20 {
		c := ttlcache.New[int](8)
		for i := range 9 { // the 9th sweeps (nothing expired; next at 1000), then drops 2
			c.Set("live"+strconv.Itoa(i), i, 1_000, 0)
		}
		c.Set("short", 0, 10, 0) // expires at 10, before the sweep's next
		c.Set("new", 0, 1_000, 50)
		// At 50 the cache is full again: "short" has expired and is the
		// one to drop; every live entry stays.
		live := 0
		for i := range 9 {
			if _, ok := c.Get("live"+strconv.Itoa(i), 50); ok {
				live++
			}
		}
		if _, ok := c.Get("new", 50); !ok || live != 7 || c.Len() != 8 {
			t.Fatalf("run %d: %d of the 7 live entries left, new there %v, Len %d; want 7, true, 8", run, live, ok, c.Len())
		}
	}
}

// TestConcurrentUse: Set, Get, Delete, DeletePrefix and Clear from many
// goroutines (run with -race); the count stays the number of entries held
// and within the bound.
func TestConcurrentUse(t *testing.T) {
	c := ttlcache.New[int](64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2_000 {
				key := strconv.Itoa(g%4) + "\x00" + strconv.Itoa(i%100)
				now := int64(i)
				switch i % 7 {
				case 0:
					c.Delete(key)
				case 1:
					c.Get(key, now)
				case 2:
					if i%200 == 2 {
						c.DeletePrefix(strconv.Itoa(g%4) + "\x00")
					}
				case 3:
					if i%500 == 3 {
						c.Clear()
					}
				default:
					c.Set(key, i, now+int64(i%50), now)
				}
				if n := c.Len(); n < 0 || n > 64 {
					t.Errorf("Len %d outside [0, 64]", n)
					return
				}
			}
		}()
	}
	wg.Wait()
	held := 0
	for g := range 4 {
		for i := range 100 {
			if _, ok := c.Get(strconv.Itoa(g)+"\x00"+strconv.Itoa(i), -1); ok {
				held++
			}
		}
	}
	if n := c.Len(); n != held {
		t.Errorf("Len %d, but %d entries held", n, held)
	}
}
