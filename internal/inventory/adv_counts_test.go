package inventory_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// advCount checks the sale's "orders" count (OrderCounts) against the
// records its orders hash holds.
func advCount(t *testing.T, r *rig, sale, when string) {
	t.Helper()
	n, errs := r.eng.OrderCounts(r.ctx, []string{sale})
	if want := int64(len(r.orders(sale))); errs[0] != nil || n[0] != want {
		t.Errorf("%s: OrderCounts = %d, %v; the orders hash holds %d records", when, n[0], errs[0], want)
	}
}

// TestAdvCountsThroughALifecycle: the count stays the number of records
// through buys (coalesced, repeats, refusals), cancel, pay, expire,
// restock, a rebuild after a flush, and a repair of a count that drifted
// or of an order only the database has (degraded mode's recovery).
func TestAdvCountsThroughALifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, rcs := busySale(t, b)
		advCount(t, r, "s1", "busySale")
		var reqs []inventory.BuyRequest
		for i := range 6 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("c%d", i), Lines: lines("A", 1)})
		}
		reqs = append(reqs,
			inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 2, "U", 1), IdempotencyKey: "k1"}, // replay
			inventory.BuyRequest{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},                               // over the limit
			inventory.BuyRequest{SaleID: "s1", UserID: "c0", Lines: lines("A", 1), IdempotencyKey: "x"},          // bought
			inventory.BuyRequest{SaleID: "s1", UserID: "c0", Lines: lines("A", 1), IdempotencyKey: "x"})          // its repeat
		r.eng.BuyMany(r.ctx, reqs)
		advCount(t, r, "s1", "a coalesced call")
		if _, err := r.eng.Cancel(r.ctx, rcs["u2"].Order.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Restock(r.ctx, "s1", "A", 3); err != nil {
			t.Fatal(err)
		}
		advCount(t, r, "s1", "cancel, restock")

		// A count that drifted is repaired, and the repair says so.
		db.consume(r, "s1")
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "sale"), "orders", 99).Err())
		rep, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil {
			t.Fatal(err)
		}
		advCount(t, r, "s1", "a repair of a drifted count")
		if !rep.Changed() {
			t.Errorf("Repair of orders 99 reports no change: %+v", rep)
		}

		// An order only the database holds (sold in degraded mode).
		dbo := inventory.Order{ID: inventory.NewOrderID("s1"), SaleID: "s1", UserID: "d1", Status: inventory.OrderPending,
			Items: lines("A", 1), CreatedAt: time.UnixMilli(r.clock.Now().UnixMilli()).UTC()}
		db.mu.Lock()
		db.orders[dbo.ID] = dbo
		db.mu.Unlock()
		if _, err := r.eng.Repair(r.ctx, "s1", db); err != nil {
			t.Fatal(err)
		}
		advCount(t, r, "s1", "a repair that adds the database's order")

		// A flush: the next buy rebuilds the sale.
		r.lose("s1", false)
		if _, err := r.eng.Buy(r.ctx, "s1", "n1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		advCount(t, r, "s1", "a rebuild, then a buy")
	})
}

// TestAdvCountsPayAndExpire: paying and expiring change records, not
// their number.
func TestAdvCountsPayAndExpire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "p", PerUserLimit: 2, PaymentTimeout: 5 * time.Second, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		var rcs []inventory.Receipt
		for i := range 3 {
			rc, err := r.eng.Buy(r.ctx, "p", "u"+strconv.Itoa(i), lines("A", 1), "")
			mustDo(t, err)
			rcs = append(rcs, rc)
		}
		if _, _, err := r.eng.Pay(r.ctx, rcs[0].Order.ID, "u0", "ref"); err != nil {
			t.Fatal(err)
		}
		r.clock.Set(rcs[2].Order.CreatedAt.Add(10 * time.Second))
		if ids, _, err := r.eng.ExpireDue(r.ctx, "p", 10); err != nil || len(ids) != 2 {
			t.Fatalf("ExpireDue = %v, %v", ids, err)
		}
		advCount(t, r, "p", "pay, expire")
	})
}

// TestAdvCountsLegacyResendByOrderID: a caller resends, with the same
// BuyRequest.OrderID (its documented use: a buy whose outcome was
// unknown), a buy an engine before order groups made: a field of its own.
// The resend must replay that order, not sell it a second time.
func TestAdvCountsLegacyResendByOrderID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, rcs := busySale(t, b)
		r.toOwnFields("s1")
		before := r.remaining("s1")["A"]
		id := rcs["u2"].Order.ID
		rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), OrderID: id})
		if err != nil || !rc.Retried || rc.Order.ID != id {
			t.Errorf("resend of u2's order = %+v, %v; want it answered as a retry", rc, err)
		}
		if got := r.remaining("s1")["A"]; got != before {
			t.Errorf("remaining A %d after the resend, was %d: sold twice", got, before)
		}
		if v, _ := r.rdb.HExists(r.ctx, r.key("s1", "orders"), inventory.OrderGroup(id)).Result(); v {
			t.Errorf("order %s is now in its group and in its own field", id)
		}
		advCount(t, r, "s1", "a resend of a legacy order")
	})
}

// TestAdvCountsOwnFieldAndGroupHoldOneOrder: an order's record in its own
// field and in its group (as the resend above leaves it). UnitsInOrders
// must not count it twice, and Repair must settle: a second repair
// changes nothing, and one record is left.
func TestAdvCountsOwnFieldAndGroupHoldOneOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, rcs := busySale(t, b)
		r.toOwnFields("s1")
		id := rcs["u3"].Order.ID
		rec := r.orders("s1")[id]
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup(id), id+"|"+rec).Err())
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err == nil && units["A"] != 6 {
			t.Errorf("UnitsInOrders = %v; want A 6 (or ErrCorrupt)", units)
		}
		for i := range 3 {
			rep, err := r.eng.Repair(r.ctx, "s1", db)
			if err != nil {
				t.Fatalf("repair %d: %v", i, err)
			}
			if i > 0 && rep.Changed() {
				t.Errorf("repair %d still changes: %+v", i, rep.Changes)
			}
		}
		h, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "orders")).Result()
		_, own := h[id]
		_, group := h[inventory.OrderGroup(id)]
		if own && group {
			t.Errorf("after repairs u3's order is still in its own field and in its group")
		}
		if _, err := r.eng.UnitsInOrders(r.ctx, "s1"); err != nil {
			t.Errorf("UnitsInOrders after repairs: %v", err)
		}
	})
}

// TestAdvCountsUnitsAcrossScanPages: an order in its own field and in its
// group, in a hash big enough that HSCAN returns them on different pages:
// UnitsInOrders must not count it twice.
func TestAdvCountsUnitsAcrossScanPages(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5000}}})
	var reqs []inventory.BuyRequest
	for i := range 3000 {
		reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: "u" + strconv.Itoa(i), Lines: lines("A", 1)})
	}
	for _, br := range r.eng.BuyMany(r.ctx, reqs) {
		mustDo(t, br.Err)
	}
	r.toOwnFields("s1")
	key := r.key("s1", "orders")
	pages := func() map[string]int { // field -> its HSCAN page, as UnitsInOrders reads them
		out := map[string]int{}
		var cursor uint64
		for p := 0; ; p++ {
			kv, next, err := r.rdb.HScan(r.ctx, key, cursor, "", 1000).Result()
			mustDo(t, err)
			for i := 0; i < len(kv); i += 2 {
				out[kv[i]] = p
			}
			if cursor = next; cursor == 0 {
				return out
			}
		}
	}
	recs := r.orders("s1")
	found := false
	for id, rec := range recs {
		g := inventory.OrderGroup(id)
		mustDo(t, r.rdb.HSet(r.ctx, key, g, id+"|"+rec).Err())
		if pg := pages(); pg[g] != pg[id] {
			found = true
			break
		}
		mustDo(t, r.rdb.HDel(r.ctx, key, g).Err())
	}
	if !found {
		t.Skip("no order whose own field and group fall on different pages")
	}
	units, err := r.eng.UnitsInOrders(r.ctx, "s1")
	if err == nil && units["A"] != 3000 {
		t.Errorf("UnitsInOrders = %v; want A 3000 (or ErrCorrupt)", units)
	}
}

// TestAdvCountsLegacyFirstBuysConcurrently: a sale of own fields gets its
// first buys from two engines at once (the count starts from HLEN in one
// of them): the count ends equal to the records.
func TestAdvCountsLegacyFirstBuysConcurrently(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _, _ := busySale(t, b)
		r.toOwnFields("s1")
		other := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock})
		var wg sync.WaitGroup
		for i := range 40 {
			eng := r.eng
			if i%2 == 1 {
				eng = other
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := eng.Buy(r.ctx, "s1", "n"+strconv.Itoa(i), lines("U", 1), "")
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		advCount(t, r, "s1", "40 concurrent first buys")
	})
}

// TestAdvCountsGroupCheckOnRegexSaleIDs: a resend into a sound group of a
// sale whose id has Lua pattern characters ('.', '-') is replayed, not
// refused as corrupt; a new id of the same group joins it.
func TestAdvCountsGroupCheckOnRegexSaleIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		sale := "a.b-c:d_e" // '.' and '-' are Lua pattern characters
		if !inventory.ValidID(sale) {
			t.Fatalf("%q invalid", sale)
		}
		r.create(inventory.Sale{ID: sale, PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
			{SaleID: sale, UserID: "u1", Lines: lines("A", 1)},
			{SaleID: sale, UserID: "u2", Lines: lines("A", 1)},
		})
		mustDo(t, res[0].Err)
		mustDo(t, res[1].Err)
		if inventory.OrderGroup(res[0].Receipt.Order.ID) != inventory.OrderGroup(res[1].Receipt.Order.ID) {
			t.Skip("the call's orders are not of one group")
		}
		rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: "u2", Lines: lines("A", 1), OrderID: res[1].Receipt.Order.ID})
		if err != nil || !rc.Retried {
			t.Errorf("resend = %+v, %v; want it answered as a retry", rc, err)
		}
		g := inventory.OrderGroup(res[0].Receipt.Order.ID)
		id := g + "ZZZZ"
		rc, err = r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: "u3", Lines: lines("A", 1), OrderID: id})
		if err != nil || rc.Replayed || rc.Order.ID != id {
			t.Errorf("new id of the group = %+v, %v", rc, err)
		}
		if errors.Is(err, inventory.ErrCorrupt) {
			t.Error("a sound group refused as corrupt")
		}
		advCount(t, r, sale, "a group of three")
	})
}
