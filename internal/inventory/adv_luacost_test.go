package inventory_test

// Adversarial tests of buy.lua's cost cuts for issue 15: the fresh buyer's
// throttle answer taken once per call and throttle (fresh[t]), and a first
// holding written as the asked quantity's own argument. Whole batches are
// compared with the same buys made one at a time, and with the invariants
// (no unit oversold, no buyer past the limit, counts as int.lua takes them).

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestBatchAgreesWithBuyingAlone: rounds of random buys (buyers that come
// several times in one batch, fresh then stored; three throttles, two of
// them sharing a window; no throttle; a buyer whose stored throttle state
// is corrupt; one whose state sits in the next window's hash, as after a
// step back of the clock; stored counts of "0" and of 2; idempotency keys
// used again and order ids resent, with the same lines or others) go in
// one BuyMany to one sale and one by one (each its own call) to another
// sale set up alike, at the same times, the clock stepping forward and
// then back. Every buy's outcome, the bought hash (byte for byte), the
// stock and every throttle hash must be the same in both; no sku is
// oversold and no buyer holds more than the limit.
func TestBatchAgreesWithBuyingAlone(t *testing.T) {
	// (Windows of 16 s and 4 min: Redis expires the throttle hashes in real
	// time, relative to the test's time, so the test's rounds, which step
	// that time, stay far from a window's end. Checked with windows of 2 s,
	// where a slow run saw one sale's hash expire before the other's.)
	t1 := &inventory.Throttle{Rate: 2, Period: 10 * time.Second, Burst: 2}
	t2 := &inventory.Throttle{Rate: 1, Period: 5 * time.Second, Burst: 2}
	t3 := &inventory.Throttle{Rate: 1, Period: time.Minute, Burst: 3}
	if inventory.ThrottleWindow(*t1) != inventory.ThrottleWindow(*t2) || inventory.ThrottleWindow(*t1) == inventory.ThrottleWindow(*t3) {
		t.Fatalf("windows %d %d %d", inventory.ThrottleWindow(*t1), inventory.ThrottleWindow(*t2), inventory.ThrottleWindow(*t3))
	}
	throttles := []*inventory.Throttle{nil, t1, t2, t3}
	const limit = 30
	users := []string{"u1", "u2", "u3", "u4", "u5", "u6"}
	canonical := regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
	for _, seed := range []uint64{1, 2, 3} {
		forEachBackend(t, func(t *testing.T, b backend) {
			r := newRig(t, b, inventory.Options{})
			sales := []string{"batch", "alone"}
			const span = 262144 // ms: t3's window, a multiple of t1's
			t0 := time.UnixMilli((r.clock.Now().UnixMilli()/span + 1) * span).UTC()
			r.clock.Set(t0)
			for _, s := range sales {
				r.create(inventory.Sale{ID: s, PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: 300}, {SKU: "B", Stock: 60}}})
				if err := r.rdb.HSet(r.ctx, r.key(s, "bought"), "u3|A", "0", "u4|A", "2").Err(); err != nil {
					t.Fatal(err)
				}
				// u5's state of t1 is corrupt; u6's state of t2 is in the
				// next window's hash, 10 s ahead (as after a step back).
				k1 := r.eng.ThrottleKeys(s, *t1, t0)
				if err := r.rdb.HSet(r.ctx, k1[0], "u5", "garbage").Err(); err != nil {
					t.Fatal(err)
				}
				if err := r.rdb.HSet(r.ctx, k1[1], "u6", fmt.Sprintf("%d:0", t0.UnixMicro()+10_000_000)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(seed, 15))
			type sent struct {
				user  string
				lines []inventory.Line
				ids   [2]string
			}
			var past []sent
			// name[id]: the order id's place in the test (the ids of the two
			// sales differ), so that outcomes compare
			name := map[string]string{}
			for round, at := range []time.Duration{0, 7 * time.Second, 3 * time.Second, 25 * time.Second} {
				r.clock.Set(t0.Add(at))
				var reqs [2][]inventory.BuyRequest
				for range 40 + rng.IntN(30) {
					u := users[rng.IntN(len(users))]
					var ls []inventory.Line
					if rng.IntN(3) > 0 {
						ls = append(ls, inventory.Line{SKU: "A", Qty: 1 + rng.Int64N(3)})
					}
					if len(ls) == 0 || rng.IntN(3) == 0 {
						ls = append(ls, inventory.Line{SKU: "B", Qty: 1 + rng.Int64N(2)})
					}
					s := sent{user: u, lines: ls, ids: [2]string{inventory.NewOrderID("batch"), inventory.NewOrderID("alone")}}
					key := ""
					switch rng.IntN(8) {
					case 0: // an idempotency key used before, maybe by another buyer
						key = fmt.Sprintf("k%d", rng.IntN(4))
					case 1: // a resent order id, with its lines or others
						// (another buyer's order id is taken: BuyMany sends
						// that buy again alone after the batch, out of turn)
						if len(past) > 0 {
							p := past[rng.IntN(len(past))]
							s.ids, s.user = p.ids, p.user
							if rng.IntN(2) == 0 {
								s.lines = p.lines
							}
						}
					}
					past = append(past, s)
					if name[s.ids[0]] == "" {
						name[s.ids[0]], name[s.ids[1]] = fmt.Sprintf("order%d", len(past)), fmt.Sprintf("order%d", len(past))
					}
					tr := throttles[rng.IntN(len(throttles))]
					if s.user == "u5" || s.user == "u6" {
						tr = throttles[1+rng.IntN(2)]
					}
					for i, sale := range sales {
						reqs[i] = append(reqs[i], inventory.BuyRequest{SaleID: sale, UserID: s.user, Lines: s.lines,
							IdempotencyKey: key, OrderID: s.ids[i], Throttle: tr, IgnoreSoldOutFlags: true})
					}
				}
				batch := r.eng.BuyMany(r.ctx, reqs[0])
				outcome := func(res inventory.BuyResult, sale string) string {
					var s string
					if res.Err != nil {
						s = "error " + res.Err.Error()
						for id, n := range name {
							s = strings.ReplaceAll(s, id, n)
						}
					} else {
						rc := res.Receipt
						s = fmt.Sprintf("%s %s %v %v replayed=%v retried=%v %v", name[rc.Order.ID], rc.Order.UserID, rc.Order.Items,
							rc.Order.CreatedAt.UnixMilli(), rc.Replayed, rc.Retried, rc.Remaining)
					}
					return strings.ReplaceAll(s, sale, "SALE")
				}
				bought := 0
				for i, req := range reqs[1] {
					res, err := r.eng.BuyWith(r.ctx, req)
					got, want := outcome(batch[i], "batch"), outcome(inventory.BuyResult{Receipt: res, Err: err}, "alone")
					if got != want {
						t.Errorf("round %d buy %d (%s %v key %q): in the batch %s; alone %s", round, i, req.UserID, req.Lines,
							req.IdempotencyKey, got, want)
					}
					if err == nil && !res.Replayed && !res.Retried {
						bought++
					}
				}
				if bought == 0 {
					t.Errorf("round %d bought nothing: the test tests nothing", round)
				}
				// The stores: the bought hash byte for byte, the stock, and
				// every throttle hash.
				dump := func(sale string) string {
					var sb strings.Builder
					h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "bought")).Result()
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&sb, "bought %v\n", h)
					for f, v := range h {
						if !canonical.MatchString(v) {
							t.Errorf("%s: bought[%s] = %q, not as int.lua takes it", sale, f, v)
						}
						var n int64
						fmt.Sscan(v, &n)
						if n > limit {
							t.Errorf("%s: %s holds %d, past the limit %d", sale, f, n, limit)
						}
					}
					for _, it := range mustStock(t, r, sale) {
						fmt.Fprintf(&sb, "%s remaining %d sold %d\n", it.SKU, it.Remaining, it.Sold)
						if it.Remaining < 0 || it.Remaining+it.Sold != it.Stocked {
							t.Errorf("%s: %s %+v", sale, it.SKU, it)
						}
					}
					for _, tr := range throttles[1:] {
						for _, k := range r.eng.ThrottleKeys(sale, *tr, r.clock.Now()) {
							h, err := r.rdb.HGetAll(r.ctx, k).Result()
							if err != nil {
								t.Fatal(err)
							}
							fmt.Fprintf(&sb, "%s %v\n", k[strings.LastIndex(k, "}"):], h)
						}
					}
					return sb.String()
				}
				if got, want := dump("batch"), dump("alone"); got != want {
					t.Errorf("round %d: after the batch:\n%s\nafter buying alone:\n%s", round, got, want)
				}
				// The held counts add up to the units sold.
				for _, sale := range sales {
					sum := map[string]int64{}
					for f, n := range r.held(sale) {
						sum[f[strings.IndexByte(f, '|')+1:]] += n
					}
					for _, it := range mustStock(t, r, sale) {
						if want := it.Sold + map[string]int64{"A": 2}[it.SKU]; sum[it.SKU] != want {
							t.Errorf("%s: buyers hold %d of %s, sold %d (plus the 2 seeded)", sale, sum[it.SKU], it.SKU, it.Sold)
						}
					}
				}
			}
		})
	}
}

func mustStock(t *testing.T, r *rig, sale string) []inventory.ItemState {
	t.Helper()
	st, err := r.eng.Stock(r.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	return st.Items
}
