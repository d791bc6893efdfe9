package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

// deadClient is a client for a port nothing listens on, that gives up at
// once: one dial attempt, a short dial timeout, no retries.
func deadClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:          "127.0.0.1:1",
		DialTimeout:   200 * time.Millisecond,
		DialerRetries: 1,
		MaxRetries:    -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisDownNoFallback(t *testing.T) {
	lim := ratelimit.New(deadClient(t), ratelimit.Options{})
	start := time.Now()
	res, err := lim.Allow(context.Background(), "user:alice", ratelimit.PerSecond(10, 0))
	var op *net.OpError
	if !errors.As(err, &op) || errors.Is(err, ratelimit.ErrInvalid) || res != (ratelimit.Result{}) {
		t.Fatalf("Allow = %+v, %v; want the dial error", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
}

// With Redis unreachable the Fallback answers, Degraded, enforcing this
// instance's share of each limit: a quarter with 4 instances.
func TestRedisDownFallback(t *testing.T) {
	clock := &testClock{now: t0}
	var fallbacks atomic.Int64
	lim := ratelimit.New(deadClient(t), ratelimit.Options{
		Clock:      clock,
		Fallback:   ratelimit.NewLocal(ratelimit.LocalOptions{Instances: 4}),
		OnFallback: func(string, error) { fallbacks.Add(1) },
	})
	ctx := context.Background()
	start := time.Now()
	for _, c := range []struct {
		limit ratelimit.Limit
		share int64
		retry time.Duration // one token of the share: Instances × Period / Rate
	}{
		{ratelimit.PerSecond(100, 99), 25, 40 * ms},
		{ratelimit.Fixed(40, time.Minute), 10, 6 * time.Second},
		{ratelimit.Sliding(40, time.Minute), 10, 6 * time.Second},
		{ratelimit.PerSecond(2, 0), 1, 2 * time.Second}, // less than one token each: one
	} {
		key := "k-" + c.limit.Algorithm.String()
		var n int64
		for {
			res, err := lim.Allow(ctx, key, c.limit)
			if err != nil || !res.Degraded {
				t.Fatalf("%+v: %+v, %v; want a degraded result", c.limit, res, err)
			}
			if !res.Allowed {
				if res.RetryAfter != c.retry || res.Remaining != 0 {
					t.Fatalf("%+v: refused with %+v, want RetryAfter %v", c.limit, res, c.retry)
				}
				break
			}
			n++
		}
		if n != c.share {
			t.Errorf("%+v: %d allowed, want %d", c.limit, n, c.share)
		}
		clock.Set(c.retry)
		if res, _ := lim.Allow(ctx, key, c.limit); !res.Allowed {
			t.Errorf("%+v: refused after RetryAfter: %+v", c.limit, res)
		}
		clock.Set(0)
	}
	if fallbacks.Load() == 0 {
		t.Fatal("OnFallback not called")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	// A caller that gave up gets its own error, not a fallback answer.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if res, err := lim.Allow(cancelled, "k", ratelimit.PerSecond(1, 0)); !errors.Is(err, context.Canceled) || res.Degraded {
		t.Fatalf("cancelled ctx: %+v, %v", res, err)
	}
}

// Redis dies mid-run and comes back: degraded answers in between, Redis'
// own after.
func TestFallbackWhileRedisRestarts(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := ratelimit.New(rdb, ratelimit.Options{Fallback: ratelimit.NewLocal(ratelimit.LocalOptions{Instances: 2})})
	ctx := context.Background()
	limit := ratelimit.PerMinute(100, 9)

	check := func(degraded bool, remaining int64) {
		t.Helper()
		res, err := lim.Allow(ctx, "user:alice", limit)
		if err != nil || !res.Allowed || res.Degraded != degraded || res.Remaining != remaining {
			t.Fatalf("Allow = %+v, %v; want degraded=%v remaining=%d", res, err, degraded, remaining)
		}
	}
	check(false, 9)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	check(true, 4) // this instance's share: 5 at once
	check(true, 3)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	check(false, 9) // the restarted server lost its state (no persistence)
}

func TestLocalEvictsLeastRecentlyUsed(t *testing.T) {
	clock := &testClock{now: t0}
	l := ratelimit.NewLocal(ratelimit.LocalOptions{MaxKeys: 2, Clock: clock})
	ctx := context.Background()
	lim := ratelimit.PerMinute(1, 0)
	for _, k := range []string{"a", "b", "a", "c"} { // "c" evicts "b", not the recently used "a"
		if _, err := l.Allow(ctx, k, lim); err != nil {
			t.Fatal(err)
		}
	}
	if l.Len() != 2 {
		t.Fatalf("Len = %d, want 2", l.Len())
	}
	for _, c := range []struct {
		key  string
		want bool
	}{{"a", false}, {"c", false}, {"b", true}} {
		if res, _ := l.Allow(ctx, c.key, lim); res.Allowed != c.want {
			t.Errorf("%s: allowed=%v, want %v", c.key, res.Allowed, c.want)
		}
	}
	// The same key under another limit is another bucket.
	if res, _ := l.Allow(ctx, "a", ratelimit.PerMinute(2, 0)); !res.Allowed {
		t.Errorf("a under another limit: %+v", res)
	}
}

// Local (one instance) gives exactly the answers Redis gives, for a random
// run of hits, costs and clock steps: one GCRA, two implementations.
func TestLocalMatchesRedis(t *testing.T) {
	r := newRig(t, backends[0], ratelimit.Options{})
	local := ratelimit.NewLocal(ratelimit.LocalOptions{Clock: r.clock})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, lim := range []ratelimit.Limit{ratelimit.PerSecond(10, 4), ratelimit.PerSecond(3, 2), ratelimit.PerMinute(7, 0)} {
		at := time.Duration(0)
		for i := range 300 {
			at += time.Duration(rng.Int64N(int64(lim.Period) / lim.Rate * 2))
			at = at.Truncate(us)
			n := 1 + rng.Int64N(lim.Burst+1)
			want := r.allow(at, "k", lim, n)
			got, err := local.AllowN(r.ctx, "k", lim, n)
			if err != nil || got != want {
				t.Fatalf("%+v, step %d (t0+%v, n=%d): local %+v, %v; redis %+v", lim, i, at, n, got, err, want)
			}
		}
	}
}
