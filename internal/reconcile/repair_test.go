package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// rig is a sale on Redis and a database, with the order consumer running.
type rig struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	eng    *inventory.Engine
	db     *store.Store
	stop   func() // stops the consumer
}

func forEachStack(t *testing.T, f func(t *testing.T, r *rig)) {
	stacks := []struct {
		name string
		open func(t *testing.T) (redis.UniversalClient, string)
	}{
		{"redis+postgres", func(t *testing.T) (redis.UniversalClient, string) {
			return redistest.Standalone(t), dbtest.PostgresURL(t)
		}},
		{"miniredis+sqlite", func(t *testing.T) (redis.UniversalClient, string) {
			c, _ := redistest.Mini(t)
			return c, dbtest.SQLiteURL(t)
		}},
	}
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			rdb, url := st.open(t)
			db, err := store.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			prefix := redistest.Prefix(t, rdb)
			r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: prefix, db: db,
				eng: inventory.New(rdb, inventory.Options{Prefix: prefix})}
			r.start()
			t.Cleanup(func() { r.stop() })
			f(t, r)
		})
	}
}

// start runs the order consumer until stop.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	c := pipeline.New(r.rdb, r.eng, r.db, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	go func() { defer wg.Done(); _ = c.Run(ctx) }()
	r.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
}

func (r *rig) key(name string) string { return "{" + r.prefix + ":s1}:" + name }

func (r *rig) must(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// dropOrder removes order id's record from s1's orders hash, as a Redis
// that lost it would (redistest.DropOrder).
func (r *rig) dropOrder(id string) {
	r.t.Helper()
	redistest.DropOrder(r.ctx, r.t, r.rdb, r.key("orders"), inventory.OrderGroup(id), id)
}

// putOrder writes record as order id's in s1's orders hash, after the other
// orders of its group, as a Redis that sold it would hold it.
func (r *rig) putOrder(id, record string) {
	r.t.Helper()
	key, g := r.key("orders"), inventory.OrderGroup(id)
	v, err := r.rdb.HGet(r.ctx, key, g).Result()
	switch {
	case errors.Is(err, redis.Nil):
		v = id + "|" + record
	case err != nil:
		r.t.Fatal(err)
	default:
		v += "\n" + id + "|" + record
	}
	r.must(r.rdb.HSet(r.ctx, key, g, v).Err())
}

// sale creates s1 (A: 10 units, U: unlimited, 2 per buyer) in the database
// and Redis, as the service does, and buys: u1 2 A + 1 U, u2 1 A, u3 1 A
// (then cancelled).
func (r *rig) sale() map[string]inventory.Receipt {
	r.t.Helper()
	r.must(r.db.CreateSale(r.ctx, store.Sale{Sale: inventory.Sale{ID: "s1", PerUserLimit: 2,
		Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}}}))
	r.must(r.eng.CreateSale(r.ctx, inventory.Sale{ID: "s1", PerUserLimit: 2,
		Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}}))
	rcs := map[string]inventory.Receipt{}
	for _, b := range []struct {
		user  string
		lines []inventory.Line
		key   string
	}{
		{"u1", []inventory.Line{{SKU: "A", Qty: 2}, {SKU: "U", Qty: 1}}, "k1"},
		{"u2", []inventory.Line{{SKU: "A", Qty: 1}}, "k2"},
		{"u3", []inventory.Line{{SKU: "A", Qty: 1}}, ""},
	} {
		rc, err := r.eng.Buy(r.ctx, "s1", b.user, b.lines, b.key)
		r.must(err)
		rcs[b.user] = rc
	}
	_, err := r.eng.Cancel(r.ctx, rcs["u3"].Order.ID, "")
	r.must(err)
	r.settle()
	return rcs
}

// settle waits until the database has every event of the stream.
func (r *rig) settle() {
	r.t.Helper()
	// Twice the usual patience: under the race detector on a loaded 2-core
	// machine the consumer has taken over 30 s to drain the load tests'
	// thousands of events (TestStockedIsExactUnderLoad); it returns as soon
	// as the stream is drained.
	for deadline := time.Now().Add(2 * waitfor.Patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		lag, err := pipeline.ReadLag(r.ctx, r.rdb, r.eng, "s1")
		r.must(err)
		if lag.Entries == 0 && lag.Oldest.IsZero() {
			return
		}
	}
	r.t.Fatal("the consumer did not catch up")
}

func (r *rig) repairs() []store.RepairEntry {
	r.t.Helper()
	got, err := r.db.Repairs(r.ctx, "s1")
	r.must(err)
	return got
}

// hashes is the sale's four hashes in Redis.
func (r *rig) hashes() map[string]map[string]string {
	r.t.Helper()
	out := map[string]map[string]string{}
	for _, name := range []string{"sale", "bought", "orders", "idem"} {
		h, err := r.rdb.HGetAll(r.ctx, r.key(name)).Result()
		r.must(err)
		out[name] = h
	}
	return out
}

// TestRepair: each way Redis can lose or garble writes is found by a pass,
// repaired from the database, journaled, and leaves the sale consistent;
// a second Repair finds nothing to do.
func TestRepair(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(r *rig, rcs map[string]inventory.Receipt)
		// what the pass before the repair must show
		drift, stockDrift, heldDrift, stockedDrift int64
	}{
		{"counter bumped behind the engine's back", func(r *rig, _ map[string]inventory.Receipt) {
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", 3).Err())
		}, 0, 3, 0, 0},
		{"an order the database has, lost with its deduction", func(r *rig, rcs map[string]inventory.Receipt) {
			r.dropOrder(rcs["u2"].Order.ID)
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", 1).Err())
			r.must(r.rdb.HDel(r.ctx, r.key("bought"), "u2|A").Err())
		}, 1, 0, 0, 0},
		{"an order Redis sold that will never reach the database", func(r *rig, _ map[string]inventory.Receipt) {
			r.putOrder("s1.01JD0000000000000000000000", "p|ghost|1795000000000|A=2|")
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", -2).Err())
			r.must(r.rdb.HSet(r.ctx, r.key("bought"), "ghost|A", "2").Err())
		}, -2, 0, 0, 0},
		{"a buyer's count lost", func(r *rig, _ map[string]inventory.Receipt) {
			r.must(r.rdb.HDel(r.ctx, r.key("bought"), "u1|A").Err())
		}, 0, 0, -2, 0},
		{"both stock counters raised by hand", func(r *rig, _ map[string]inventory.Receipt) {
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", 3).Err())
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "t:A", 3).Err())
		}, 0, 0, 0, 3},
		{"a restock whose event never reaches the database", func(r *rig, _ map[string]inventory.Receipt) {
			r.stop()
			_, err := r.eng.Restock(r.ctx, "s1", "A", 5)
			r.must(err)
			last, err := r.rdb.XRevRangeN(r.ctx, r.key("events"), "+", "-", 1).Result()
			r.must(err)
			r.must(r.rdb.XDel(r.ctx, r.key("events"), last[0].ID).Err()) // lost before the consumer read it
			// A later event is delivered, so the stream is settled again.
			_, err = r.eng.Buy(r.ctx, "s1", "u5", []inventory.Line{{SKU: "U", Qty: 1}}, "")
			r.must(err)
			r.start()
			r.settle()
		}, 0, 0, 0, 5},
		{"stock lost from both counters", func(r *rig, _ map[string]inventory.Receipt) {
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", -2).Err())
			r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "t:A", -2).Err())
		}, 0, 0, 0, -2},
		{"Redis back at an older state the database is past", func(r *rig, rcs map[string]inventory.Receipt) {
			old := r.hashes()
			rc, err := r.eng.Buy(r.ctx, "s1", "u4", []inventory.Line{{SKU: "A", Qty: 2}}, "k4")
			r.must(err)
			rcs["u4"] = rc
			_, err = r.eng.Cancel(r.ctx, rcs["u2"].Order.ID, "")
			r.must(err)
			r.settle()
			for name, h := range old {
				r.must(r.rdb.Del(r.ctx, r.key(name)).Err())
				r.must(r.rdb.HSet(r.ctx, r.key(name), h).Err())
			}
		}, 1, 0, 0, 0}, // +2 units of u4 the database has, -1 of u2's cancel it has
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				rcs := r.sale()
				c.spoil(r, rcs)
				got, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
				if err != nil {
					t.Fatalf("Repair: %v", err)
				}
				a := got.Before.Items[0]
				if !got.Before.Drifted() || a.Drift != c.drift || a.StockDrift != c.stockDrift || a.HeldDrift != c.heldDrift ||
					a.StockedDrift != c.stockedDrift || got.Before.Consistent != (c.drift == 0 && c.stockDrift == 0 && c.stockedDrift == 0) {
					t.Errorf("pass before the repair: %+v; want drift %d, stock drift %d, held drift %d, stocked drift %d",
						got.Before, c.drift, c.stockDrift, c.heldDrift, c.stockedDrift)
				}
				if len(got.Changes) == 0 || got.Skipped != "" {
					t.Fatalf("nothing repaired: %+v", got)
				}
				if !got.After.Consistent || got.After.Drifted() {
					t.Errorf("pass after the repair: %+v", got.After)
				}
				journal := r.repairs()
				if len(journal) != len(got.Changes) {
					t.Fatalf("%d changes, %d journaled: %+v", len(got.Changes), len(journal), journal)
				}
				for i, e := range journal {
					ch := got.Changes[i]
					if e.SKU != ch.SKU || e.Field != ch.Field || e.Before != ch.Before || e.After != ch.After || e.Fixed != int64(ch.Fixed) ||
						!strings.HasPrefix(e.Reason, "reconcile: A: ") || time.Since(e.At) > time.Minute {
						t.Errorf("journal row %d %+v for change %+v", i, e, ch)
					}
				}
				// What the database says holds again: limits, keys, cancels.
				if _, err := r.eng.Buy(r.ctx, "s1", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Errorf("u1 past the limit after the repair: %v", err)
				}
				if rc, err := r.eng.Buy(r.ctx, "s1", "u1", []inventory.Line{{SKU: "A", Qty: 2}, {SKU: "U", Qty: 1}}, "k1"); err != nil || rc.Order.ID != rcs["u1"].Order.ID {
					t.Errorf("repeat of k1: %+v, %v", rc, err)
				}

				again, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
				if err != nil || again.Before.Drifted() || len(again.Changes) != 0 || again.Skipped != "" {
					t.Errorf("Repair again = %+v, %v", again, err)
				}
				if n := len(r.repairs()); n != len(journal) {
					t.Errorf("a repair without drift journaled %d rows", n-len(journal))
				}
			})
		})
	}
}

// TestRepairSkipsWhileEventsAreInFlight: with the consumer stopped, a buy's
// event waits in the stream; the drift is reported and left alone (nothing
// written, nothing journaled) until the consumer has stored it.
func TestRepairSkipsWhileEventsAreInFlight(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale()
		r.stop()
		_, err := r.eng.Buy(r.ctx, "s1", "u9", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		r.must(err)
		r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", 4).Err())
		before := r.hashes()

		got, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if !got.Before.Drifted() || len(got.Changes) != 0 || !strings.Contains(got.Skipped, "in flight") {
			t.Fatalf("Repair with an event in flight = %+v", got)
		}
		if got.Before.Items[0].InFlight != 1 || got.Before.Items[0].StockDrift != 4 {
			t.Errorf("pass: %+v", got.Before.Items[0])
		}
		if now := r.hashes(); !equalHashes(now, before) {
			t.Errorf("a skipped repair wrote: %v, was %v", now, before)
		}
		if n := len(r.repairs()); n != 0 {
			t.Errorf("a skipped repair journaled %d rows", n)
		}
		var out bytes.Buffer
		reconcile.PrintRepair(&out, got)
		if !strings.Contains(out.String(), "sale s1: DRIFT") || !strings.Contains(out.String(), "not repaired: events in flight") {
			t.Errorf("printed:\n%s", out.String())
		}

		r.start()
		r.settle()
		got, err = reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
		if err != nil || len(got.Changes) == 0 || got.After.Drifted() {
			t.Fatalf("Repair once stored = %+v, %v", got, err)
		}
		if a := got.After.Items[0]; a.Remaining != 6 || a.Sold != 4 || a.OrdersInDB != 4 {
			t.Errorf("after the repair: %+v; want 6 remaining, 4 sold and stored", a)
		}
		out.Reset()
		reconcile.PrintRepair(&out, got)
		if !strings.Contains(out.String(), "repaired from the database: A remaining 10->6") || !strings.Contains(out.String(), "sale s1: consistent") {
			t.Errorf("printed:\n%s", out.String())
		}
	})
}

func equalHashes(a, b map[string]map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, h := range a {
		if len(h) != len(b[k]) {
			return false
		}
		for f, v := range h {
			if w, ok := b[k][f]; !ok || w != v {
				return false
			}
		}
	}
	return true
}

// TestStockInFlightIsNotDrift: restocks and moves whose events wait in the
// stream are counted in flight, so a pass while the consumer is behind
// finds the stocked totals consistent; once stored, the database has them.
func TestStockInFlightIsNotDrift(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale()
		s2 := inventory.Sale{ID: "s2", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
		r.must(r.db.CreateSale(r.ctx, store.Sale{Sale: s2}))
		r.must(r.eng.CreateSale(r.ctx, s2))
		r.stop()
		_, err := r.eng.Restock(r.ctx, "s1", "A", 4)
		r.must(err)
		if n, err := r.eng.Move(r.ctx, "s1", "s2", "A", 2); err != nil || n != 2 {
			t.Fatalf("Move = %d, %v", n, err)
		}
		for sale, want := range map[string][2]int64{"s1": {10 + 4 - 2, 4 - 2}, "s2": {1 + 2, 2}} {
			rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, sale)
			r.must(err)
			a := rep.Items[0]
			if !rep.Consistent || rep.Drifted() || a.Stocked != want[0] || a.StockedInFlight != want[1] || a.StockedDrift != 0 {
				t.Errorf("%s with stock in flight: %+v; want stocked %d, %d in flight", sale, rep, want[0], want[1])
			}
		}

		r.start()
		r.settle()
		rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, "s1")
		r.must(err)
		if a := rep.Items[0]; !rep.Consistent || a.StockedInDB != 12 || a.StockedInFlight != 0 || a.StockedDrift != 0 {
			t.Errorf("s1 once stored: %+v", rep)
		}
	})
}

// TestRepairOnlyWhileRedisSells: while the database sells (degraded mode,
// the sale fenced in Redis) and while Redis is being recovered, the
// database is ahead of Redis by design: Repair writes nothing and journals
// nothing, and says why. Once the mode is redis again, the same difference
// is drift (no recovery repaired it here) and Repair repairs it.
func TestRepairOnlyWhileRedisSells(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale()
		remaining := func() int64 {
			t.Helper()
			st, err := r.eng.Stock(r.ctx, "s1")
			r.must(err)
			return st.Items[0].Remaining
		}
		m, err := r.db.SellMode(r.ctx)
		r.must(err)
		now := time.Now()
		dbMode, err := r.db.SwitchMode(r.ctx, m.Epoch, store.ModeDB, now, now, "test: the database sells")
		r.must(err)
		_, err = r.eng.Fence(r.ctx, "s1", dbMode.Epoch)
		r.must(err)
		u4, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u4", Lines: []inventory.Line{{SKU: "A", Qty: 2}}, IdempotencyKey: "k4"})
		r.must(err)
		_, err = r.db.Buy(r.ctx, store.DegradedBuy{Epoch: dbMode.Epoch, Buy: u4, Now: time.Now()})
		r.must(err)
		if rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, "s1"); err != nil || rep.Items[0].Drift != 2 {
			t.Fatalf("the comparison while the database sells: %+v, %v; want drift 2 (it reports, it does not repair)", rep, err)
		}
		noRepair := func(when, skipped string) {
			t.Helper()
			res, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
			if err != nil || len(res.Changes) != 0 || !strings.Contains(res.Skipped, skipped) {
				t.Errorf("Repair %s: %+v, %v; want skipped %q", when, res, err, skipped)
			}
			if got := r.repairs(); remaining() != 7 || len(got) != 0 {
				t.Errorf("after Repair %s: remaining %d (want 7, untouched), repairs %+v", when, remaining(), got)
			}
		}
		noRepair("while the database sells", "degraded mode (db")
		rec, err := r.db.SwitchMode(r.ctx, dbMode.Epoch, store.ModeRecovering, time.Now(), time.Time{}, "test: recovering")
		r.must(err)
		noRepair("while recovering", "degraded mode (recovering")
		back, err := r.db.SwitchMode(r.ctx, rec.Epoch, store.ModeRedis, time.Now(), time.Time{}, "test: redis sells, not repaired")
		r.must(err)
		r.must(r.eng.Unfence(r.ctx, "s1", back.Epoch))
		res, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
		if err != nil || len(res.Changes) == 0 || res.After.Drifted() || remaining() != 5 {
			t.Errorf("Repair once Redis sells: %+v, %v; remaining %d, want 5", res, err, remaining())
		}
	})
}
