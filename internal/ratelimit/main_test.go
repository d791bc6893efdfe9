package ratelimit_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, "ratelimit") }

// backend is a Redis the tests run on. The limiter never relies on expiry,
// so miniredis' clock is left alone.
type backend = redistest.Backend

var backends = redistest.Backends()

// forEachBackend runs f as a subtest on every backend.
var forEachBackend = redistest.ForEachBackend

// t0 is where every test clock starts: a whole minute, so windows of a
// second or a minute start exactly there.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t0 + d.
func (c *testClock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = t0.Add(d)
	c.mu.Unlock()
}

// rig is one test's limiter on a backend, under a key prefix of its own.
type rig struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	clock  *testClock
	lim    *ratelimit.Limiter
}

func newRig(t testing.TB, b backend, opts ratelimit.Options) *rig {
	t.Helper()
	rdb := b.Client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: redistest.Prefix(t, rdb), clock: &testClock{now: t0}}
	opts.Prefix = r.prefix
	if opts.Clock == nil && opts.ScriptClock == nil {
		// The test's clock is this process's and stands in for Redis's.
		opts.Clock, opts.ScriptClock = r.clock, r.clock
	}
	r.lim = ratelimit.New(rdb, opts)
	return r
}

// allow makes a hit of cost n at t0 + at and returns the result, failing
// the test on an error.
func (r *rig) allow(at time.Duration, key string, limit ratelimit.Limit, n int64) ratelimit.Result {
	r.t.Helper()
	r.clock.Set(at)
	res, err := r.lim.AllowN(r.ctx, key, limit, n)
	if err != nil {
		r.t.Fatalf("AllowN(%s, %+v, %d) at t0+%v: %v", key, limit, n, at, err)
	}
	return res
}

// expect makes a hit like allow and checks its result.
func (r *rig) expect(at time.Duration, key string, limit ratelimit.Limit, n int64, want ratelimit.Result) {
	r.t.Helper()
	if got := r.allow(at, key, limit, n); got != want {
		r.t.Fatalf("AllowN(%s, n=%d) at t0+%v = %+v, want %+v", key, n, at, got, want)
	}
}

// keys returns every key under the rig's prefix (on every master of a cluster).
func (r *rig) keys() []string {
	r.t.Helper()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, "*{"+r.prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(r.ctx, r.rdb)
	}
	if err != nil {
		r.t.Fatalf("SCAN: %v", err)
	}
	return out
}

// key returns the one key under the prefix whose name contains part.
func (r *rig) key(part string) string {
	r.t.Helper()
	var found []string
	for _, k := range r.keys() {
		if strings.Contains(k, part) {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		r.t.Fatalf("keys containing %q: %v, want exactly one", part, found)
	}
	return found[0]
}

// flushScripts empties the script cache of every node.
func (r *rig) flushScripts() {
	r.t.Helper()
	var err error
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	} else {
		err = r.rdb.ScriptFlush(r.ctx).Err()
	}
	if err != nil {
		r.t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// hammer makes workers × calls concurrent hits of cost 1 and returns how
// many were allowed.
func (r *rig) hammer(key string, limit ratelimit.Limit, workers, calls int) int64 {
	r.t.Helper()
	var allowed, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				res, err := r.lim.Allow(r.ctx, key, limit)
				if err != nil {
					failed.Add(1)
					r.t.Errorf("Allow: %v", err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		r.t.FailNow()
	}
	return allowed.Load()
}
