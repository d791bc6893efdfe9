package inventory_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/inventory"
)

// TestAdvLuaNonCanonicalCounters: a stored counter in a form the engine
// never writes ("01", "-0", "00", "-01") is corrupt (code 8, ErrCorrupt)
// for the buys that read it, and such a buy changes nothing: no event, no
// held count, no sold count. Redis's own integer parser (HINCRBY) refuses
// these forms, so a script that took one for a number would fail on its
// write after the XADD, leaving an event for a buy whose counters were
// never written.
func TestAdvLuaNonCanonicalCounters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, bad := range []string{"01", "-0", "00", "-01", "007"} {
			for _, field := range []string{"s:U", "r:A", "bought", "limit"} {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{
					{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}})
				sku := "A"
				if field == "s:U" {
					sku = "U"
				}
				if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines(sku, 1)}); err != nil {
					t.Fatal(err)
				}
				if field == "bought" {
					if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u1|"+sku, bad).Err(); err != nil {
						t.Fatal(err)
					}
				} else if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), field, bad).Err(); err != nil {
					t.Fatal(err)
				}
				events := len(r.events("s1"))
				_, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines(sku, 1)})
				if !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("%s = %q: buy err = %v, want ErrCorrupt", field, bad, err)
				}
				if n := len(r.events("s1")); n != events {
					t.Errorf("%s = %q: the refused buy appended %d events", field, bad, n-events)
				}
				if field != "bought" {
					if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "bought"), "u1|"+sku).Result(); v != "1" {
						t.Errorf("%s = %q: u1 holds %q, want 1", field, bad, v)
					}
				}
				if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "sale"), field).Result(); field != "bought" && v != bad {
					t.Errorf("%s = %q became %q", field, bad, v)
				}
			}
		}
	})
}

// TestAdvLuaLargeCounters: counters the engine may hold after restocks
// (remaining up to maxStocked, held and sold counts past 10^14, up to just
// under 2^53) are written back exactly: the script hands numbers below
// 10^14 to redis.call as Lua numbers and larger ones formatted, and both
// must store the exact integer on every backend.
func TestAdvLuaLargeCounters(t *testing.T) {
	vals := []int64{99999999999999, 100000000000000, 100000000000001, 123456789012345, 999999999999999,
		1000000000000000, 1 << 52, 1<<53 - 2, 1<<53 - 1}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, v := range vals {
			r := newRig(t, b, inventory.Options{})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{
				{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}})
			sale, bought := r.key("s1", "sale"), r.key("s1", "bought")
			for f, x := range map[string]int64{"r:A": v, "s:U": v - 1, "limit": 1<<53 - 1} {
				if err := r.rdb.HSet(r.ctx, sale, f, x).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.rdb.HSet(r.ctx, bought, "u1|A", v-1, "u1|U", v-3).Err(); err != nil {
				t.Fatal(err)
			}
			rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1, "U", 2)})
			if err != nil {
				t.Fatalf("v=%d: %v", v, err)
			}
			if fmt.Sprint(rc.Remaining) != fmt.Sprint([]int64{v - 1, -1}) {
				t.Errorf("v=%d: remaining %v", v, rc.Remaining)
			}
			for _, c := range []struct{ key, field, want string }{
				{sale, "r:A", fmt.Sprint(v - 1)},
				{sale, "s:U", fmt.Sprint(v + 1)},
				{bought, "u1|A", fmt.Sprint(v)},
				{bought, "u1|U", fmt.Sprint(v - 1)},
			} {
				if got, err := r.rdb.HGet(r.ctx, c.key, c.field).Result(); err != nil || got != c.want {
					t.Errorf("v=%d: %s = %q (%v), want %q", v, c.field, got, err, c.want)
				}
			}
		}
	})
}

// TestAdvLuaThrottleStateTwoWindowsAhead: after the script's clock steps
// back by almost a window, a buyer's state filed in the hash of window
// n+1 (its TAT's) sits in now's window + 2, the only one of the next two
// that exists: the EXISTS that gates reading them must find it, and the
// buyer is still refused. A buyer with a state in now's window only, in
// the same batch, is decided by it; a new buyer is let through.
func TestAdvLuaThrottleStateTwoWindowsAhead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		bucket := inventory.Throttle{Rate: 1, Period: time.Second}
		w := inventory.ThrottleWindow(bucket)
		buy := func(u string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "s1", UserID: u, Lines: lines("A", 1), Throttle: &bucket}
		}
		m := r.clock.Now().UnixMilli()/w + 3
		// y's state: TAT 1 s after (m-1)*w + 10, in window m-1's hash.
		r.clock.Set(time.UnixMilli((m-1)*w + 10))
		if _, err := r.eng.BuyWith(r.ctx, buy("y")); err != nil {
			t.Fatal(err)
		}
		// x's state: TAT 1 s after (m+1)*w - 30, in window m+1's hash.
		r.clock.Set(time.UnixMilli((m+1)*w - 30))
		if _, err := r.eng.BuyWith(r.ctx, buy("x")); err != nil {
			t.Fatal(err)
		}
		keys := r.eng.ThrottleKeys("s1", bucket, time.UnixMilli((m-1)*w+20))
		if len(keys) < 3 {
			t.Fatalf("ThrottleKeys: %v", keys)
		}
		if n, _ := r.rdb.Exists(r.ctx, keys[1]).Result(); n != 0 {
			t.Fatalf("window m's hash %s exists: the setup is not what it means to test", keys[1])
		}
		if v, _ := r.rdb.HGet(r.ctx, keys[2], "x").Result(); v == "" {
			t.Fatalf("x's state is not in window m+1's hash %s", keys[2])
		}
		// Back by almost a window: now is in window m-1 again.
		r.clock.Set(time.UnixMilli((m-1)*w + 20))
		res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{buy("x"), buy("y"), buy("z")})
		if !errors.Is(res[0].Err, inventory.ErrThrottled) {
			t.Errorf("x, state two windows ahead: %v, want throttled", res[0].Err)
		}
		if !errors.Is(res[1].Err, inventory.ErrThrottled) {
			t.Errorf("y, state in now's window: %v, want throttled", res[1].Err)
		}
		if res[2].Err != nil {
			t.Errorf("z, no state: %v", res[2].Err)
		}
		if rem := r.remaining("s1")["A"]; rem != 97 {
			t.Errorf("remaining %d, want 97", rem)
		}
	})
}
