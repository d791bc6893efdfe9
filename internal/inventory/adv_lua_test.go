package inventory_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestAdvLuaNonCanonicalCounters: a stored counter in a form the engine
// never writes ("01", "-0", "00", "-01"; "1 ", "", "+1", "1.0", "0x1",
// which int's unparsed '0' and '1' must not let through) is corrupt (code 8, ErrCorrupt)
// for the buys that read it, and such a buy changes nothing: no event, no
// held count, no sold count. Redis's own integer parser (HINCRBY) refuses
// these forms, so a script that took one for a number would fail on its
// write after the XADD, leaving an event for a buy whose counters were
// never written.
func TestAdvLuaNonCanonicalCounters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, bad := range []string{"01", "-0", "00", "-01", "007", "1 ", " 1", "", "+1", "1.0", "0x1", "1e0", "0 "} {
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

// TestAdvLuaBigMixedBatch: one call of thousands of buys (past Lua's
// unpack limit in every list the script reads or writes), mixing every
// outcome a batch can hold (bought, replay, unknown sku, over the limit,
// short, order id taken, corrupt value, throttled, key naming other
// lines, spent token; not selling from a second sale of the same
// BuyMany), with one to MaxLines lines: each buy is answered as it is when
// sent alone, in the same order, on a twin sale, and the stock, quotas and
// events end alike.
func TestAdvLuaBigMixedBatch(t *testing.T) {
	const n = 2500
	bucket := inventory.Throttle{Rate: 1, Period: time.Hour, Burst: 1}
	forEachBackend(t, func(t *testing.T, b backend) {
		opts := inventory.Options{Coalesce: inventory.Coalesce{MaxBatch: 2 * n}}
		batch, seq := newRig(t, b, opts), newRig(t, b, inventory.Options{})
		seq.clock = batch.clock
		seq.eng = inventory.New(seq.rdb, inventory.Options{Prefix: seq.prefix, Clock: batch.clock, ScriptClock: batch.clock})
		items := []inventory.Item{{SKU: "A", Stock: 1500}, {SKU: "B", Stock: 40}, {SKU: "U", Stock: inventory.Unlimited}}
		for i := range inventory.MaxLines {
			items = append(items, inventory.Item{SKU: fmt.Sprintf("S%02d", i), Stock: 3})
		}
		for _, r := range []*rig{batch, seq} {
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 3, Items: items})
			r.create(inventory.Sale{ID: "s2", PerUserLimit: 3, Items: items[:1]})
			if err := r.eng.Pause(r.ctx, "s2"); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "bad|A", "x").Err(); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(3, 5))
		reqs := make([]inventory.BuyRequest, 0, n)
		for i := range n {
			u := fmt.Sprint("u", rng.IntN(400))
			req := inventory.BuyRequest{SaleID: "s1", UserID: u, OrderID: inventory.NewOrderID("s1"), IgnoreSoldOutFlags: true}
			switch k := rng.IntN(20); {
			case k < 8:
				req.Lines = lines("A", 1+rng.IntN(2))
			case k < 10:
				req.Lines = lines("A", 1, "B", 1, "U", 1+rng.IntN(3))
			case k == 10:
				req.Lines = lines("Z", 1, "A", 1) // unknown sku
			case k == 11:
				req.UserID = "bad" // a corrupt held count
				req.Lines = lines("A", 1)
			case k == 12 && i > 0:
				req = reqs[rng.IntN(i)] // a resend: replay (or its refusal again)
			case k == 13:
				req.Lines = lines("U", 1)
				req.Throttle = &bucket // the second and later throttled
				req.UserID = fmt.Sprint("t", rng.IntN(20))
			case k == 14:
				req.IdempotencyKey = "k"
				req.Lines = lines("U", 1+rng.IntN(2)) // other lines: code 14
			case k == 15:
				req.Token, req.TokenTTL = fmt.Sprint("tok", rng.IntN(30)), time.Minute
				req.Lines = lines("A", 1)
			case k == 16:
				req.SaleID, req.OrderID = "s2", inventory.NewOrderID("s2") // paused
				req.Lines = lines("A", 1)
			case k == 17:
				var ls []any
				for j := range inventory.MaxLines {
					ls = append(ls, fmt.Sprintf("S%02d", j), 1)
				}
				req.Lines = lines(ls...)
			default:
				req.Lines = lines("B", 2) // short soon
			}
			reqs = append(reqs, req)
		}
		// An order id of another user, alone in its sale's batch so that
		// its retry with a new id comes at the same place in both runs.
		taken := inventory.BuyRequest{SaleID: "s1", UserID: "thief", OrderID: reqs[0].OrderID, Lines: lines("U", 1), IgnoreSoldOutFlags: true}
		reqs = append(reqs, taken)
		res := batch.eng.BuyMany(batch.ctx, reqs)
		describe := func(rc inventory.Receipt, err error) string {
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("ok items %v remaining %v replayed %v retried %v", rc.Order.Items, rc.Remaining, rc.Replayed, rc.Retried)
		}
		outcomes := map[string]int{}
		bad := 0
		for i, req := range reqs {
			rc, err := seq.eng.BuyWith(seq.ctx, req)
			got, want := describe(res[i].Receipt, res[i].Err), describe(rc, err)
			outcomes[strings.SplitN(want, " ", 3)[1]]++
			if got != want {
				if bad++; bad <= 10 {
					t.Errorf("buy %d (%s %v key %q token %q): in the batch %s; alone %s", i, req.UserID, req.Lines, req.IdempotencyKey, req.Token, got, want)
				}
			}
		}
		t.Logf("outcomes: %v", outcomes)
		if a, b := fmt.Sprint(batch.remaining("s1")), fmt.Sprint(seq.remaining("s1")); a != b {
			t.Errorf("remaining: batched %s, one at a time %s", a, b)
		}
		if a, b := len(batch.events("s1")), len(seq.events("s1")); a != b {
			t.Errorf("events: batched %d, one at a time %d", a, b)
		}
		hb, _ := batch.rdb.HGetAll(batch.ctx, batch.key("s1", "bought")).Result()
		hs, _ := seq.rdb.HGetAll(seq.ctx, seq.key("s1", "bought")).Result()
		if fmt.Sprint(hb) != fmt.Sprint(hs) {
			t.Errorf("held differ: batched %d fields, one at a time %d", len(hb), len(hs))
		}
	})
}

// TestAdvLuaConcurrentThrottledInvariants: many goroutines buying one sale
// at once, coalesced into batches, every buyer throttled (four buys, then
// none for an hour) and appearing in several goroutines, some buys resent
// with their idempotency key: no sku is oversold, no buyer holds more
// than the limit or gets more buys than the throttle allows, and the
// stock, quotas and events add up to the accepted receipts.
func TestAdvLuaConcurrentThrottledInvariants(t *testing.T) {
	for _, b := range backends {
		if b.name == "miniredis" {
			continue // real Redis only: concurrency on a real server
		}
		t.Run(b.name, func(t *testing.T) {
			r := newRig(t, b, inventory.Options{})
			const users, workers, perWorker, limit = 150, 48, 60, 4
			stock := map[string]int64{"A": 300, "B": 60, "U": inventory.Unlimited}
			r.create(inventory.Sale{ID: "s1", PerUserLimit: limit, Items: []inventory.Item{
				{SKU: "A", Stock: stock["A"]}, {SKU: "B", Stock: stock["B"]}, {SKU: "U", Stock: stock["U"]}}})
			th := inventory.Throttle{Rate: 1, Period: time.Hour, Burst: 3}
			var mu sync.Mutex
			orders := map[string]inventory.Order{} // accepted, by id
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 9))
					for i := range perWorker {
						req := inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("u", rng.IntN(users)), Throttle: &th}
						switch rng.IntN(3) {
						case 0:
							req.Lines = lines("A", 1+rng.IntN(2))
						case 1:
							req.Lines = lines("A", 1, "B", 1)
						default:
							req.Lines = lines("U", 1+rng.IntN(2), "B", 1)
						}
						if rng.IntN(4) == 0 {
							req.IdempotencyKey = fmt.Sprint("k", w, "-", i)
						}
						for range 1 + rng.IntN(2) { // sometimes sent twice
							rc, err := r.eng.BuyWith(r.ctx, req)
							if err != nil {
								continue
							}
							mu.Lock()
							if prev, ok := orders[rc.Order.ID]; ok && !rc.Replayed && !rc.Retried {
								t.Errorf("order %s accepted twice (%v, %v)", rc.Order.ID, prev, rc.Order)
							}
							orders[rc.Order.ID] = rc.Order
							mu.Unlock()
							if req.IdempotencyKey == "" {
								break
							}
						}
					}
				}()
			}
			wg.Wait()
			sold, held, perUser := map[string]int64{}, map[string]int64{}, map[string]int{}
			for _, o := range orders {
				perUser[o.UserID]++
				for _, l := range o.Items {
					sold[l.SKU] += l.Qty
					held[o.UserID+"|"+l.SKU] += l.Qty
				}
			}
			for u, n := range perUser {
				if n > int(th.Burst)+1 {
					t.Errorf("%s got %d buys through a throttle of %d", u, n, th.Burst+1)
				}
			}
			if got := r.held("s1"); fmt.Sprint(got) != fmt.Sprint(held) {
				t.Errorf("held in Redis %v, by the receipts %v", got, held)
			}
			for f, h := range held {
				if h > limit {
					t.Errorf("%s holds %d, limit %d", f, h, limit)
				}
			}
			rem := r.remaining("s1")
			for sku, s := range stock {
				if s == inventory.Unlimited {
					continue
				}
				if rem[sku] < 0 || rem[sku]+sold[sku] != s {
					t.Errorf("%s: remaining %d + sold %d != stock %d", sku, rem[sku], sold[sku], s)
				}
			}
			if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "sale"), "s:U").Result(); v != fmt.Sprint(sold["U"]) {
				t.Errorf("U's sold counter %q, by the receipts %d", v, sold["U"])
			}
			bought := 0
			for _, ev := range r.events("s1") {
				if ev.Type != inventory.EventBought {
					continue
				}
				bought++
				if o, ok := orders[ev.Order.ID]; !ok || fmt.Sprint(o.Items) != fmt.Sprint(ev.Order.Items) || o.UserID != ev.Order.UserID {
					t.Errorf("event of order %s %v, accepted as %v", ev.Order.ID, ev.Order, o)
				}
			}
			if bought != len(orders) {
				t.Errorf("%d bought events for %d accepted orders", bought, len(orders))
			}
			t.Logf("%d orders, sold %v, remaining %v", len(orders), sold, rem)
		})
	}
}

// TestAdvLuaThrottleStateOutOfRange: a stored throttle state whose
// numbers gcra_take never writes (past 2^53, where Lua's doubles are
// inexact, or past int64, where the debt it would reply is no integer and
// the embedded server's Lua has no number for it) is corrupt for that
// buyer (ErrCorrupt): not a refusal with a wrapped retry time, and not a
// script error half way through the batch, after the buys before it wrote
// their events. The other buys of the batch run, once each.
func TestAdvLuaThrottleStateOutOfRange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		bucket := inventory.Throttle{Rate: 1, Period: time.Second}
		buy := func(u string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "s1", UserID: u, Lines: lines("A", 1), Throttle: &bucket}
		}
		now := r.clock.Now()
		keys := r.eng.ThrottleKeys("s1", bucket, now)
		soon := fmt.Sprint(now.UnixMicro() + 500000)
		accepted := 0
		for i, bad := range []string{"99999999999999999999:0", "9007199254740993:0", soon + ":99999999999999999999999",
			soon + ":9007199254740993", "1:99999999999999999999999"} {
			// u1's state in this window's hash, and a valid later one
			// of u4 in the next's beside an out-of-range one.
			if err := r.rdb.HSet(r.ctx, keys[0], "u1", bad, "u4", soon+":0").Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HSet(r.ctx, keys[1], "u4", bad).Err(); err != nil {
				t.Fatal(err)
			}
			u2, u3 := fmt.Sprint("a", i), fmt.Sprint("b", i)
			res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{buy(u2), buy("u1"), buy(u3), buy("u4")})
			for j, u := range []string{"u1", "u4"} {
				err := res[1+2*j].Err
				if !errors.Is(err, inventory.ErrCorrupt) {
					var te *inventory.ThrottledError
					if errors.As(err, &te) {
						t.Errorf("%s's state %q: throttled, retry after %v; want ErrCorrupt", u, bad, te.RetryAfter)
					} else {
						t.Errorf("%s's state %q: %v, want ErrCorrupt", u, bad, err)
					}
				}
			}
			for _, j := range []int{0, 2} {
				if res[j].Err != nil {
					t.Errorf("%s beside it: %v", reqUser(j, u2, u3), res[j].Err)
				} else {
					accepted++
				}
			}
		}
		n := 0
		for _, ev := range r.events("s1") {
			if ev.Type == inventory.EventBought {
				n++
			}
		}
		if n != accepted {
			t.Errorf("%d bought events for %d accepted buys", n, accepted)
		}
		if rem := r.remaining("s1")["A"]; rem != 100-int64(accepted) {
			t.Errorf("remaining %d after %d accepted buys", rem, accepted)
		}
	})
}

func reqUser(j int, u2, u3 string) string {
	if j == 0 {
		return u2
	}
	return u3
}

// TestAdvLuaNegativeHeld: a negative held count (the engine never writes
// one: a cancel gives back only what was bought) is corrupt, not a number
// that would let the buyer take more than the limit on top of it.
func TestAdvLuaNegativeHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u1|A", "-3").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 2)})
		if !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("held -3: buy of 2 under a limit of 2: %v, want ErrCorrupt", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 10 {
			t.Errorf("remaining %d, want 10", rem)
		}
	})
}
