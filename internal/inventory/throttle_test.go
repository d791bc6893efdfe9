package inventory_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
)

// TestBuyThrottle: a buyer's throttle is checked in the buy's own script,
// in order within a batch, per buyer and sale; a refused buy changes
// nothing and says when to retry.
func TestBuyThrottle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		r.create(inventory.Sale{ID: "s2", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		bucket, err := throttleOf(ratelimit.PerSecond(2, 2)) // 3 at once, then 2 a second
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]inventory.BuyRequest, 5)
		for i := range reqs {
			reqs[i] = inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}
		}
		reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), Throttle: &bucket})
		res := r.eng.BuyMany(r.ctx, reqs)
		var throttled *inventory.ThrottledError
		for i, want := range []bool{false, false, false, true, true, false} {
			got := errors.As(res[i].Err, &throttled)
			if got != want || (!want && res[i].Err != nil) {
				t.Errorf("buy %d: %v, want throttled %v", i, res[i].Err, want)
			}
			if got && (throttled.RetryAfter <= 0 || throttled.RetryAfter > 500*time.Millisecond) {
				t.Errorf("buy %d: retry after %v, want (0, 500ms]", i, throttled.RetryAfter)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != 96 {
			t.Errorf("remaining %d, want 96: a throttled buy sold", rem)
		}
		// Another sale has its own bucket; time refills this one.
		if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s2", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}); err != nil {
			t.Errorf("u1's first buy of s2: %v", err)
		}
		if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}); !errors.Is(err, inventory.ErrThrottled) {
			t.Errorf("u1 again at once: %v, want throttled", err)
		}
		r.clock.Set(r.clock.Now().Add(500 * time.Millisecond))
		if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}); err != nil {
			t.Errorf("u1 half a second later: %v", err)
		}
		// A nonsense bucket is refused before Redis.
		_, err = r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u3", Lines: lines("A", 1), Throttle: &inventory.Throttle{}})
		if !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("empty bucket: %v, want ErrInvalid", err)
		}
		// A throttle state the engine did not write is corrupt, not a pass.
		if err := r.rdb.HSet(r.ctx, r.eng.ThrottleKeys("s1", bucket, r.clock.Now())[0], "u4", "junk").Err(); err != nil {
			t.Fatal(err)
		}
		_, err = r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u4", Lines: lines("A", 1), Throttle: &bucket})
		if !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("junk throttle state: %v, want ErrCorrupt", err)
		}
	})
}

// TestThrottleStateAcrossWindows: a buyer's throttle state is kept in the
// hash of the window its TAT passes in, and found from the window before:
// a burst spent just before a window's end, or whose TAT passes in the
// next window, still throttles the next buy. The hashes expire once their
// states have passed, so the state of buyers gone is not kept.
func TestThrottleStateAcrossWindows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		bucket, err := throttleOf(ratelimit.PerSecond(2, 2)) // 3 at once, then 2 a second: a TAT 1.5 s ahead
		if err != nil {
			t.Fatal(err)
		}
		const window = 2048 // ms: the power of two past 1.5 s (throttleWindow)
		base := r.clock.Now().UnixMilli()/window*window + 10*window
		var hashes, users []string // the hashes the states can be in; the buyers
		for _, c := range []struct {
			name      string
			at, after int64 // ms past a window's start: the burst, the next buy
		}{
			{"TAT in the next window", 1000, 1001},
			{"burst at a window's end, next buy in the next window", window - 10, window + 5},
		} {
			user := fmt.Sprintf("u%d", base)
			users = append(users, user)
			base += 4 * window
			r.clock.Set(time.UnixMilli(base + c.at))
			req := inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines("A", 1), Throttle: &bucket}
			for i := range 3 {
				if _, err := r.eng.BuyWith(r.ctx, req); err != nil {
					t.Fatalf("%s: buy %d of the burst: %v", c.name, i+1, err)
				}
			}
			hashes = append(hashes, r.eng.ThrottleKeys("s1", bucket, r.clock.Now())...)
			r.clock.Set(time.UnixMilli(base + c.after))
			if _, err := r.eng.BuyWith(r.ctx, req); !errors.Is(err, inventory.ErrThrottled) {
				t.Errorf("%s: the buy after the burst: %v, want ErrThrottled", c.name, err)
			}
			r.clock.Set(time.UnixMilli(base + c.at + 500))
			if _, err := r.eng.BuyWith(r.ctx, req); err != nil {
				t.Errorf("%s: half a second after the burst: %v", c.name, err)
			}
		}
		// Every hash holding states expires, within four windows (two
		// after the state's, unless a buy unlinks it first).
		found := 0
		for _, k := range hashes {
			ttl, err := r.rdb.PTTL(r.ctx, k).Result()
			if err != nil || ttl == -2*time.Nanosecond { // no such key
				continue
			}
			found++
			if ttl <= 0 || ttl > 4*window*time.Millisecond+time.Millisecond {
				t.Errorf("%s: PTTL %v; want (0, four windows]", k, ttl)
			}
		}
		if found == 0 {
			t.Errorf("none of the hashes %v holds a state", hashes)
		}
		for _, u := range users {
			if n, err := r.rdb.Exists(r.ctx, r.key("s1", "throttle:"+u)).Result(); err != nil || n != 0 {
				t.Errorf("a per-buyer throttle key of %s: %d, %v; want none", u, n, err)
			}
		}
	})
}

// TestThrottlePassedWindowIsUnlinked: a window's hash is kept one window
// past its end (for a clock that steps back), and the first buy that files
// a state after that removes it (buy.lua UNLINKs it, so that Redis frees
// its fields in a background thread; left to its expiry, a busy sale's hash
// is freed in Redis's one thread). Its expiry, two windows after its end,
// is what removes it when no buy comes.
func TestThrottlePassedWindowIsUnlinked(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		bucket, err := throttleOf(ratelimit.PerSecond(2, 2)) // a TAT 0.5 s ahead after one buy
		if err != nil {
			t.Fatal(err)
		}
		w := inventory.ThrottleWindow(bucket)
		start := (r.clock.Now().UnixMilli()/w + 10) * w
		buy := func(user string, at int64) {
			t.Helper()
			r.clock.Set(time.UnixMilli(at))
			req := inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines("A", 1), Throttle: &bucket}
			if _, err := r.eng.BuyWith(r.ctx, req); err != nil {
				t.Fatalf("%s's buy: %v", user, err)
			}
		}
		buy("u1", start+100) // its state passes in the window of start
		passed := r.eng.ThrottleKeys("s1", bucket, time.UnixMilli(start))[0]
		if n, err := r.rdb.HLen(r.ctx, passed).Result(); err != nil || n != 1 {
			t.Fatalf("%s after the first buy: %d fields, %v; want 1", passed, n, err)
		}
		ttl, err := r.rdb.PTTL(r.ctx, passed).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= time.Duration(2*w)*time.Millisecond || ttl > time.Duration(3*w-100+1)*time.Millisecond {
			t.Errorf("%s: PTTL %v, want its expiry two windows after the window's end", passed, ttl)
		}
		buy("u2", start+w+100) // the next window: kept
		if n, err := r.rdb.HLen(r.ctx, passed).Result(); err != nil || n != 1 {
			t.Errorf("%s after a buy in the next window: %d fields, %v; want it kept", passed, n, err)
		}
		buy("u3", start+2*w+100) // the one after: unlinked
		if n, err := r.rdb.Exists(r.ctx, passed).Result(); err != nil || n != 0 {
			t.Errorf("%s after a buy two windows on: exists %d, %v; want it unlinked", passed, n, err)
		}
		if n, err := r.rdb.HLen(r.ctx, r.eng.ThrottleKeys("s1", bucket, time.UnixMilli(start+2*w))[0]).Result(); err != nil || n != 1 {
			t.Errorf("the last window's hash: %d fields, %v; want u3's state", n, err)
		}
	})
}

// TestThrottleClockStepBackOfAWindow: the script's clock (Redis's TIME)
// may step back, after a failover to a server whose clock is behind or an
// NTP step. A buyer's state filed before the step is still found after a
// step back of up to a window (the script reads the window now falls in
// and the next two): a buyer who has just spent PerSecond(1, 0)'s burst,
// whose TAT is filed in the next window, is refused at the first ms of
// the window before (a step back of a whole window and 30 ms), as the old
// per-key state refused it (a debt only grows when the clock goes back).
func TestThrottleClockStepBackOfAWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, bucket := throttledSale(t, b, ratelimit.PerSecond(1, 0))
		const window = 1024 // ms: the power of two past 1 s (throttleWindow)
		edge := r.clock.Now().UnixMilli()/window*window + 10*window
		r.clock.Set(time.UnixMilli(edge + 30)) // the TAT, ~edge+1030, is in the next window
		req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}
		if _, err := r.eng.BuyWith(r.ctx, req); err != nil {
			t.Fatalf("first buy: %v", err)
		}
		for _, back := range []int64{1, 31, window, window + 30} {
			r.clock.Set(time.UnixMilli(edge + 30 - back))
			_, err := r.eng.BuyWith(r.ctx, req)
			var te *inventory.ThrottledError
			if !errors.As(err, &te) {
				t.Errorf("a buy %d ms earlier by the script's clock: %v, want throttled", back, err)
				continue
			}
			if want := time.Duration(1000+back) * time.Millisecond; te.RetryAfter < want {
				t.Errorf("a buy %d ms earlier: retry after %v, want at least %v", back, te.RetryAfter, want)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != 99 {
			t.Errorf("remaining %d, want 99: the buyer bought more than PerSecond(1, 0) allows", rem)
		}
	})
}

// throttleOf is the buy throttle of a GCRA limit, refused as ratelimit
// refuses the limit.
// throttledSale is a rig with sale s1 (sku A, 100 units, per-user limit
// 100) and the throttle of l.
func throttledSale(t *testing.T, b backend, l ratelimit.Limit) (*rig, inventory.Throttle) {
	t.Helper()
	r := newRig(t, b, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	th, err := throttleOf(l)
	if err != nil {
		t.Fatal(err)
	}
	return r, th
}

func throttleOf(l ratelimit.Limit) (inventory.Throttle, error) {
	if _, err := l.Bucket(); err != nil {
		return inventory.Throttle{}, err
	}
	return inventory.Throttle{Rate: l.Rate, Period: l.Period, Burst: l.Burst}, nil
}

// TestThrottleFreshBuyersOfABatch: buy.lua takes gcra_take's answer for a
// buyer with no state once per call and throttle, not once per buy (the
// common case of a batch: every buyer's first buy in a while). In one batch
// of fresh buyers of two buckets that share a window, interleaved, one of
// them twice, each buyer's stored state is exactly the one it gets buying
// alone, each in a call of its own; and every buyer's next buys, in one
// more batch, are decided as the exact model decides them.
func TestThrottleFreshBuyersOfABatch(t *testing.T) {
	slow, err := throttleOf(ratelimit.PerSecond(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	slower, err := throttleOf(ratelimit.PerSecond(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if inventory.ThrottleWindow(slow) != inventory.ThrottleWindow(slower) {
		t.Fatalf("the buckets' windows differ: %d and %d ms", inventory.ThrottleWindow(slow), inventory.ThrottleWindow(slower))
	}
	bucketOf := func(u string) *inventory.Throttle {
		if u[0] == 'a' {
			return &slow
		}
		return &slower
	}
	users := []string{"a1", "b1", "a2", "a1", "b2", "a3"}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		for _, s := range []string{"batch", "alone"} {
			r.create(inventory.Sale{ID: s, PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
		}
		buy := func(sale, u string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: sale, UserID: u, Lines: lines("A", 1), Throttle: bucketOf(u)}
		}
		now := r.clock.Now()
		model := gcraModel{}
		var reqs []inventory.BuyRequest
		for _, u := range users {
			reqs = append(reqs, buy("batch", u))
			if ok, _ := model.take(u, now.UnixMicro(), *bucketOf(u)); !ok {
				t.Fatalf("the model refuses %s's first buys", u)
			}
		}
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Fatalf("batch buy %d by %s: %v", i, users[i], res.Err)
			}
		}
		for _, u := range users {
			if _, err := r.eng.BuyWith(r.ctx, buy("alone", u)); err != nil {
				t.Fatalf("%s's buy alone: %v", u, err)
			}
		}
		// (a buyer's states: the latest is the buyer's, an earlier one may
		// still be in another window's hash)
		states := func(sale, u string) []string {
			t.Helper()
			var found []string
			for _, k := range r.eng.ThrottleKeys(sale, *bucketOf(u), now) {
				v, err := r.rdb.HGet(r.ctx, k, u).Result()
				if err == nil {
					found = append(found, v)
				} else if !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
			}
			if len(found) == 0 {
				t.Fatalf("%s has no state in %s", u, sale)
			}
			return found
		}
		for _, u := range users {
			if got, want := states("batch", u), states("alone", u); !slices.Equal(got, want) {
				t.Errorf("%s's states after the batch: %q; after buying alone: %q", u, got, want)
			}
		}
		// Everyone's next buys, in one batch: decided as the model decides.
		reqs = reqs[:0]
		for range 3 {
			for _, u := range []string{"a1", "a2", "a3", "b1", "b2"} {
				reqs = append(reqs, buy("batch", u))
			}
		}
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			u := reqs[i].UserID
			ok, debt := model.take(u, now.UnixMicro(), *bucketOf(u))
			var th *inventory.ThrottledError
			if ok != (res.Err == nil) || !ok && !errors.As(res.Err, &th) {
				t.Errorf("next buy %d by %s: %v; the model: allowed %v (debt %d)", i, u, res.Err, ok, debt)
			}
		}
	})
}
