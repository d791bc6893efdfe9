package ratelimit_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ratelimit"
)

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// allowed and refused build expected results.
func allowed(remaining int64, reset time.Duration) ratelimit.Result {
	return ratelimit.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func refused(remaining int64, retry, reset time.Duration) ratelimit.Result {
	return ratelimit.Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func TestFixedWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		lim := ratelimit.Fixed(3, time.Second)
		// Exactly 3 in the window [t0, t0+1s).
		r.expect(200*ms, "user:alice", lim, 1, allowed(2, 800*ms))
		r.expect(200*ms, "user:alice", lim, 1, allowed(1, 800*ms))
		r.expect(200*ms, "user:alice", lim, 1, allowed(0, 800*ms))
		r.expect(200*ms, "user:alice", lim, 1, refused(0, 800*ms, 800*ms))
		r.expect(time.Second-us, "user:alice", lim, 1, refused(0, us, us))
		// The next window starts exactly at t0+1s.
		r.expect(time.Second, "user:alice", lim, 1, allowed(2, time.Second))
		r.expect(time.Second, "user:alice", lim, 3, refused(2, time.Second, time.Second))
		r.expect(time.Second, "user:alice", lim, 2, allowed(0, time.Second))
		// Other keys are counted apart.
		r.expect(time.Second, "user:bob", lim, 3, allowed(0, time.Second))

		// Refused hits were not counted: the counters hold exactly the limit.
		for _, window := range []int64{t0.Unix(), t0.Unix() + 1} {
			k := r.key("user:alice}:fw:3:1000000:" + strconv.FormatInt(window, 10))
			if v, err := r.rdb.Get(r.ctx, k).Result(); err != nil || v != "3" {
				t.Fatalf("GET %s = %q, %v; want 3", k, v, err)
			}
		}
	})
}

func TestSlidingWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		lim := ratelimit.Sliding(3, time.Second)
		r.expect(0, "ip:10.0.0.1", lim, 1, allowed(2, time.Second))
		r.expect(100*ms, "ip:10.0.0.1", lim, 1, allowed(1, time.Second))
		r.expect(200*ms, "ip:10.0.0.1", lim, 1, allowed(0, time.Second))
		// Full until the oldest hit (t0) leaves the window at t0+1s, and
		// empty once the newest (t0+200ms) has, at t0+1.2s.
		r.expect(500*ms, "ip:10.0.0.1", lim, 1, refused(0, 500*ms, 700*ms))
		r.expect(time.Second-us, "ip:10.0.0.1", lim, 1, refused(0, us, 200*ms+us))
		r.expect(time.Second, "ip:10.0.0.1", lim, 1, allowed(0, time.Second))
		r.expect(time.Second, "ip:10.0.0.1", lim, 1, refused(0, 100*ms, time.Second))
		// At t0+1.2s the hits of t0+100ms and t0+200ms have left: room for 2.
		r.expect(1200*ms, "ip:10.0.0.1", lim, 2, allowed(0, time.Second))
		// Hits now at 1s, 1.2s, 1.2s: a hit of 2 waits for the second
		// oldest to leave (2.2s), a hit of 1 for the oldest (2s).
		r.expect(1300*ms, "ip:10.0.0.1", lim, 2, refused(0, 900*ms, 900*ms))
		r.expect(1300*ms, "ip:10.0.0.1", lim, 1, refused(0, 700*ms, 900*ms))

		k := r.key("ip:10.0.0.1}:sw:")
		if n, err := r.rdb.ZCard(r.ctx, k).Result(); err != nil || n != 3 {
			t.Fatalf("ZCARD = %d, %v; want 3 (refused hits are not logged)", n, err)
		}
	})
}

// Two hits at the same instant are two members of the log. Were the member
// just the timestamp, the second would overwrite the first and the third
// hit would be allowed.
func TestSlidingWindowSameInstant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		lim := ratelimit.Sliding(2, time.Minute)
		r.expect(0, "user:alice", lim, 1, allowed(1, time.Minute))
		r.expect(0, "user:alice", lim, 1, allowed(0, time.Minute))
		r.expect(0, "user:alice", lim, 1, refused(0, time.Minute, time.Minute))
		// A hit of cost 2 logs two members too.
		r.expect(0, "user:bob", lim, 2, allowed(0, time.Minute))
		r.expect(0, "user:bob", lim, 1, refused(0, time.Minute, time.Minute))
		// So do two limiters (two instances) at the same instant.
		other := ratelimit.New(r.rdb, ratelimit.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock})
		r.expect(0, "user:carol", lim, 1, allowed(1, time.Minute))
		if res, err := other.Allow(r.ctx, "user:carol", lim); err != nil || res != allowed(0, time.Minute) {
			t.Fatalf("second instance: %+v, %v", res, err)
		}
		// A hit of cost 1200 logs 1200 members (sent to ZADD in chunks).
		big := ratelimit.Sliding(1500, time.Minute)
		r.expect(0, "user:dave", big, 1200, allowed(300, time.Minute))
		r.expect(0, "user:dave", big, 301, refused(300, time.Minute, time.Minute))
		r.expect(0, "user:dave", big, 300, allowed(0, time.Minute))
		if n, err := r.rdb.ZCard(r.ctx, r.key("user:dave}:sw:")).Result(); err != nil || n != 1500 {
			t.Fatalf("ZCARD = %d, %v; want 1500", n, err)
		}
		for _, who := range []string{"alice", "bob", "carol"} {
			k := r.key("user:" + who + "}:sw:")
			if n, err := r.rdb.ZCard(r.ctx, k).Result(); err != nil || n != 2 {
				t.Fatalf("ZCARD %s = %d, %v; want 2", k, n, err)
			}
		}
	})
}

func TestGCRA(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		// A token every 100ms, 5 at once.
		lim := ratelimit.PerSecond(10, 4)
		for i := range int64(5) {
			r.expect(0, "user:alice", lim, 1, allowed(4-i, time.Duration(i+1)*100*ms))
		}
		r.expect(0, "user:alice", lim, 1, refused(0, 100*ms, 500*ms))
		r.expect(100*ms-us, "user:alice", lim, 1, refused(0, us, 400*ms+us))
		// Then one every 100ms, exactly.
		for i := range 6 {
			at := time.Duration(i+1) * 100 * ms
			r.expect(at, "user:alice", lim, 1, allowed(0, 500*ms))
			r.expect(at, "user:alice", lim, 1, refused(0, 100*ms, 500*ms))
		}
		// 300ms later 3 tokens are back: a hit costing 4 waits 100ms more,
		// one costing 3 takes them all.
		r.expect(900*ms, "user:alice", lim, 4, refused(3, 100*ms, 200*ms))
		r.expect(900*ms, "user:alice", lim, 3, allowed(0, 500*ms))
		// A second later the bucket is full again.
		r.expect(1900*ms, "user:alice", lim, 5, allowed(0, 500*ms))
	})
}

// A rate that does not divide the period (a token every 333333.3µs) is
// kept exactly: hits land on the microsecond each token arrives, for 30
// tokens, with no drift either way.
func TestGCRAExactRate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		lim := ratelimit.PerSecond(3, 2)
		r.expect(0, "k", lim, 1, allowed(2, 333334*us))
		r.expect(0, "k", lim, 1, allowed(1, 666667*us))
		r.expect(0, "k", lim, 1, allowed(0, time.Second))
		r.expect(0, "k", lim, 1, refused(0, 333334*us, time.Second))
		r.expect(333333*us, "k", lim, 1, refused(0, us, 666667*us))
		for k := int64(1); k <= 30; k++ {
			at := time.Duration((k*1_000_000+2)/3) * us // ceil(k/3 s) in µs
			if res := r.allow(at-us, "k", lim, 1); res.Allowed {
				t.Fatalf("token %d: allowed 1µs early, at t0+%v", k, at-us)
			}
			if res := r.allow(at, "k", lim, 1); !res.Allowed || res.Remaining != 0 {
				t.Fatalf("token %d: at t0+%v got %+v, want allowed", k, at, res)
			}
		}
	})
}

// Refused hits change nothing: after the limit is used up, many refused
// calls later, the next period starts with the full allowance.
func TestRefusedDoNotConsume(t *testing.T) {
	limits := []ratelimit.Limit{
		ratelimit.Fixed(5, time.Second),
		ratelimit.Sliding(5, time.Second),
		ratelimit.PerSecond(5, 4),
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		for _, lim := range limits {
			key := "k-" + lim.Algorithm.String()
			for range 5 {
				r.allow(0, key, lim, 1)
			}
			for i := range 50 {
				if res := r.allow(100*ms, key, lim, int64(1+i%5)); res.Allowed {
					t.Fatalf("%v: hit %d allowed past the limit", lim.Algorithm, i)
				}
			}
			if res := r.allow(time.Second, key, lim, 1); !res.Allowed || res.Remaining != 4 {
				t.Fatalf("%v: a period later got %+v, want allowed with 4 remaining", lim.Algorithm, res)
			}
		}
	})
}

// 50 goroutines × 20 calls at one frozen instant against a limit of 100:
// exactly 100 allowed, whatever the algorithm.
func TestConcurrentExactlyLimit(t *testing.T) {
	limits := []ratelimit.Limit{
		ratelimit.Fixed(100, time.Minute),
		ratelimit.Sliding(100, time.Minute),
		ratelimit.PerMinute(100, 99),
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		r.clock.Set(7 * time.Second)
		for _, lim := range limits {
			if got := r.hammer("hot", lim, 50, 20); got != 100 {
				t.Errorf("%v: %d allowed, want 100", lim.Algorithm, got)
			}
		}
	})
}

// noRedis is a Client that fails the test if it is used.
type noRedis struct {
	redis.Scripter // nil: any other method panics
	t              *testing.T
}

func (c noRedis) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.t.Errorf("EVALSHA sent for an invalid call")
	return c.Scripter.EvalSha(ctx, sha, keys, args...)
}

func TestInvalid(t *testing.T) {
	cases := []struct {
		name  string
		key   string
		limit ratelimit.Limit
		n     int64
		field string
	}{
		{"empty key", "", ratelimit.PerSecond(1, 0), 1, "key"},
		{"long key", strings.Repeat("k", 201), ratelimit.PerSecond(1, 0), 1, "key"},
		{"space in key", "user alice", ratelimit.PerSecond(1, 0), 1, "key"},
		{"hash tag in key", "a}b", ratelimit.PerSecond(1, 0), 1, "key"},
		{"star in key", "user:*", ratelimit.PerSecond(1, 0), 1, "key"},
		{"non-ASCII key", "üser", ratelimit.PerSecond(1, 0), 1, "key"},
		{"zero rate", "k", ratelimit.PerSecond(0, 0), 1, "limit.rate"},
		{"negative rate", "k", ratelimit.Fixed(-1, time.Second), 1, "limit.rate"},
		{"huge rate", "k", ratelimit.Fixed(1<<53+1, time.Second), 1, "limit.rate"},
		{"sliding rate too big", "k", ratelimit.Sliding(ratelimit.MaxSlidingRate+1, time.Second), 1, "limit.rate"},
		{"zero period", "k", ratelimit.Fixed(1, 0), 1, "limit.period"},
		{"negative period", "k", ratelimit.Sliding(1, -time.Second), 1, "limit.period"},
		{"sub-µs period", "k", ratelimit.Limit{Rate: 1, Period: 1500 * time.Nanosecond}, 1, "limit.period"},
		{"period too long", "k", ratelimit.Fixed(1, ratelimit.MaxPeriod+time.Second), 1, "limit.period"},
		{"negative burst", "k", ratelimit.PerSecond(1, -1), 1, "limit.burst"},
		{"negative burst, fixed", "k", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Rate: 1, Period: time.Second, Burst: -1}, 1, "limit.burst"},
		{"burst too big", "k", ratelimit.PerHour(1, 2_000_000), 1, "limit.burst"},
		{"unknown algorithm", "k", ratelimit.Limit{Algorithm: 7, Rate: 1, Period: time.Second}, 1, "limit.algorithm"},
		{"zero n", "k", ratelimit.PerSecond(1, 0), 0, "n"},
		{"negative n", "k", ratelimit.Fixed(1, time.Second), -1, "n"},
		{"n over burst+1", "k", ratelimit.PerSecond(100, 4), 6, "n"},
		{"n over the window's rate", "k", ratelimit.Fixed(5, time.Second), 6, "n"},
		{"n over the log's rate", "k", ratelimit.Sliding(5, time.Second), 6, "n"},
	}
	r := newRig(t, backends[0], ratelimit.Options{})
	stub := ratelimit.New(noRedis{t: t}, ratelimit.Options{Clock: r.clock, ScriptClock: r.clock})
	local := ratelimit.NewLocal(ratelimit.LocalOptions{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, allow := range map[string]func() (ratelimit.Result, error){
				"redis": func() (ratelimit.Result, error) { return r.lim.AllowN(r.ctx, c.key, c.limit, c.n) },
				"stub":  func() (ratelimit.Result, error) { return stub.AllowN(r.ctx, c.key, c.limit, c.n) },
				"local": func() (ratelimit.Result, error) { return local.AllowN(r.ctx, c.key, c.limit, c.n) },
			} {
				res, err := allow()
				var inv *ratelimit.InvalidError
				if !errors.Is(err, ratelimit.ErrInvalid) || !errors.As(err, &inv) || inv.Field != c.field {
					t.Fatalf("%s: AllowN = %+v, %v; want an InvalidError for %s", name, res, err, c.field)
				}
				if res != (ratelimit.Result{}) {
					t.Fatalf("%s: result %+v with an error", name, res)
				}
			}
			if err := ratelimit.Validate(c.key, c.limit, c.n); !errors.Is(err, ratelimit.ErrInvalid) {
				t.Fatalf("Validate = %v", err)
			}
		})
	}
	if keys := r.keys(); len(keys) != 0 {
		t.Fatalf("invalid calls wrote %v", keys)
	}
	if local.Len() != 0 {
		t.Fatalf("invalid calls made %d local buckets", local.Len())
	}
	// The edges that are valid.
	for _, c := range []struct {
		key   string
		limit ratelimit.Limit
		n     int64
	}{
		{strings.Repeat("k", 200), ratelimit.PerSecond(1, 0), 1},
		{"user:alice", ratelimit.PerSecond(100, 4), 5},
		{"a-b_c.d:E9", ratelimit.Fixed(5, time.Second), 5},
		{"k", ratelimit.Sliding(ratelimit.MaxSlidingRate, ratelimit.MaxPeriod), 1},
		{"k", ratelimit.PerHour(1, 1_250_000), 1},
		{"k", ratelimit.Limit{Rate: 1 << 53, Period: us}, 1},
	} {
		if _, err := r.lim.AllowN(r.ctx, c.key, c.limit, c.n); err != nil {
			t.Errorf("AllowN(%q, %+v, %d): %v", c.key, c.limit, c.n, err)
		}
	}
}

// After SCRIPT FLUSH every script is sent again and calls go on.
func TestNoScript(t *testing.T) {
	limits := []ratelimit.Limit{ratelimit.Fixed(5, time.Second), ratelimit.Sliding(5, time.Second), ratelimit.PerSecond(5, 4)}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		for round := range 3 {
			r.flushScripts()
			before := r.lim.ScriptReloads()
			for _, lim := range limits {
				if res := r.allow(0, "k-"+lim.Algorithm.String(), lim, 1); !res.Allowed || res.Remaining != int64(4-round) {
					t.Fatalf("round %d, %v: %+v", round, lim.Algorithm, res)
				}
			}
			if got := r.lim.ScriptReloads() - before; got != 3 {
				t.Fatalf("round %d: %d reloads, want 3", round, got)
			}
		}
	})
}

// A key holding something the limiter did not write is an error, and the
// call writes nothing — also with a Fallback, which only answers when Redis
// cannot be asked.
func TestForeignValues(t *testing.T) {
	limits := []ratelimit.Limit{ratelimit.Fixed(5, time.Second), ratelimit.Sliding(5, time.Second), ratelimit.PerSecond(5, 4)}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{Fallback: ratelimit.NewLocal(ratelimit.LocalOptions{})})
		for _, lim := range limits {
			key := "k-" + lim.Algorithm.String()
			r.allow(0, key, lim, 1)
			k := r.key(key + "}")

			// The wrong type: Redis' WRONGTYPE reply, unchanged.
			if err := r.rdb.Del(r.ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HSet(r.ctx, k, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			res, err := r.lim.Allow(r.ctx, key, lim)
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || res.Degraded {
				t.Fatalf("%v on a hash: %+v, %v; want the WRONGTYPE error", lim.Algorithm, res, err)
			}
			if h, _ := r.rdb.HGetAll(r.ctx, k).Result(); len(h) != 1 || h["f"] != "v" {
				t.Fatalf("%v: the hash changed: %v", lim.Algorithm, h)
			}

			// A string that is not a counter or a TAT (the log is a zset:
			// for it a string is the wrong type again).
			if err := r.rdb.Set(r.ctx, k, "12:x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			res, err = r.lim.Allow(r.ctx, key, lim)
			switch {
			case lim.Algorithm == ratelimit.SlidingWindow:
				if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Fatalf("sliding on a string: %+v, %v", res, err)
				}
			case !errors.Is(err, ratelimit.ErrCorrupt) || res.Degraded:
				t.Fatalf("%v on %q: %+v, %v; want ErrCorrupt", lim.Algorithm, "12:x", res, err)
			}
			if v, _ := r.rdb.Get(r.ctx, k).Result(); v != "12:x" {
				t.Fatalf("%v: the value changed to %q", lim.Algorithm, v)
			}
		}
	})
}

// TestSkewedLimitersAgree: two instances whose own clocks are an hour fast
// and an hour slow share one Redis. Every script reads the Redis server's
// clock, so a hit on the fast one is seen by the slow one as just now: the
// slow one neither lets a second hit into the same window nor makes the
// key wait for the hours between the two clocks.
func TestSkewedLimitersAgree(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		skewed := func(d time.Duration) ratelimit.Clock {
			return ratelimit.ClockFunc(func() time.Time { return time.Now().Add(d) })
		}
		r := newRig(t, b, ratelimit.Options{Clock: skewed(time.Hour)})
		fast, ctx := r.lim, r.ctx
		slow := ratelimit.New(r.rdb, ratelimit.Options{Prefix: r.prefix, Clock: skewed(-time.Hour)})
		for _, lim := range []ratelimit.Limit{
			ratelimit.PerSecond(1, 0),
			ratelimit.Sliding(1, time.Second),
			ratelimit.Fixed(1, time.Hour), // the two clocks are in other windows; Redis's in one
		} {
			key := "k-" + lim.Algorithm.String()
			if res, err := fast.Allow(ctx, key, lim); err != nil || !res.Allowed {
				t.Fatalf("%v, first hit on the fast instance: %+v, %v", lim.Algorithm, res, err)
			}
			res, err := slow.Allow(ctx, key, lim)
			if err != nil || res.Allowed || lim.Algorithm != ratelimit.FixedWindow && res.RetryAfter > time.Second {
				t.Errorf("%v, at once on the slow instance: %+v, %v; want refused, retry within the window", lim.Algorithm, res, err)
			}
		}
	})
}
