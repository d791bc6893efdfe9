package segment_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// e2e is a segmented sale run end to end: the engine and seller on a real
// Redis, the segments recorded in a database that is the engine's Loader,
// and an order consumer writing every segment's stream to it.
type e2e struct {
	*rig
	db  *store.Store
	ids []string // the segment ids, in directory order
}

// newE2E opens the database, makes the rig with the database as the
// engine's Loader (fenced by the stream, the way the service loads), and
// starts a consumer that runs until the test ends.
func newE2E(t *testing.T, b backend, dbURL string) *e2e {
	t.Helper()
	db, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	x := &e2e{db: db}
	loader := inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
		// The stream first: if every entry is acknowledged, the database
		// holds everything it said.
		applied, err := pipeline.Applied(ctx, x.rdb, x.eng, saleID)
		if err != nil {
			return inventory.Snapshot{}, err
		}
		snap, err := db.Snapshot(ctx, saleID)
		snap.EventsApplied = applied
		return snap, err
	})
	x.rig = newRig(t, b, inventory.Options{Loader: loader}, segment.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pipeline.New(x.rdb, x.eng, db, pipeline.Options{Name: "e2e", BatchSize: 200,
			Block: 20 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return x
}

// createRecorded places the sale's segments, records each in the database
// as an ordinary sale, then creates them in Redis.
func (x *e2e) createRecorded(sale inventory.Sale, k int) {
	x.t.Helper()
	ids, err := x.sel.Place(x.ctx, sale.ID, k)
	if err != nil {
		x.t.Fatalf("Place: %v", err)
	}
	plan, err := segment.Plan(sale, ids)
	if err != nil {
		x.t.Fatalf("Plan: %v", err)
	}
	for _, seg := range plan {
		if err := x.db.CreateSale(x.ctx, store.Sale{Sale: seg}); err != nil {
			x.t.Fatalf("CreateSale(%s): %v", seg.ID, err)
		}
	}
	if err := x.sel.Create(x.ctx, sale, ids); err != nil {
		x.t.Fatalf("Create: %v", err)
	}
	x.ids = ids
}

// redisOrders returns the ids of a segment's order records in Redis.
func (x *e2e) redisOrders(seg string) []string {
	x.t.Helper()
	groups, err := x.rdb.HGetAll(x.ctx, x.eng.Key(seg, "orders")).Result()
	if err != nil {
		x.t.Fatalf("HGETALL orders of %s: %v", seg, err)
	}
	ids := slices.Sorted(maps.Keys(inventory.OrderRecords(groups)))
	return ids
}

// held returns a segment's per-user counts in Redis ("<user>|<sku>" -> units).
func (x *e2e) held(seg string) map[string]string {
	x.t.Helper()
	h, err := x.rdb.HGetAll(x.ctx, x.eng.Key(seg, "bought")).Result()
	if err != nil {
		x.t.Fatalf("HGETALL bought of %s: %v", seg, err)
	}
	return h
}

// settle waits until the database holds every order of every segment and
// no segment's stream has anything in flight.
func (x *e2e) settle() {
	x.t.Helper()
	deadline := time.Now().Add(waitfor.Patience)
	for {
		var behind []string
		for _, seg := range x.ids {
			counts, err := x.db.CountOrders(x.ctx, seg)
			inflight, err2 := pipeline.InFlight(x.ctx, x.rdb, x.eng, seg)
			n := len(x.redisOrders(seg))
			if err != nil || err2 != nil || len(inflight) > 0 ||
				counts[inventory.OrderConfirmed]+counts[inventory.OrderCancelled] != n {
				behind = append(behind, fmt.Sprintf("%s: db %v, redis %d, in flight %d, errs %v %v",
					seg, counts, n, len(inflight), err, err2))
			}
		}
		if behind == nil {
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("the database did not catch up:\n%s", strings.Join(behind, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBooks compares, segment by segment, Redis with the database after
// settle: the same orders, every buyer's orders in their home segment and
// within the limit, the same stocked and sold totals (moves applied), a
// consistent reconciliation. It returns the database's stocked totals
// summed over the segments, by sku.
func (x *e2e) checkBooks(limit int64) map[string]int64 {
	x.t.Helper()
	t := x.t
	stocked := map[string]int64{}
	perUser := map[string]int64{} // "<user>|<sku>" over every segment
	for _, seg := range x.ids {
		snap, err := x.db.Snapshot(x.ctx, seg)
		if err != nil {
			t.Fatalf("Snapshot(%s): %v", seg, err)
		}
		var inDB []string
		for _, o := range snap.Orders {
			inDB = append(inDB, o.ID)
			if o.SaleID != seg || o.Status != inventory.OrderConfirmed {
				t.Errorf("order %s in the database: sale %s, status %s", o.ID, o.SaleID, o.Status)
			}
			if home := segment.Home(x.ids, o.UserID); home != seg {
				t.Errorf("order %s of %s is in segment %s, the user's home is %s", o.ID, o.UserID, seg, home)
			}
			for _, l := range o.Items {
				perUser[o.UserID+"|"+l.SKU] += l.Qty
			}
		}
		slices.Sort(inDB)
		if got := x.redisOrders(seg); !slices.Equal(inDB, got) {
			t.Errorf("segment %s: %d orders in the database, %d in Redis, not the same", seg, len(inDB), len(got))
		}
		for f := range x.held(seg) {
			user, _, _ := strings.Cut(f, "|")
			if home := segment.Home(x.ids, user); home != seg {
				t.Errorf("Redis counts %s in segment %s, the user's home is %s", f, seg, home)
			}
		}

		live, err := x.eng.Stock(x.ctx, seg)
		if err != nil {
			t.Fatalf("Stock(%s): %v", seg, err)
		}
		totals, err := x.db.Totals(x.ctx, seg)
		if err != nil {
			t.Fatalf("Totals(%s): %v", seg, err)
		}
		var fromRedis []store.ItemTotals
		for _, it := range live.Items {
			fromRedis = append(fromRedis, store.ItemTotals{SKU: it.SKU, Stocked: it.Stocked, Sold: it.Sold})
		}
		if !slices.Equal(totals, fromRedis) {
			t.Errorf("segment %s: database totals %+v, Redis %+v", seg, totals, fromRedis)
		}
		for _, it := range totals {
			stocked[it.SKU] += it.Stocked
		}

		rep, err := reconcile.Sale(x.ctx, x.eng, x.rdb, x.db, seg)
		if err != nil {
			t.Fatalf("reconcile %s: %v", seg, err)
		}
		if !rep.Consistent || rep.Drifted() {
			t.Errorf("reconcile %s: %+v", seg, rep)
		}
		for _, it := range rep.Items {
			if it.StockedInDB != it.Stocked {
				t.Errorf("reconcile %s: %s stocked %d in Redis, %d in the database", seg, it.SKU, it.Stocked, it.StockedInDB)
			}
		}
	}
	for f, n := range perUser {
		if n > limit {
			t.Errorf("%s holds %d units over all segments, the limit is %d", f, n, limit)
		}
	}
	return stocked
}

// lose deletes every key of a segment from Redis, its stream and moves
// included, as a flush or a failover to an empty node would.
func (x *e2e) lose(seg string) {
	x.t.Helper()
	var keys []string
	for _, name := range []string{"sale", "bought", "orders", "idem", "events", "initlock"} {
		keys = append(keys, x.eng.Key(seg, name))
	}
	if err := x.rdb.Del(x.ctx, keys...).Err(); err != nil {
		x.t.Fatal(err)
	}
	// (The consumer may make an empty stream again at once: not checked.)
	if n, _ := x.rdb.Exists(x.ctx, keys[:4]...).Result(); n != 0 {
		x.t.Fatalf("%d keys of %s left", n, seg)
	}
}

// attempt is one buy of the run.
type attempt struct {
	user  string
	lines []inventory.Line
	key   string
}

// attempts returns every buyer's buys, round by round, each round's buyers
// shuffled: first 1 or 2 of A (some with a unit of the unlimited B, some
// with one of the small C; half of them with an idempotency key), then one
// A (with a key), then one C alone, then one A. Demand is far beyond the
// stock of A and C.
func attempts(users []string, rng *rand.Rand) []attempt {
	var out []attempt
	for round := range 4 {
		order := rng.Perm(len(users))
		for _, u := range order {
			user := users[u]
			a := attempt{user: user}
			switch round {
			case 0:
				a.lines = []inventory.Line{{SKU: "A", Qty: 1 + int64(rng.IntN(2))}}
				if u%3 == 0 {
					a.lines = append(a.lines, inventory.Line{SKU: "B", Qty: 1})
				}
				if u%4 == 1 {
					a.lines = append(a.lines, inventory.Line{SKU: "C", Qty: 1})
				}
				if u%2 == 0 {
					a.key = "k0-" + user
				}
			case 1:
				a.lines = []inventory.Line{{SKU: "A", Qty: 1}}
				a.key = "k1-" + user
			case 2:
				a.lines = []inventory.Line{{SKU: "C", Qty: 1}}
			case 3:
				a.lines = []inventory.Line{{SKU: "A", Qty: 1}}
			}
			out = append(out, a)
		}
	}
	return out
}

// TestEndToEnd sells a segmented sale to many concurrent buyers on a real
// Redis (one node, and a cluster whose masters hold different segments),
// with a consumer writing every segment's stream to each database, and
// checks the books: exactly the stock sold, every buyer within the limit
// and at home, the database equal to Redis segment by segment (moves
// included), reconciliation clean. Then segments are lost from Redis and
// rebuilt from the database with the same counters.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	const (
		k       = 4
		stockA  = 400
		stockC  = 13
		limit   = 2
		users   = 600
		workers = 64
	)
	for _, b := range backends {
		if b.Name == "miniredis" {
			continue
		}
		for _, d := range dbtest.Dialects(t) {
			t.Run(b.Name+"/"+d.Name, func(t *testing.T) {
				t.Parallel()
				x := newE2E(t, b, d.URL)
				sale := inventory.Sale{ID: "hot", PerUserLimit: limit, Items: []inventory.Item{
					{SKU: "A", Stock: stockA}, {SKU: "B", Stock: inventory.Unlimited}, {SKU: "C", Stock: stockC}}}
				x.createRecorded(sale, k)
				if len(x.ids) != k {
					t.Fatalf("segments %v", x.ids)
				}
				// The buyers: half of them at home in the first segment, so that
				// it runs out long before the others and its buyers must move
				// units from them.
				var buyers []string
				for u, first, rest := 0, 0, 0; first+rest < users; u++ {
					user := fmt.Sprintf("u%04d", u)
					if segment.Home(x.ids, user) == x.ids[0] {
						if first < users/2 {
							first++
							buyers = append(buyers, user)
						}
					} else if rest < users-users/2 {
						rest++
						buyers = append(buyers, user)
					}
				}
				work := attempts(buyers, rand.New(rand.NewPCG(1, uint64(len(b.Name)))))
				jobs := make(chan attempt)
				var (
					mu       sync.Mutex
					receipts []inventory.Receipt
					refused  = map[string]int{}
				)
				var wg sync.WaitGroup
				start := time.Now()
				for range workers {
					wg.Go(func() {
						for a := range jobs {
							rc, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: a.user, Lines: a.lines, IdempotencyKey: a.key})
							mu.Lock()
							switch {
							case err == nil:
								receipts = append(receipts, rc)
							case errors.Is(err, inventory.ErrSoldOut):
								refused["sold out"]++
							case errors.Is(err, inventory.ErrLimitExceeded):
								refused["limit"]++
							default:
								t.Errorf("Buy(%s, %v): %v", a.user, a.lines, err)
							}
							mu.Unlock()
						}
					})
				}
				for _, a := range work {
					jobs <- a
				}
				close(jobs)
				wg.Wait()
				moves, movedUnits := x.sel.Moved()
				t.Logf("%d buys in %v: %d orders, refused %v; %d moves of %d units",
					len(work), time.Since(start).Round(time.Millisecond), len(receipts), refused, moves, movedUnits)
				if t.Failed() {
					t.FailNow()
				}
				if moves == 0 || movedUnits == 0 {
					t.Fatalf("no unit was moved between segments (moves %d, units %d): the buys never fell through", moves, movedUnits)
				}

				// What the buyers got: exactly the stock of A and C, every order in
				// the buyer's home segment, nobody over the limit.
				got := map[string]int64{}
				perUser := map[string]int64{}
				for _, rc := range receipts {
					if home := segment.Home(x.ids, rc.Order.UserID); rc.Order.SaleID != home {
						t.Errorf("order %s of %s is of %s, the user's home is %s", rc.Order.ID, rc.Order.UserID, rc.Order.SaleID, home)
					}
					if seg, err := inventory.SaleOfOrder(rc.Order.ID); err != nil || seg != rc.Order.SaleID {
						t.Errorf("order id %s names segment %q (%v), receipt says %s", rc.Order.ID, seg, err, rc.Order.SaleID)
					}
					for _, l := range rc.Order.Items {
						got[l.SKU] += l.Qty
						perUser[rc.Order.UserID+"|"+l.SKU] += l.Qty
					}
				}
				if got["A"] != stockA || got["C"] != stockC {
					t.Errorf("receipts hold %v, want A=%d C=%d", got, stockA, stockC)
				}
				for f, n := range perUser {
					if n > limit {
						t.Errorf("%s was sold %d units, the limit is %d", f, n, limit)
					}
				}
				ordered := x.ordered("hot")
				if ordered["A"] != stockA || ordered["C"] != stockC || ordered["B"] != got["B"] {
					t.Errorf("Redis's order records hold %v, receipts %v", ordered, got)
				}
				tot := x.totals("hot")
				for sku, want := range map[string]int64{"A": stockA, "C": stockC} {
					it := tot[sku]
					if it.Sold != want || it.Remaining != 0 || it.Stocked != want {
						t.Errorf("Stock of %s summed over the segments: %+v, want %d sold of %d", sku, it, want, want)
					}
				}
				// No move is left half done.
				for _, seg := range x.ids {
					if n, err := x.eng.FinishMoves(x.ctx, seg); err != nil || n != 0 {
						t.Errorf("FinishMoves(%s) = %d, %v: a move was left pending", seg, n, err)
					}
				}

				// The database, once the consumer has caught up.
				x.settle()
				stocked := x.checkBooks(limit)
				if stocked["A"] != stockA || stocked["C"] != stockC || stocked["B"] != inventory.Unlimited*k {
					t.Errorf("database stocked over the segments: %v, want A=%d C=%d", stocked, stockA, stockC)
				}
				// Every move is journaled in both segments: out and in cancel out,
				// and the units in equal what the seller moved.
				var in, out int64
				for _, seg := range x.ids {
					j, err := x.db.Journal(x.ctx, seg)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range j {
						if e.Type != inventory.EventMoved {
							continue
						}
						if e.Qty > 0 {
							in += e.Qty
						} else {
							out -= e.Qty
						}
					}
				}
				if in != out || in != movedUnits {
					t.Errorf("journal: %d units moved in, %d out; the seller moved %d", in, out, movedUnits)
				}
				if t.Failed() {
					t.FailNow()
				}

				// Lose the segment with the most orders; Stock through the seller
				// rebuilds it from the database with the same counters, per-user
				// counts and idempotency keys. First a buyer there takes B in two
				// orders, so that a count sums orders.
				busiest := 0
				for i, seg := range x.ids {
					if len(x.redisOrders(seg)) > len(x.redisOrders(x.ids[busiest])) {
						busiest = i
					}
				}
				lost := x.ids[busiest]
				twice := ""
				for u := 0; twice == ""; u++ {
					if user := fmt.Sprintf("two%04d", u); segment.Home(x.ids, user) == lost {
						twice = user
					}
				}
				for range 2 {
					if _, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: twice,
						Lines: []inventory.Line{{SKU: "B", Qty: 1}}}); err != nil {
						t.Fatalf("Buy of B by %s: %v", twice, err)
					}
				}
				x.settle()
				_, before, err := x.sel.Stock(x.ctx, "hot")
				if err != nil {
					t.Fatal(err)
				}
				heldBefore := map[string]map[string]string{}
				for _, seg := range x.ids {
					heldBefore[seg] = x.held(seg)
				}
				if heldBefore[lost][twice+"|B"] != "2" {
					t.Fatalf("%s holds %q of B, want 2", twice, heldBefore[lost][twice+"|B"])
				}
				x.lose(lost)
				_, after, err := x.sel.Stock(x.ctx, "hot")
				if err != nil {
					t.Fatalf("Stock after losing %s: %v", lost, err)
				}
				for i := range x.ids {
					if !reflect.DeepEqual(after[i], before[i]) {
						t.Errorf("segment %s rebuilt as %+v, was %+v", x.ids[i], after[i], before[i])
					}
				}
				if h := x.held(lost); !reflect.DeepEqual(h, heldBefore[lost]) {
					for f, n := range heldBefore[lost] {
						if h[f] != n {
							t.Errorf("per-user count %s of %s rebuilt as %q, was %q", f, lost, h[f], n)
						}
					}
					t.Errorf("per-user counts of %s: %d entries after the rebuild, %d before", lost, len(h), len(heldBefore[lost]))
				}
				// A buyer of the lost segment at the limit is still at it, and a
				// keyed buy replays its order.
				var keyed, full *inventory.Receipt
				for i := range receipts {
					rc := &receipts[i]
					if rc.Order.SaleID != lost {
						continue
					}
					if keyed == nil && rc.Order.IdempotencyKey != "" {
						keyed = rc
					}
					if full == nil && perUser[rc.Order.UserID+"|A"] == limit {
						full = rc
					}
				}
				if keyed == nil || full == nil {
					t.Fatalf("no keyed order (%v) or buyer at the limit (%v) in %s", keyed, full, lost)
				}
				rc, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: keyed.Order.UserID,
					Lines: keyed.Order.Items, IdempotencyKey: keyed.Order.IdempotencyKey})
				if err != nil || !rc.Replayed || rc.Order.ID != keyed.Order.ID {
					t.Errorf("keyed buy again after the rebuild: %+v, %v; want a replay of %s", rc, err, keyed.Order.ID)
				}
				// (With a key of its own: a seller and engine that know A is sold
				// out would refuse it before Redis sees it.)
				_, err = x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: full.Order.UserID,
					Lines: []inventory.Line{{SKU: "A", Qty: 1}}, IdempotencyKey: "past-the-limit"})
				if !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Errorf("buy of A past the limit after the rebuild: %v, want ErrLimitExceeded", err)
				}
				_, err = x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: twice,
					Lines: []inventory.Line{{SKU: "B", Qty: 1}}})
				if !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Errorf("buy of B past the limit (two orders) after the rebuild: %v, want ErrLimitExceeded", err)
				}

				// Lose another segment; a new buyer at home there rebuilds it
				// through Buy, and the books still balance once settled.
				other := x.ids[(busiest+1)%k]
				var fresh string
				for u := 0; fresh == ""; u++ {
					if user := fmt.Sprintf("new%04d", u); segment.Home(x.ids, user) == other {
						fresh = user
					}
				}
				x.lose(other)
				rc, err = x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: fresh,
					Lines: []inventory.Line{{SKU: "B", Qty: 2}}})
				if err != nil || rc.Order.SaleID != other {
					t.Fatalf("Buy of a new buyer in the lost segment %s: %+v, %v", other, rc, err)
				}
				if _, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "hot", UserID: fresh,
					Lines: []inventory.Line{{SKU: "A", Qty: 1}}}); !errors.Is(err, inventory.ErrSoldOut) {
					t.Errorf("A after the rebuild: %v, want ErrSoldOut", err)
				}
				_, after, err = x.sel.Stock(x.ctx, "hot")
				if err != nil {
					t.Fatal(err)
				}
				for i, seg := range x.ids {
					want := before[i]
					if seg == other {
						want.Items = slices.Clone(want.Items)
						want.Items[1].Sold += 2 // B
					}
					if !reflect.DeepEqual(after[i], want) {
						t.Errorf("segment %s after the second rebuild: %+v, want %+v", seg, after[i], want)
					}
				}
				x.settle()
				stocked = x.checkBooks(limit)
				if stocked["A"] != stockA || stocked["C"] != stockC {
					t.Errorf("database stocked over the segments after the rebuilds: %v", stocked)
				}
			})
		}
	}
}
