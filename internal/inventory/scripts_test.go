package inventory_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
)

// boughtEvents counts the sale's "bought" events per order id.
func (r *rig) boughtEvents(sale string) map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for _, ev := range r.events(sale) {
		if ev.Type == inventory.EventBought {
			out[ev.Order.ID]++
		}
	}
	return out
}

// TestResendIsAnsweredBeforeTheThrottle: a buy runs in Redis and its reply
// is lost; the engine sends it again with the same order id while the
// buyer's throttle has no room left. The resend finds the order its first
// attempt placed and returns it (Retried): it is not charged to the
// throttle again and refused while the order exists. A repeat with the same
// idempotency key is answered with the order too, not throttled; only a
// new buy is.
func TestResendIsAnsweredBeforeTheThrottle(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
	bucket, err := throttleOf(ratelimit.PerSecond(1, 0)) // one buy, then one a second
	if err != nil {
		t.Fatal(err)
	}
	if err := r.eng.Preload(r.ctx); err != nil { // no NOSCRIPT round trip to count
		t.Fatal(err)
	}
	f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: true}
	f.failing.Store(1)
	rdb.AddHook(f)

	buy := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k1", Throttle: &bucket}
	rc, err := r.eng.BuyWith(r.ctx, buy)
	if err != nil {
		t.Fatalf("a buy whose first reply was lost: %v, want its order", err)
	}
	if !rc.Retried || rc.Replayed || f.seen.Load() != 2 {
		t.Errorf("receipt %+v after %d sends; want Retried after 2", rc, f.seen.Load())
	}
	if ev := r.boughtEvents("s1"); len(ev) != 1 || ev[rc.Order.ID] != 1 {
		t.Errorf("bought events %v, want one for %s", ev, rc.Order.ID)
	}
	// The client repeats the buy itself (same key): its order, not 429.
	again, err := r.eng.BuyWith(r.ctx, buy)
	if err != nil || !again.Replayed || again.Order.ID != rc.Order.ID {
		t.Errorf("repeat with the same key: %+v, %v; want order %s replayed", again, err, rc.Order.ID)
	}
	// A new buy is throttled: the throttle holds.
	buy.IdempotencyKey = "k2"
	if _, err := r.eng.BuyWith(r.ctx, buy); !errors.Is(err, inventory.ErrThrottled) {
		t.Errorf("a new buy: %v, want ErrThrottled", err)
	}
	if rem := r.remaining("s1")["A"]; rem != 4 {
		t.Errorf("remaining %d, want 4", rem)
	}
}

// TestCorruptValueSpoilsOneBuyOfABatch: a batch of three buys where the
// middle one reads a value the engine did not write. That buy alone fails
// with ErrCorrupt; the others succeed, and Redis holds no half-written
// batch: exactly one "bought" event per accepted order, each with its
// deduction, and no event for the corrupt buy.
func TestCorruptValueSpoilsOneBuyOfABatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, spoil := range []struct {
			name string
			// do spoils something u2's buy of sku reads; key is u2's idempotency key
			do  func(r *rig) error
			sku string
			key string
		}{
			{"the key's order record is malformed", func(r *rig) error {
				if err := r.rdb.HSet(r.ctx, r.key("s1", "idem"), "u2|k", "s1.01JDKQ0000000000000000000").Err(); err != nil {
					return err
				}
				return r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup("s1.01JDKQ0000000000000000000"), "s1.01JDKQ0000000000000000000|garbage").Err()
			}, "A", "k"},
			{"the key's order record has bad lines", func(r *rig) error {
				if err := r.rdb.HSet(r.ctx, r.key("s1", "idem"), "u2|k", "s1.01JDKQ0000000000000000000").Err(); err != nil {
					return err
				}
				return r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup("s1.01JDKQ0000000000000000000"), "s1.01JDKQ0000000000000000000|p|u2|17|A=x|k").Err()
			}, "A", "k"},
			{"the user's count is 1.0", func(r *rig) error {
				return r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u2|A", "1.0").Err()
			}, "A", ""},
			{"an unlimited sku's sold count is 9.0", func(r *rig) error {
				return r.rdb.HSet(r.ctx, r.key("s1", "sale"), "s:U", "9.0").Err()
			}, "U", ""},
		} {
			t.Run(spoil.name, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
					Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
				if err := spoil.do(r); err != nil {
					t.Fatal(err)
				}
				reqs := []inventory.BuyRequest{
					{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)},
					{SaleID: "s1", UserID: "u2", Lines: lines(spoil.sku, 1), IdempotencyKey: spoil.key},
					{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},
				}
				res := r.eng.BuyMany(r.ctx, reqs)
				if res[0].Err != nil || res[2].Err != nil {
					t.Errorf("the sound buys: %v, %v", res[0].Err, res[2].Err)
				}
				if !errors.Is(res[1].Err, inventory.ErrCorrupt) {
					t.Errorf("the spoiled buy: %+v, %v; want ErrCorrupt", res[1].Receipt, res[1].Err)
				}
				ev := r.boughtEvents("s1")
				want := map[string]int{res[0].Receipt.Order.ID: 1, res[2].Receipt.Order.ID: 1}
				if fmt.Sprint(ev) != fmt.Sprint(want) {
					t.Errorf("bought events %v, want one each for %v", ev, want)
				}
				// Read raw: Stock refuses a sale with a corrupt counter.
				if rem, err := r.rdb.HGet(r.ctx, r.key("s1", "sale"), "r:A").Result(); err != nil || rem != "3" {
					t.Errorf("remaining A %q, %v; want 3 (an event without its deduction?)", rem, err)
				}
				if h := r.held("s1"); h["u1|A"] != 1 || h["u3|A"] != 1 {
					t.Errorf("held %v", h)
				}
				if n := len(r.orders("s1")); n != 2+len(spoil.key) {
					t.Errorf("%d order records", n)
				}
			})
		}
	})
}

// TestCancelChecksCountersBeforeItsEvent: a counter cancel.lua would add
// to holds "9.0", which Lua's tonumber takes and HINCRBY refuses. The
// cancel fails with ErrCorrupt before its first write: no "cancelled"
// event, the order still pending, the counters as they were.
func TestCancelChecksCountersBeforeItsEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, spoil := range []struct{ name, hash, field, sku string }{
			{"remaining", "sale", "r:A", "A"},
			{"the user's count", "bought", "u1|A", "A"},
			{"an unlimited sku's sold count", "sale", "s:U", "U"},
		} {
			t.Run(spoil.name, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
					Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
				rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines(spoil.sku, 1), "")
				if err != nil {
					t.Fatal(err)
				}
				if err := r.rdb.HSet(r.ctx, r.key("s1", spoil.hash), spoil.field, "9.0").Err(); err != nil {
					t.Fatal(err)
				}
				sale0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
				bought0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "bought")).Result()
				if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, ""); !errors.Is(err, inventory.ErrCorrupt) {
					t.Fatalf("Cancel: %v, want ErrCorrupt", err)
				}
				sale1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
				bought1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "bought")).Result()
				if fmt.Sprint(sale0) != fmt.Sprint(sale1) || fmt.Sprint(bought0) != fmt.Sprint(bought1) {
					t.Errorf("half-written cancel:\n sale   %v -> %v\n bought %v -> %v", sale0, sale1, bought0, bought1)
				}
				for _, ev := range r.events("s1") {
					if ev.Type == inventory.EventCancelled {
						t.Errorf("a cancelled event for a cancel that failed: %+v", ev)
					}
				}
				if o, err := r.eng.Order(r.ctx, rc.Order.ID); err != nil || o.Status != inventory.OrderPending {
					t.Errorf("order %+v, %v; want pending", o, err)
				}
			})
		}
	})
}

// TestSkewedInstancesAgree: two instances whose own clocks are 15 minutes
// fast and 15 minutes slow share one Redis. They agree on every sale's
// window, because a buy's script reads the Redis server's clock, and the
// fast one's buys do not lock the buyer out on the slow one.
func TestSkewedInstancesAgree(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		skewed := func(d time.Duration) inventory.Clock {
			return inventory.ClockFunc(func() time.Time { return time.Now().Add(d) })
		}
		r := newRig(t, b, inventory.Options{Clock: skewed(15 * time.Minute)}) // fast
		slow := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: skewed(-15 * time.Minute)})
		now := time.Now()
		r.create(inventory.Sale{ID: "open", PerUserLimit: 10, StartsAt: now.Add(-5 * time.Minute), EndsAt: now.Add(5 * time.Minute),
			Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		r.create(inventory.Sale{ID: "later", PerUserLimit: 10, StartsAt: now.Add(10 * time.Minute), EndsAt: now.Add(20 * time.Minute),
			Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		for name, eng := range map[string]*inventory.Engine{"fast": r.eng, "slow": slow} {
			if _, err := eng.Buy(r.ctx, "open", "u-"+name, lines("A", 1), ""); err != nil {
				t.Errorf("%s instance, a sale open now: %v", name, err)
			}
			var na *inventory.NotActiveError
			if _, err := eng.Buy(r.ctx, "later", "u-"+name, lines("A", 1), ""); !errors.As(err, &na) || na.Status != inventory.StatusUpcoming {
				t.Errorf("%s instance, a sale starting in 10 minutes: %v, want upcoming", name, err)
			}
		}

		bucket, err := throttleOf(ratelimit.PerSecond(1, 0)) // one buy, then one a second
		if err != nil {
			t.Fatal(err)
		}
		r.create(inventory.Sale{ID: "always", PerUserLimit: 10, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		buy := inventory.BuyRequest{SaleID: "always", UserID: "u-throttled", Lines: lines("A", 1), Throttle: &bucket}
		if _, err := r.eng.BuyWith(r.ctx, buy); err != nil {
			t.Fatalf("first throttled buy, fast instance: %v", err)
		}
		var th *inventory.ThrottledError
		if _, err := slow.BuyWith(r.ctx, buy); !errors.As(err, &th) || th.RetryAfter > time.Second {
			t.Errorf("at once on the slow instance: %v; want throttled for at most a second", err)
		}
	})
}

// TestSaleWindowBefore1970: a sale window is kept as unix ms with 0 for
// "unbounded", so an end at or before 1970 would read as no end at all;
// it is invalid, as is an end not after the start.
func TestSaleWindowBefore1970(t *testing.T) {
	items := []inventory.Item{{SKU: "A", Stock: 1}}
	for _, s := range []inventory.Sale{
		{ID: "s1", EndsAt: time.Unix(-3600, 0), Items: items},
		{ID: "s1", EndsAt: time.Unix(0, 0), Items: items},
		{ID: "s1", StartsAt: time.Unix(-7200, 0), EndsAt: time.Unix(-3600, 0), Items: items},
		{ID: "s1", StartsAt: time.Unix(100, 0), EndsAt: time.Unix(100, 0), Items: items},
	} {
		var inv *inventory.InvalidError
		if err := inventory.ValidateSale(s); !errors.As(err, &inv) || inv.Field != "ends_at" {
			t.Errorf("window [%v, %v): %v, want ends_at invalid", s.StartsAt, s.EndsAt, err)
		}
	}
	if err := inventory.ValidateSale(inventory.Sale{ID: "s1", EndsAt: time.Unix(0, 1e6), Items: items}); err != nil {
		t.Errorf("an end just after 1970: %v", err)
	}
}

// TestRestockAndMoveCheckCountersBeforeTheirEvent: an item's remaining or
// stocked counter holds "9.0", which Lua's tonumber takes and HINCRBY
// refuses. A restock and a move fail with ErrCorrupt before their first
// write: no event, the sale hash as it was.
func TestRestockAndMoveCheckCountersBeforeTheirEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, field := range []string{"r:A", "t:A"} {
			t.Run(field, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", Items: []inventory.Item{{SKU: "A", Stock: 5}}})
				r.create(inventory.Sale{ID: "s2", Items: []inventory.Item{{SKU: "A", Stock: 5}}})
				if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), field, "9.0").Err(); err != nil {
					t.Fatal(err)
				}
				sale0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
				if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("Restock: %v, want ErrCorrupt", err)
				}
				if _, err := r.eng.Move(r.ctx, "s1", "s2", "A", 1); !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("Move: %v, want ErrCorrupt", err)
				}
				if sale1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result(); fmt.Sprint(sale0) != fmt.Sprint(sale1) {
					t.Errorf("half-written:\n %v\n-> %v", sale0, sale1)
				}
				if n, _ := r.rdb.XLen(r.ctx, r.key("s1", "events")).Result(); n != 1 { // "created" only
					t.Errorf("%d events in s1, want only its creation", n)
				}
			})
		}
	})
}
