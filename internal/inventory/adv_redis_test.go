package inventory_test

// Adversarial tests of buy.lua's throttle states in per-window hashes and
// of the one-field bought event (issue 15): each is a concrete scenario
// with assertions that can fail.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

// gcraModel is an exact GCRA per buyer that never forgets a state: the
// oracle buy.lua's throttle must agree with, whatever its storage.
type gcraModel map[string][2]int64 // user -> TAT µs, rest in units

// take is gcra_take in integers: allowed and the debt after, or refused and
// the debt now.
func (m gcraModel) take(user string, now int64, th inventory.Throttle) (bool, int64) {
	rate, period, capacity := th.Rate, th.Period.Microseconds(), th.Burst+1
	var debt int64
	if s, ok := m[user]; ok && s[0] >= now {
		debt = (s[0]-now)*rate + s[1]
	}
	after := debt + period
	if after > capacity*period {
		return false, debt
	}
	rest := after % rate
	m[user] = [2]int64{now + (after-rest)/rate, rest}
	return true, after
}

// frozenClock returns the time last set; stepping it keeps it at least as
// far from its start as real time is, so that what Redis expires in real
// time (PX, PEXPIRE, relative to the script's time) has passed by the test's
// time too, and a test's time never runs slower than Redis's.
type frozenClock struct {
	mu    sync.Mutex
	start time.Time // real
	base  time.Time // the test's time at start
	extra time.Duration
	now   time.Time
	// mini, if set, is a miniredis whose time is the test's own: it moves
	// exactly as far as the test's time does, and real time does not count.
	mini *miniredis.Miniredis
}

func newFrozenClock(base time.Time) *frozenClock {
	c := &frozenClock{start: time.Now(), base: base}
	c.now = base
	return c
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// step moves the time on by at least d (and by the real time since the
// start), then, if snap > 0, on to the next multiple of snap plus off.
func (c *frozenClock) step(d time.Duration, snap time.Duration, off time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.extra += d
	real := time.Since(c.start)
	if c.mini != nil {
		real = 0
	}
	t := c.base.Add(real + c.extra)
	if snap > 0 {
		us := t.UnixMicro()
		s := snap.Microseconds()
		next := (us/s+1)*s + off.Microseconds()
		c.extra += time.Duration(next-us) * time.Microsecond
		t = time.UnixMicro(next)
	}
	if t.Before(c.now) {
		t = c.now
	}
	if c.mini != nil {
		c.mini.FastForward(t.Sub(c.now))
	}
	c.now = t
	return t
}

// TestAdvThrottleDifferential: on identical random sequences of buys and
// times (steps of µs, ms, an emission interval, half and whole windows,
// landings just before, on and just after a window's edge; batches with
// the same buyer several times, buyers of several buckets), buy.lua's
// throttle decides as the old per-key implementation (ratelimit's gcra.lua,
// the same gcra_take on one key per buyer) and as an exact model: the same
// accept/refuse and the same retry debts.
func TestAdvThrottleDifferential(t *testing.T) {
	limits := []ratelimit.Limit{
		ratelimit.PerSecond(2, 2),
		ratelimit.PerSecond(1, 0), // the longest wait is just under the window (1024 ms)
		{Algorithm: ratelimit.GCRA, Rate: 3, Period: 1500 * time.Millisecond, Burst: 1},
		{Algorithm: ratelimit.GCRA, Rate: 1, Period: time.Microsecond, Burst: 0}, // tiny
		{Algorithm: ratelimit.GCRA, Rate: 1000000, Period: time.Second, Burst: 5},
		{Algorithm: ratelimit.GCRA, Rate: 7, Period: 3 * time.Second, Burst: 3},
		ratelimit.PerMinute(1, 3),
	}
	buckets := make([]inventory.Throttle, len(limits))
	for i, l := range limits {
		b, err := throttleOf(l)
		if err != nil {
			t.Fatal(err)
		}
		buckets[i] = b
	}
	const users = 6
	forEachBackend(t, func(t *testing.T, b backend) {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 15))
				clock := newFrozenClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(1e9)) * time.Microsecond))
				if b.name == "miniredis" {
					// A miniredis of its own, whose expiries follow the
					// test's time exactly (the shared one's follow real time).
					b.client = func(t testing.TB) redis.UniversalClient {
						c, m := redistest.Mini(t)
						clock.mini = m
						return c
					}
				}
				r := newRig(t, b, inventory.Options{Clock: clock, ScriptClock: clock})
				old := ratelimit.New(r.rdb, ratelimit.Options{Prefix: r.prefix + "-old", ScriptClock: clock})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 1e9, Items: []inventory.Item{{SKU: "A", Stock: 1e9}}})
				model := gcraModel{}
				// Each buyer keeps one bucket (a buyer's bucket changing is
				// another test's subject); buyers 0 and 1 share one.
				bucketOf := make([]int, users)
				for u := range bucketOf {
					bucketOf[u] = rng.IntN(len(buckets))
				}
				bucketOf[1] = bucketOf[0]
				diffs := 0
				for step := 0; step < 150 && diffs < 5; step++ {
					u0 := rng.IntN(users)
					w := time.Duration(inventory.ThrottleWindow(buckets[bucketOf[u0]])) * time.Millisecond
					switch k := rng.IntN(9); k {
					case 0:
						clock.step(0, 0, 0)
					case 1:
						clock.step(time.Duration(rng.IntN(1000))*time.Microsecond, 0, 0)
					case 2:
						clock.step(time.Duration(rng.IntN(5000))*time.Microsecond, 0, 0)
					case 3:
						b := buckets[bucketOf[u0]]
						clock.step(time.Duration(b.Period.Microseconds()/b.Rate)*time.Microsecond, 0, 0)
					case 4:
						clock.step(w/2, 0, 0)
					case 5:
						clock.step(w, 0, 0)
					default: // land near the next edge of u0's window
						clock.step(0, w, time.Duration(k-7)*time.Microsecond)
					}
					now := clock.Now().UnixMicro()
					n := 1 + rng.IntN(4)
					reqs := make([]inventory.BuyRequest, n)
					who := make([]int, n)
					for i := range reqs {
						u := u0
						if i > 0 && rng.IntN(2) == 0 {
							u = rng.IntN(users)
						}
						who[i] = u
						bk := buckets[bucketOf[u]]
						reqs[i] = inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("u", u), Lines: lines("A", 1), Throttle: &bk}
					}
					res := r.eng.BuyMany(r.ctx, reqs)
					for i, req := range reqs {
						bk := buckets[bucketOf[who[i]]]
						ok, debt := model.take(req.UserID, now, bk)
						rb, err := limits[bucketOf[who[i]]].Bucket()
						if err != nil {
							t.Fatal(err)
						}
						want := rb.Result(ok, debt, 1)
						lr, err := old.Allow(r.ctx, req.UserID, limits[bucketOf[who[i]]])
						if err != nil {
							t.Fatalf("old Allow: %v", err)
						}
						var th *inventory.ThrottledError
						gotOK, gotRetry := res[i].Err == nil, time.Duration(0)
						if errors.As(res[i].Err, &th) {
							gotRetry = th.RetryAfter
						} else if res[i].Err != nil {
							t.Fatalf("step %d buy %d: %v", step, i, res[i].Err)
						}
						// The old keys expire by Redis's real clock, PX a ms or
						// two on: only a miniredis on the test's time holds
						// them exactly as long as the test's time says.
						if clock.mini != nil && (lr.Allowed != want.Allowed || lr.RetryAfter != want.RetryAfter) {
							t.Errorf("step %d: the old implementation and the model disagree: %+v vs %+v", step, lr, want)
						}
						if gotOK != want.Allowed || gotRetry != want.RetryAfter {
							diffs++
							t.Errorf("step %d (now %d µs, window %v) buy %d of %d by %s, bucket %+v: allowed %v retry %v; old implementation: allowed %v retry %v",
								step, now, w, i+1, n, req.UserID, bk, gotOK, gotRetry, lr.Allowed, lr.RetryAfter)
						}
					}
				}
			})
		}
	})
}

// TestAdvThrottleClockStepBack: the script's clock (Redis's TIME) steps
// back by a few tens of ms, as after a failover to a replica whose clock
// is behind or an NTP step. A buyer who has just spent the whole burst of
// PerSecond(1, 0) must still be refused: its TAT is further away than
// ever. The old per-key state refuses it (the debt only grows); a state
// filed in the window its expiry falls in is not found when the step takes
// "now" back across a window's edge, and the buyer gets a fresh bucket.
func TestAdvThrottleClockStepBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, bucket := throttledSale(t, b, ratelimit.PerSecond(1, 0))
		w := inventory.ThrottleWindow(bucket) // 1024 ms
		// 30 ms after a window's edge: the TAT (now + 1 s) is in the next window.
		edge := (r.clock.Now().UnixMilli()/w + 1) * w
		r.clock.Set(time.UnixMilli(edge + 30))
		req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}
		if _, err := r.eng.BuyWith(r.ctx, req); err != nil {
			t.Fatalf("first buy: %v", err)
		}
		if _, err := r.eng.BuyWith(r.ctx, req); !errors.Is(err, inventory.ErrThrottled) {
			t.Fatalf("second buy at once: %v, want throttled", err)
		}
		r.clock.Set(time.UnixMilli(edge - 2)) // 32 ms back
		if _, err := r.eng.BuyWith(r.ctx, req); !errors.Is(err, inventory.ErrThrottled) {
			t.Errorf("a buy 32 ms earlier by the script's clock: %v, want throttled (the TAT is ~1 s ahead)", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 99 {
			t.Errorf("remaining %d, want 99: the buyer bought more than PerSecond(1, 0) allows", rem)
		}
	})
}

// TestAdvThrottleBatchIndependence: a buyer's throttle decision depends
// on the buyer's history only, not on who else is in the batch. Buyer x
// has spent a PerHour(1, 0) bucket; x's next buy, under PerSecond(1, 0),
// is decided the same whether or not buyer y (PerHour) shares the batch.
// (The old per-key state refuses both: the TAT is an hour ahead.)
func TestAdvThrottleBatchIndependence(t *testing.T) {
	hour, err := throttleOf(ratelimit.PerHour(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	second, err := throttleOf(ratelimit.PerSecond(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		outcome := func(withY bool) error {
			r := newRig(t, b, inventory.Options{})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
			if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "x", Lines: lines("A", 1), Throttle: &hour}); err != nil {
				t.Fatalf("x's first buy: %v", err)
			}
			r.clock.Set(r.clock.Now().Add(5 * time.Second))
			reqs := []inventory.BuyRequest{{SaleID: "s1", UserID: "x", Lines: lines("A", 1), Throttle: &second}}
			if withY {
				reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: "y", Lines: lines("A", 1), Throttle: &hour})
			}
			return r.eng.BuyMany(r.ctx, reqs)[0].Err
		}
		alone, batched := outcome(false), outcome(true)
		if errors.Is(alone, inventory.ErrThrottled) != errors.Is(batched, inventory.ErrThrottled) {
			t.Errorf("x's buy alone: %v; in a batch with y: %v", alone, batched)
		}
	})
}

// TestAdvThrottleCorruptWindowField: a junk state in the next window's
// hash, beside a valid one in this window's, is ErrCorrupt for that buyer
// only; the other buys of the batch run, and the junk buyer's buy writes
// nothing (no stock, no order, the junk field left as it was).
func TestAdvThrottleCorruptWindowField(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, bucket := throttledSale(t, b, ratelimit.PerSecond(5, 5))
		buy := func(u string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "s1", UserID: u, Lines: lines("A", 1), Throttle: &bucket}
		}
		if _, err := r.eng.BuyWith(r.ctx, buy("u1")); err != nil {
			t.Fatal(err)
		}
		keys := r.eng.ThrottleKeys("s1", bucket, r.clock.Now())
		for _, bad := range []string{"junk", "12:", ":3", "-5:0", "1.5:0", "1e3:0"} {
			if err := r.rdb.HSet(r.ctx, keys[1], "u1", bad).Err(); err != nil {
				t.Fatal(err)
			}
			res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{buy("u1"), buy("u2")})
			if !errors.Is(res[0].Err, inventory.ErrCorrupt) {
				t.Errorf("u1 with %q in the next window: %v, want ErrCorrupt", bad, res[0].Err)
			}
			if res[1].Err != nil {
				t.Errorf("u2 beside it: %v", res[1].Err)
			}
			if v, _ := r.rdb.HGet(r.ctx, keys[1], "u1").Result(); v != bad {
				t.Errorf("the junk state %q became %q", bad, v)
			}
			if err := r.rdb.HDel(r.ctx, keys[1], "u2").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if h := r.held("s1")["u1|A"]; h != 1 {
			t.Errorf("u1 holds %d, want 1: a buy with a corrupt throttle state sold", h)
		}
	})
}

// TestAdvThrottleWrongTypeWindowKey: a window key holding a string (a
// caller's own data under Key, or a stray write) is corrupt for the buys
// that read it; a buy with no throttle coalesced into the same batch is
// not refused for it. (The old per-key state read with MGET, which
// answers nil for a key of another type.)
func TestAdvThrottleWrongTypeWindowKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, bucket := throttledSale(t, b, ratelimit.PerSecond(5, 5))
		if err := r.rdb.Set(r.ctx, r.eng.ThrottleKeys("s1", bucket, r.clock.Now())[1], "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
			{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket},
			{SaleID: "s1", UserID: "u2", Lines: lines("A", 1)},
		})
		if res[0].Err != nil && !errors.Is(res[0].Err, inventory.ErrCorrupt) {
			t.Errorf("throttled buy: %v, want success or ErrCorrupt", res[0].Err)
		}
		if res[1].Err != nil {
			t.Errorf("unthrottled buy in the same batch: %v", res[1].Err)
		}
	})
}

// TestAdvThrottleWindowTTLs: every window hash a batch writes expires, no
// later than four windows on (two windows after its own end), even when
// the batch writes more than the script's chunk of fields into it (600
// buyers, 1200 values) and two windows at once.
func TestAdvThrottleWindowTTLs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 10000}}})
		bucket, err := throttleOf(ratelimit.PerSecond(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		w := inventory.ThrottleWindow(bucket)
		// 500 ms into a window: a TAT 1 s on is in the next window.
		r.clock.Set(time.UnixMilli((r.clock.Now().UnixMilli()/w+1)*w + 500))
		var reqs []inventory.BuyRequest
		for i := range 600 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("u", i), Lines: lines("A", 1), Throttle: &bucket})
		}
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Fatalf("buy %d: %v", i, res.Err)
			}
		}
		found := 0
		for _, k := range r.eng.ThrottleKeys("s1", bucket, r.clock.Now()) {
			n, err := r.rdb.HLen(r.ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				continue
			}
			found += int(n)
			ttl, err := r.rdb.PTTL(r.ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 || ttl > time.Duration(4*w+1)*time.Millisecond {
				t.Errorf("%s (%d fields): PTTL %v, want in (0, %d ms]", k, n, ttl, 4*w+1)
			}
		}
		if found != 600 {
			t.Errorf("%d states in the two windows, want 600", found)
		}
	})
}

// TestAdvBoughtEventRecords: the one-field bought event decodes to the
// order the orders hash holds, for idempotency keys with '|' (allowed: the
// key comes last in a record), '=', ',' and an empty key; and a stream that
// holds an entry of the old shape, then new ones, decodes entry by entry.
func TestAdvBoughtEventRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}, {SKU: "B.x-1", Stock: -1}}})
		// An entry of the shape buy.lua wrote before the one-field event.
		oldID := inventory.NewOrderID("s1")
		at := r.clock.Now().UnixMilli() - 5
		if err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.eng.EventsKey("s1"), Values: []any{
			"type", "bought", "order", oldID, "user", "old|user", "items", "A=2", "key", "k|old", "at", fmt.Sprint(at),
		}}).Err(); err != nil {
			t.Fatal(err)
		}
		keys := []string{"a|b", "|", "||x|", "", "k=1,A=2", "~!@#$%^&*()"}
		want := map[string]inventory.Order{}
		for i, k := range keys {
			rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("user_", i), IdempotencyKey: k,
				Lines: lines("A", 1, "B.x-1", 2)})
			if err != nil {
				t.Fatalf("buy with key %q: %v", k, err)
			}
			o, err := r.eng.Order(r.ctx, rc.Order.ID)
			if err != nil {
				t.Fatal(err)
			}
			want[o.ID] = o
		}
		evs := r.events("s1")
		seen := 0
		for _, ev := range evs {
			if ev.Type != inventory.EventBought {
				continue
			}
			if ev.Order.ID == oldID {
				if ev.Order.UserID != "old|user" || ev.Order.IdempotencyKey != "k|old" || ev.At.UnixMilli() != at {
					t.Errorf("old entry decoded as %+v", ev.Order)
				}
				continue
			}
			seen++
			o, ok := want[ev.Order.ID]
			if !ok {
				t.Errorf("event of an unknown order %+v", ev.Order)
				continue
			}
			if fmt.Sprint(o) != fmt.Sprint(ev.Order) || !ev.At.Equal(o.CreatedAt) {
				t.Errorf("event order %+v at %v, want %+v", ev.Order, ev.At, o)
			}
		}
		if seen != len(keys) {
			t.Errorf("%d bought events, want %d", seen, len(keys))
		}
	})
}

// TestAdvThrottleLongWindowOnMiniredis: a buy with a throttle whose window
// is long (PerMinute(1, 0): 65536 ms) on miniredis, the embedded default
// server, allocates no more than a few MB. buy.lua files its writes in a
// Lua table indexed by the window's number (now / window, some 2.7e7 for
// this window): gopher-lua, miniredis's Lua, keeps integer keys below 2^26
// in a table's array part, filling every slot below the key, so one buy
// allocates hundreds of MB (real Redis's Lua keeps a sparse key in the
// hash part).
func TestAdvThrottleLongWindowOnMiniredis(t *testing.T) {
	for _, l := range []ratelimit.Limit{ratelimit.PerMinute(1, 0), ratelimit.PerMinute(2, 5), ratelimit.PerHour(30, 0)} {
		t.Run(l.String(), func(t *testing.T) {
			c, _ := redistest.Mini(t)
			// Real time: the window's number is what it is in production.
			eng := inventory.New(c, inventory.Options{Prefix: redistest.Prefix(t, c)})
			ctx := t.Context()
			if err := eng.CreateSale(ctx, inventory.Sale{ID: "s1", PerUserLimit: 10, Items: []inventory.Item{{SKU: "A", Stock: 10}}}); err != nil {
				t.Fatal(err)
			}
			bucket, err := throttleOf(l)
			if err != nil {
				t.Fatal(err)
			}
			req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}
			// A buy without a throttle first, so that what is measured is the
			// throttle's part only.
			if _, err := eng.BuyWith(ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u0", Lines: lines("A", 1)}); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := eng.BuyWith(ctx, req); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			w := inventory.ThrottleWindow(bucket)
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("one throttled buy (window %d ms, window number %d) allocated %d MB", w, time.Now().UnixMilli()/w, got>>20)
			}
		})
	}
}

// TestAdvLargeHeldCountOnMiniredis: a buy that leaves a buyer holding many
// units (a per-user limit of a million, one order of 5e6... here 4e6 units)
// allocates no more than a few MB on miniredis. buy.lua memoizes the held
// counts it formats in a table indexed by the count: gopher-lua fills every
// array slot below an integer key under 2^26.
func TestAdvLargeHeldCountOnMiniredis(t *testing.T) {
	c, _ := redistest.Mini(t)
	eng := inventory.New(c, inventory.Options{Prefix: redistest.Prefix(t, c)})
	ctx := t.Context()
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "s1", PerUserLimit: 1e8, Items: []inventory.Item{{SKU: "A", Stock: 1e8}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.BuyWith(ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u0", Lines: lines("A", 1)}); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := eng.BuyWith(ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 4000000)}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("one buy of 4e6 units allocated %d MB", got>>20)
	}
}

// TestAdvBatchEqualsSequence: a batch runs its buys in order as if each
// were alone: random batches mixing repeats (idempotency keys and resent
// order ids), purchase tokens, throttled and unthrottled buyers, the same
// buyer several times, short stock and the per-user limit, are answered
// as the same buys sent one at a time (at the same script time) on a twin
// sale; the stock, quotas and events end alike.
func TestAdvBatchEqualsSequence(t *testing.T) {
	bucket, err := throttleOf(ratelimit.PerSecond(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		rng := rand.New(rand.NewPCG(7, 15))
		batch, seq := newRig(t, b, inventory.Options{}), newRig(t, b, inventory.Options{})
		seq.clock = batch.clock
		seq.eng = inventory.New(seq.rdb, inventory.Options{Prefix: seq.prefix, Clock: batch.clock, ScriptClock: batch.clock})
		sale := inventory.Sale{ID: "s1", PerUserLimit: 40, Items: []inventory.Item{{SKU: "A", Stock: 150}, {SKU: "B", Stock: 40}}}
		batch.create(sale)
		seq.create(sale)
		describe := func(rc inventory.Receipt, err error) string {
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("ok items %v remaining %v replayed %v retried %v", rc.Order.Items, rc.Remaining, rc.Replayed, rc.Retried)
		}
		var sent []inventory.BuyRequest // earlier requests, to resend
		for round := 0; round < 60; round++ {
			n := 1 + rng.IntN(6)
			reqs := make([]inventory.BuyRequest, n)
			for i := range reqs {
				if len(sent) > 0 && rng.IntN(5) == 0 {
					reqs[i] = sent[rng.IntN(len(sent))] // a resend: same order id, key, token
					continue
				}
				u := rng.IntN(6)
				req := inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("u", u), IgnoreSoldOutFlags: true,
					OrderID: inventory.NewOrderID("s1")}
				if rng.IntN(2) == 0 {
					req.Lines = lines("A", 1+rng.IntN(2))
				} else {
					req.Lines = lines("A", 1, "B", 1)
				}
				if rng.IntN(3) == 0 {
					req.IdempotencyKey = fmt.Sprint("k", rng.IntN(3))
				}
				if rng.IntN(3) == 0 {
					req.Token, req.TokenTTL = fmt.Sprint("t", round, "-", rng.IntN(2)), time.Minute
				}
				if u < 3 {
					req.Throttle = &bucket
				}
				reqs[i] = req
			}
			sent = append(sent, reqs...)
			res := batch.eng.BuyMany(batch.ctx, reqs)
			for i, req := range reqs {
				rc, err := seq.eng.BuyWith(seq.ctx, req)
				got, want := describe(res[i].Receipt, res[i].Err), describe(rc, err)
				if got != want {
					t.Errorf("round %d buy %d of %d (%s %v key %q token %q throttled %v): in the batch %s; alone %s",
						round, i+1, n, req.UserID, req.Lines, req.IdempotencyKey, req.Token, req.Throttle != nil, got, want)
				}
			}
			batch.clock.Set(batch.clock.Now().Add(time.Duration(rng.IntN(1500)) * time.Millisecond))
		}
		if a, b := fmt.Sprint(batch.remaining("s1")), fmt.Sprint(seq.remaining("s1")); a != b {
			t.Errorf("remaining: batched %s, one at a time %s", a, b)
		}
		if a, b := fmt.Sprint(batch.held("s1")), fmt.Sprint(seq.held("s1")); a != b {
			t.Errorf("held: batched %s, one at a time %s", a, b)
		}
		if a, b := len(batch.events("s1")), len(seq.events("s1")); a != b {
			t.Errorf("events: batched %d, one at a time %d", a, b)
		}
	})
}
