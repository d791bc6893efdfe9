package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// recordDB is a stand-in for the system of record: it applies a sale's
// events, read from the stream, the way the order consumer does, and serves
// snapshots of what it has applied.
type recordDB struct {
	mu      sync.Mutex
	sale    inventory.Sale
	orders  map[string]inventory.Order
	applied string
	loads   atomic.Int64
	found   bool
	spent   []inventory.SpentToken
}

// catchUp applies every event of the stream the DB has not applied yet.
func (db *recordDB) catchUp(r *rig, saleID string) {
	r.t.Helper()
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.orders == nil {
		db.orders = map[string]inventory.Order{}
	}
	start := "-"
	if db.applied != "" {
		start = "(" + db.applied
	}
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(saleID), start, "+").Result()
	if err != nil {
		r.t.Fatalf("XRANGE: %v", err)
	}
	evs, err := inventory.ParseEntries(saleID, msgs)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, ev := range evs {
		switch ev.Type {
		case inventory.EventCreated:
			db.sale, db.found = ev.Sale, true
		case inventory.EventBought:
			db.orders[ev.Order.ID] = ev.Order
			if ev.Spent.Token != "" {
				db.spent = append(db.spent, ev.Spent)
			}
		case inventory.EventCancelled:
			o := db.orders[ev.Order.ID]
			o.Status = inventory.OrderCancelled
			db.orders[ev.Order.ID] = o
		case inventory.EventRestocked:
			for i := range db.sale.Items {
				if db.sale.Items[i].SKU == ev.SKU {
					db.sale.Items[i].Stock += ev.Qty
				}
			}
		case inventory.EventPaused, inventory.EventResumed:
			db.sale.Paused = ev.Type == inventory.EventPaused
		}
		db.applied = ev.ID
	}
}

func (db *recordDB) LoadSale(_ context.Context, saleID string) (inventory.Snapshot, error) {
	db.loads.Add(1)
	db.mu.Lock()
	defer db.mu.Unlock()
	if !db.found || db.sale.ID != saleID {
		return inventory.Snapshot{}, inventory.ErrNotFound
	}
	snap := inventory.Snapshot{Sale: db.sale, EventsApplied: db.applied, SpentTokens: db.spent}
	snap.Sale.Items = append([]inventory.Item(nil), db.sale.Items...)
	for _, o := range db.orders {
		snap.Orders = append(snap.Orders, o)
	}
	return snap, nil
}

// lose deletes the sale's live keys, as a flush, an eviction or a failover
// to an empty node would; withStream also deletes its event stream.
func (r *rig) lose(saleID string, withStream bool) {
	r.t.Helper()
	keys := []string{r.key(saleID, "sale"), r.key(saleID, "bought"), r.key(saleID, "orders"), r.key(saleID, "idem")}
	if withStream {
		keys = append(keys, r.key(saleID, "events"))
	}
	if err := r.rdb.Del(r.ctx, keys...).Err(); err != nil {
		r.t.Fatal(err)
	}
}

// lostSale creates sale s1 with one item A, lets the system of record catch
// up with it, and then loses the sale's keys and stream.
func lostSale(t *testing.T, b backend, stock, limit int64) (*rig, *recordDB) {
	t.Helper()
	db := &recordDB{}
	r := newRig(t, b, inventory.Options{Loader: db})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
	db.catchUp(r, "s1")
	r.lose("s1", true)
	return r, db
}

// TestRebuildAfterLoss: a sale's keys vanish mid-sale. The next call
// rebuilds the sale from the system of record: stock, per-user counts,
// idempotency keys, cancellations and restocks all survive.
func TestRebuildAfterLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: -1}}})
		keyed, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 1), "k1")
		if err != nil {
			t.Fatal(err)
		}
		cancelled, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, cancelled.Order.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Restock(r.ctx, "s1", "A", 5); err != nil {
			t.Fatal(err)
		}
		other, err := r.eng.Buy(r.ctx, "s1", "u3", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		before, _ := r.eng.Stock(r.ctx, "s1")
		db.catchUp(r, "s1")
		r.lose("s1", true)

		after, err := r.eng.Stock(r.ctx, "s1")
		if err != nil {
			t.Fatalf("Stock after loss: %v", err)
		}
		if !equalItems(before.Items, after.Items) {
			t.Errorf("rebuilt items %+v, want %+v", after.Items, before.Items)
		}
		if db.loads.Load() != 1 {
			t.Errorf("loaded %d times, want 1", db.loads.Load())
		}
		// u1 holds 2 of A already: the limit survived the loss.
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), ""); !errors.Is(err, inventory.ErrLimitExceeded) {
			t.Errorf("u1 over the limit after rebuild: err = %v", err)
		}
		// The idempotency key survived.
		if rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 1), "k1"); err != nil || !rc.Replayed || rc.Order.ID != keyed.Order.ID {
			t.Errorf("repeat after rebuild = %+v, %v", rc, err)
		}
		// u2's cancelled order is still cancelled; cancelling again changes nothing.
		if rc, err := r.eng.Cancel(r.ctx, cancelled.Order.ID, ""); err != nil || !rc.Replayed {
			t.Errorf("cancel again after rebuild = %+v, %v", rc, err)
		}
		// u3's live order can be cancelled and its unit comes back.
		if rc, err := r.eng.Cancel(r.ctx, other.Order.ID, "u3"); err != nil || rc.Replayed || rc.Remaining[0] != 13 {
			t.Errorf("cancel after rebuild = %+v, %v", rc, err)
		}
	})
}

func equalItems(a, b []inventory.ItemState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRebuildWaitsForOrdersInFlight: the sale's keys are lost but its stream
// still holds orders the system of record has not applied. Rebuilding then
// would sell those units again, so the engine refuses until it catches up.
func TestRebuildWaitsForOrdersInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db, InitTimeout: 200 * time.Millisecond})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
		db.catchUp(r, "s1")
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 3), ""); err != nil {
			t.Fatal(err)
		}
		r.lose("s1", false) // the buy's event is in the stream, not in the DB

		_, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 3), "")
		if !errors.Is(err, inventory.ErrUnavailable) {
			t.Fatalf("buy while orders are in flight: err = %v, want ErrUnavailable", err)
		}
		db.catchUp(r, "s1")
		if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 3), ""); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("buy after catch-up: err = %v, want sold out (2 left)", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 2 {
			t.Errorf("remaining %d, want 2", rem)
		}
	})
}

// TestRebuildSeesEventsTrimmedDuringLoad: a buy's event is in flight when
// the loader reads the system of record, so the snapshot misses its order.
// Before the commit, the consumer stores it, acknowledges it and trims it
// from the stream. The stream's newest entry then says nothing of it; its
// last generated id still does, so the stale snapshot is not committed and
// the units the order took stay sold.
func TestRebuildSeesEventsTrimmedDuringLoad(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		var r *rig
		var first atomic.Bool
		loader := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
			snap, err := db.LoadSale(ctx, id)
			if first.CompareAndSwap(false, true) {
				// The consumer, between this read and the commit.
				db.catchUp(r, id)
				if err := r.rdb.XTrimMaxLen(r.ctx, r.eng.EventsKey(id), 0).Err(); err != nil {
					t.Errorf("XTRIM: %v", err)
				}
			}
			return snap, err
		})
		r = newRig(t, b, inventory.Options{Loader: loader})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
		db.catchUp(r, "s1")
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 3), ""); err != nil {
			t.Fatal(err)
		}
		r.lose("s1", false) // the buy's event is in the stream, not in the DB

		if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 3), ""); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("buy after rebuild: err = %v, want sold out (2 left)", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 2 {
			t.Errorf("remaining %d, want 2: the rebuild restored units u1's order took", rem)
		}
		if n := db.loads.Load(); n < 2 {
			t.Errorf("loaded %d times, want a reload after the stale snapshot", n)
		}
	})
}

// TestStaleRebuildNeverResetsALiveSale: instance A takes the rebuild lock,
// then stalls in its loader past the lock's expiry. Instance B rebuilds and
// sells. When A wakes up with its stale snapshot, its commit must find the
// sale live and change nothing.
func TestStaleRebuildNeverResetsALiveSale(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db := lostSale(t, b, 10, 5)

		stale, _ := db.LoadSale(r.ctx, "s1") // what A will eventually commit
		release := make(chan struct{})
		entered := make(chan struct{})
		slow := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
			close(entered)
			<-release
			return stale, nil
		})
		engA := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Loader: slow, InitLockTTL: 50 * time.Millisecond})
		engB := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Loader: db, InitTimeout: 2 * time.Second})

		resA := make(chan error, 1)
		go func() {
			_, err := engA.Buy(r.ctx, "s1", "a", lines("A", 1), "")
			resA <- err
		}()
		<-entered
		if _, err := engB.Buy(r.ctx, "s1", "b", lines("A", 4), ""); err != nil { // waits out A's lock, then rebuilds
			t.Fatalf("B: %v", err)
		}
		close(release)
		if err := <-resA; err != nil {
			t.Fatalf("A: %v", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 5 {
			t.Errorf("remaining %d, want 5: A's stale rebuild reset B's live counter", rem)
		}
		if h := r.held("s1"); h["b|A"] != 4 || h["a|A"] != 1 {
			t.Errorf("held %v, want b 4 and a 1", h)
		}
	})
}

// TestRebuildStampede: 50 concurrent buys hit a lost sale; one instance
// loads it, the rest wait for it.
func TestRebuildStampede(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db := lostSale(t, b, 30, 1)
		var wg sync.WaitGroup
		var ok, soldOut atomic.Int64
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				eng := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Loader: db}) // one per "instance"
				_, err := eng.Buy(r.ctx, "s1", "u"+string(rune('A'+i%26))+string(rune('a'+i/26)), lines("A", 1), "")
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, inventory.ErrSoldOut):
					soldOut.Add(1)
				default:
					t.Errorf("buy: %v", err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 30 || soldOut.Load() != 20 {
			t.Errorf("%d bought, %d sold out; want 30 and 20", ok.Load(), soldOut.Load())
		}
		if n := db.loads.Load(); n != 1 {
			t.Errorf("the system of record was loaded %d times, want 1", n)
		}
	})
}

func TestUnknownSaleWithLoader(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{Loader: &recordDB{}})
		var nf *inventory.NotFoundError
		if _, err := r.eng.Buy(r.ctx, "nosale", "u1", lines("A", 1), ""); !errors.As(err, &nf) || nf.Kind != "sale" {
			t.Errorf("Buy err = %v, want sale not found", err)
		}
		if _, err := r.eng.Order(r.ctx, "nosale.01JD0000000000000000000000"); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("Order err = %v, want not found", err)
		}
		for _, k := range []string{"sale", "initlock"} {
			if n, _ := r.rdb.Exists(r.ctx, r.key("nosale", k)).Result(); n != 0 {
				t.Errorf("a failed rebuild left %s behind", k)
			}
		}
	})
}

// TestRebuildPipelineAfterScriptFlush: a rebuild stages a large sale in one
// pipeline of script calls. With the script cache just flushed, every call
// of that pipeline answers NOSCRIPT; the engine resends just those, and the
// rebuild completes.
func TestRebuildPipelineAfterScriptFlush(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5000}}})
		const buyers = 1200 // more orders and quotas than one staging chunk holds
		for i := range buyers {
			if _, err := r.eng.Buy(r.ctx, "s1", "u"+strconv.Itoa(i), lines("A", 1), ""); err != nil {
				t.Fatal(err)
			}
		}
		db.catchUp(r, "s1")
		r.lose("s1", true)
		if err := b.flushScripts(r.ctx, r.rdb); err != nil {
			t.Fatal(err)
		}
		before := r.eng.ScriptReloads()
		if rem := r.remaining("s1")["A"]; rem != 5000-buyers {
			t.Errorf("remaining %d after rebuild, want %d", rem, 5000-buyers)
		}
		if got := len(r.held("s1")); got != buyers {
			t.Errorf("%d quotas after rebuild, want %d", got, buyers)
		}
		// initlock + commit + at least 2 staging calls each for bought and orders.
		if n := r.eng.ScriptReloads() - before; n < 6 {
			t.Errorf("%d scripts reloaded, want at least 6", n)
		}
	})
}

// TestSaleHashIsATable: Redis keeps a sale's hash as a hash table, not a
// listpack, from its first write, whether create made it or a rebuild did
// (each buy reads eight of its fields and writes two: in a listpack every
// one of those is a scan of the hash). Buys of it still sell.
func TestSaleHashIsATable(t *testing.T) {
	for _, b := range backends {
		if b.name == "miniredis" {
			continue // it has no encodings
		}
		t.Run(b.name, func(t *testing.T) {
			r, db := lostSale(t, b, 5, 1)
			// (lostSale lost the sale: make one more, by create, to compare)
			r.create(inventory.Sale{ID: "s2", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
			for _, id := range []string{"s2", "s1"} { // s1: rebuilt by this buy
				if _, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), ""); err != nil {
					t.Fatalf("buy of %s: %v", id, err)
				}
				enc, err := r.rdb.ObjectEncoding(r.ctx, r.key(id, "sale")).Result()
				if err != nil || enc != "hashtable" {
					t.Errorf("sale %s's hash is %q (%v), want hashtable", id, enc, err)
				}
				if st, err := r.eng.Stock(r.ctx, id); err != nil || st.Items[0].Remaining != 4 {
					t.Errorf("sale %s: %+v, %v", id, st, err)
				}
			}
			if db.loads.Load() != 1 {
				t.Errorf("loaded %d times, want 1 (s1 rebuilt once)", db.loads.Load())
			}
		})
	}
}
