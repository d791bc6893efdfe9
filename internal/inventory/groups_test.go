package inventory_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// TestACallsOrdersAreOneField: the buys of one call get order ids of one
// group, and their records are one field of the orders hash. Each order is
// still read, paid and cancelled on its own, by its id alone, and a cancel
// changes its record and no other.
func TestACallsOrdersAreOneField(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, PaymentTimeout: time.Hour,
			Items: []inventory.Item{{SKU: "A", Stock: 100}, {SKU: "B", Stock: 100}}})
		var reqs []inventory.BuyRequest
		for i := range 40 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1, "B", 1)})
		}
		res := r.eng.BuyMany(r.ctx, reqs)
		group := ""
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
			g := inventory.OrderGroup(br.Receipt.Order.ID)
			if group == "" {
				group = g
			}
			if g != group {
				t.Fatalf("order %d is of group %s, order 0 of %s: one call, one group", i, g, group)
			}
		}
		if n, err := r.rdb.HLen(r.ctx, r.key("s1", "orders")).Result(); err != nil || n != 1 {
			t.Fatalf("the orders hash has %d fields (%v), want 1 for one call", n, err)
		}
		before := r.orders("s1")
		if len(before) != 40 {
			t.Fatalf("%d order records, want 40", len(before))
		}
		for i, br := range res {
			o, err := r.eng.Order(r.ctx, br.Receipt.Order.ID)
			if err != nil || o.UserID != reqs[i].UserID || o.Status != inventory.OrderPending {
				t.Fatalf("Order(%s) = %+v, %v; want %s's, pending", br.Receipt.Order.ID, o, err, reqs[i].UserID)
			}
		}

		// Cancel one in the middle, pay another: only their own records change.
		mid, paid := res[20].Receipt.Order, res[21].Receipt.Order
		if rc, err := r.eng.Cancel(r.ctx, mid.ID, mid.UserID); err != nil || rc.Order.Status != inventory.OrderCancelled {
			t.Fatalf("Cancel = %+v, %v", rc, err)
		}
		if _, _, err := r.eng.Pay(r.ctx, paid.ID, paid.UserID, "ref-1"); err != nil {
			t.Fatalf("Pay: %v", err)
		}
		if o, err := r.eng.Payment(r.ctx, paid.ID); err != nil || o.Payment != inventory.PaymentPaid || o.PaymentRef != "ref-1" {
			t.Fatalf("Payment(%s) = %+v, %v; want paid with ref-1", paid.ID, o, err)
		}
		after := r.orders("s1")
		if want := "c" + before[mid.ID][1:]; after[mid.ID] != want {
			t.Errorf("cancelled record %q, want %q", after[mid.ID], want)
		}
		delete(before, mid.ID)
		delete(after, mid.ID)
		if !maps.Equal(before, after) {
			t.Errorf("a cancel changed other orders' records:\nbefore %v\nafter  %v", before, after)
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err != nil || units["A"] != 39 || units["B"] != 39 {
			t.Errorf("UnitsInOrders = %v, %v; want 39 of A and B", units, err)
		}
		// A buy of its own call is a field of its own.
		if _, err := r.eng.Buy(r.ctx, "s1", "u99", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		if n, _ := r.rdb.HLen(r.ctx, r.key("s1", "orders")).Result(); n != 2 {
			t.Errorf("the orders hash has %d fields after a second call, want 2", n)
		}
	})
}

// TestALostCallsOrdersAreFoundInTheirGroup: a call of many buys runs and
// its reply is lost; each buy is sent again alone, under its id, and finds
// its own order in the group the call wrote: no buy is made twice, and the
// group still holds each order once.
func TestALostCallsOrdersAreFoundInTheirGroup(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := backend{client: func(testing.TB) redis.UniversalClient { return rdb }}
	r := newRig(t, b, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 101}}})
	// A first buy loads the script: the lost call below then runs.
	if _, err := r.eng.Buy(r.ctx, "s1", "w0", lines("A", 1), ""); err != nil {
		t.Fatal(err)
	}
	f := &lostPipeline{}
	f.armed.Store(true)
	rdb.AddHook(f)

	var reqs []inventory.BuyRequest
	for i := range 30 {
		reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
	}
	for i, br := range r.eng.BuyMany(r.ctx, reqs) {
		if br.Err != nil || !br.Receipt.Retried {
			t.Errorf("buy %d: %+v, %v; want its own order, found again (Retried)", i, br.Receipt, br.Err)
		}
	}
	if f.armed.Load() {
		t.Fatal("the call's pipeline was not lost")
	}
	if rem := r.remaining("s1")["A"]; rem != 70 {
		t.Errorf("remaining %d, want 70: a resend bought again", rem)
	}
	if n := len(r.orders("s1")); n != 31 {
		t.Errorf("%d order records, want 31", n)
	}
	if n, _ := r.rdb.HLen(r.ctx, r.key("s1", "orders")).Result(); n != 2 {
		t.Errorf("the orders hash has %d fields, want the first buy's and the call's", n)
	}
}

// TestAnUnknownOutcomeNamesTheOrder: a buy whose every attempt lost its
// reply fails with the transport error, and its receipt names the order it
// made (the engine chose the id, so the caller has no other way to know
// it); a refused buy's receipt names none.
func TestAnUnknownOutcomeNamesTheOrder(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := backend{client: func(testing.TB) redis.UniversalClient { return rdb }}
	r := newRig(t, b, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
	if _, err := r.eng.Buy(r.ctx, "s1", "w0", lines("A", 1), ""); err != nil { // loads the script
		t.Fatal(err)
	}
	f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: true}
	f.failing.Store(3)
	rdb.AddHook(f)

	c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := r.eng.BuyChecked(r.ctx, c.WithNewOrderID("s1"))
	if !errors.Is(err, io.ErrUnexpectedEOF) || !inventory.OutcomeUnknown(err) {
		t.Fatalf("BuyChecked err = %v, want the transport error", err)
	}
	o, oerr := r.eng.Order(r.ctx, rc.Order.ID)
	if oerr != nil || o.UserID != "u1" {
		t.Fatalf("the receipt names order %q; Order = %+v, %v; want the order the buy made", rc.Order.ID, o, oerr)
	}
	if n := len(r.orders("s1")); n != 2 {
		t.Errorf("%d order records, want 2", n)
	}
	// A known outcome names no order.
	rc, err = r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), "")
	if !errors.Is(err, inventory.ErrLimitExceeded) || rc.Order.ID != "" {
		t.Errorf("over the limit: %+v, %v; want ErrLimitExceeded and no order", rc, err)
	}
}

// toOwnFields turns the sale's orders hash back into what an engine before
// order groups wrote: a field per order, its value the record alone, and no
// "orders" count in the sale hash.
func (r *rig) toOwnFields(sale string) {
	r.t.Helper()
	key := r.key(sale, "orders")
	groups, err := r.rdb.HGetAll(r.ctx, key).Result()
	mustDo(r.t, err)
	for g := range groups {
		mustDo(r.t, r.rdb.HDel(r.ctx, key, g).Err())
	}
	for id, rec := range inventory.OrderRecords(groups) {
		mustDo(r.t, r.rdb.HSet(r.ctx, key, id, rec).Err())
	}
	mustDo(r.t, r.rdb.HDel(r.ctx, r.key(sale, "sale"), "orders").Err())
}

// TestOrdersStoredBeforeGroupsStillServe: a sale an engine before order
// groups stored keeps its records in a field per order. Its orders are
// read, replayed by key, cancelled and counted; new buys join it by group;
// a repair finds nothing to change, and after a record is lost it puts the
// record back (in its group) and removes nothing else.
func TestOrdersStoredBeforeGroupsStillServe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, rcs := busySale(t, b)
		r.toOwnFields("s1")
		old := r.orders("s1")
		if len(old) != 4 {
			t.Fatalf("%d records, want busySale's 4", len(old))
		}
		if n, err := r.eng.OrderCounts(r.ctx, []string{"s1"}); err[0] != nil || n[0] != 4 {
			t.Errorf("OrderCounts = %v, %v; want 4", n, err)
		}
		if o, err := r.eng.Order(r.ctx, rcs["u2"].Order.ID); err != nil || o.UserID != "u2" {
			t.Errorf("Order(u2's) = %+v, %v", o, err)
		}
		if rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 1), "k1"); err != nil || !rc.Replayed || rc.Order.ID != rcs["u1"].Order.ID {
			t.Errorf("repeat of k1 = %+v, %v; want u1's order replayed", rc, err)
		}
		if repaired, err := r.eng.Repair(r.ctx, "s1", db); err != nil || repaired.Changed() {
			t.Errorf("Repair of a sound sale of own fields = %+v, %v; want nothing changed", repaired, err)
		}
		if rc, err := r.eng.Cancel(r.ctx, rcs["u2"].Order.ID, "u2"); err != nil || rc.Order.Status != inventory.OrderCancelled {
			t.Errorf("Cancel(u2's) = %+v, %v", rc, err)
		}
		if rec := r.orders("s1")[rcs["u2"].Order.ID]; rec == "" || rec[0] != 'c' {
			t.Errorf("u2's record after the cancel: %q", rec)
		}
		if _, err := r.eng.Buy(r.ctx, "s1", "u5", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		if n, err := r.eng.OrderCounts(r.ctx, []string{"s1"}); err[0] != nil || n[0] != 5 {
			t.Errorf("OrderCounts after a new buy = %v, %v; want 5", n, err)
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err != nil || units["A"] != 2+3+1 || units["U"] != 3 {
			t.Errorf("UnitsInOrders = %v, %v; want A 6, U 3", units, err)
		}

		// A record lost is put back, in its group; the other own fields stay.
		db.consume(r, "s1")
		before := r.orders("s1")
		mustDo(t, r.rdb.HDel(r.ctx, r.key("s1", "orders"), rcs["u3"].Order.ID).Err())
		// ... and a record gone wrong in its own field: it moves to its group.
		u4 := rcs["u4"].Order.ID
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "orders"), u4, "p"+before[u4][1:]).Err())
		repaired, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil || !repaired.Changed() {
			t.Fatalf("Repair of a lost record = %+v, %v", repaired, err)
		}
		if after := r.orders("s1"); !maps.Equal(after, before) {
			t.Errorf("after the repair:\n%v\nwant\n%v", after, before)
		}
		if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "orders"), rcs["u1"].Order.ID).Result(); v != before[rcs["u1"].Order.ID] {
			t.Errorf("u1's own field %q after the repair: a sound record was moved", v)
		}
		if n, _ := r.rdb.HExists(r.ctx, r.key("s1", "orders"), u4).Result(); n {
			t.Error("the repaired record's own field is still there")
		}
		if again, err := r.eng.Repair(r.ctx, "s1", db); err != nil || again.Changed() {
			t.Errorf("second Repair = %+v, %v; want nothing changed", again, err)
		}
	})
}

// TestAResendIntoACorruptGroupIsRefused: a call's group whose value is not
// its orders is corrupt; a resend of a buy of that call is refused as
// corrupt rather than bought again on top of it.
func TestAResendIntoACorruptGroupIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		id := inventory.NewOrderID("s1")
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup(id), "garbage").Err())
		_, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: id})
		if !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("buy under an id of a corrupt group: %v, want ErrCorrupt", err)
		}
		if rem := r.remaining("s1")["A"]; rem != 10 {
			t.Errorf("remaining %d, want 10", rem)
		}
	})
}

// TestGroupsOfWholeIDsStillServe: a group's value written before its lines
// left the group out names each order by its whole id. Its orders are
// read, resent, cancelled, counted and repaired as a group of tails is; a
// buy that joins it (an order id its caller chose, of the group) adds a
// line of its tail, and both kinds of line are read side by side.
func TestGroupsOfWholeIDsStillServe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		var reqs []inventory.BuyRequest
		for i := range 6 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
		}
		res := r.eng.BuyMany(r.ctx, reqs)
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
		}
		key, g := r.key("s1", "orders"), inventory.OrderGroup(res[0].Receipt.Order.ID)
		tails, err := r.rdb.HGet(r.ctx, key, g).Result()
		mustDo(t, err)
		if line, _, _ := strings.Cut(tails, "\n"); !strings.HasPrefix(line, strings.TrimPrefix(res[0].Receipt.Order.ID, g)+"|") {
			t.Fatalf("the group's first line %q does not name its order by its tail", line)
		}
		// The value as it was written before: whole ids.
		records := r.orders("s1")
		var whole []string
		for _, br := range res {
			id := br.Receipt.Order.ID
			whole = append(whole, id+"|"+records[id])
		}
		mustDo(t, r.rdb.HSet(r.ctx, key, g, strings.Join(whole, "\n")).Err())
		if got := r.orders("s1"); !maps.Equal(got, records) {
			t.Fatalf("records of whole ids:\n%v\nwant\n%v", got, records)
		}

		// A buy joins the group.
		joinID := g + "ZZZZ"
		rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "j", Lines: lines("A", 2), OrderID: joinID})
		if err != nil || rc.Order.ID != joinID {
			t.Fatalf("a buy of the group's order id: %+v, %v", rc, err)
		}
		v, err := r.rdb.HGet(r.ctx, key, g).Result()
		mustDo(t, err)
		if want := strings.Join(whole, "\n") + "\nZZZZ|"; !strings.HasPrefix(v, want) {
			t.Fatalf("the group after a buy joined it: %q, want it to start %q", v, want)
		}
		for i, br := range append(res, inventory.BuyResult{Receipt: rc}) {
			o, err := r.eng.Order(r.ctx, br.Receipt.Order.ID)
			if err != nil || o.UserID != br.Receipt.Order.UserID || o.Status != inventory.OrderPending {
				t.Errorf("Order %d = %+v, %v; want %s's, pending", i, o, err, br.Receipt.Order.UserID)
			}
		}
		if _, err := r.eng.Cancel(r.ctx, res[2].Receipt.Order.ID, "u2"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, joinID, "j"); err != nil {
			t.Fatal(err)
		}
		after := r.orders("s1")
		for id, rec := range records {
			if want := rec; id == res[2].Receipt.Order.ID {
				want = "c" + rec[1:]
				if after[id] != want {
					t.Errorf("cancelled %s: %q, want %q", id, after[id], want)
				}
			} else if after[id] != want {
				t.Errorf("a cancel changed %s: %q, want %q", id, after[id], want)
			}
		}
		if rec := after[joinID]; !strings.HasPrefix(rec, "c|j|") {
			t.Errorf("the joining order after its cancel: %q", rec)
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err != nil || units["A"] != 5 {
			t.Errorf("UnitsInOrders = %v, %v; want 5 of A", units, err)
		}
		remaining := r.remaining("s1")["A"]
		for i, br := range res {
			resend := reqs[i]
			resend.OrderID = br.Receipt.Order.ID
			if rc, err := r.eng.BuyWith(r.ctx, resend); err != nil || !rc.Retried || rc.Order.ID != br.Receipt.Order.ID {
				t.Errorf("resend %d: %+v, %v; want its order found", i, rc, err)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != remaining || rem != 95 {
			t.Errorf("remaining %d (before the resends %d), want 95", rem, remaining)
		}
		db.consume(r, "s1")
		if repaired, err := r.eng.Repair(r.ctx, "s1", db); err != nil || repaired.Changed() {
			t.Errorf("Repair of a sound group of both kinds of line = %+v, %v; want nothing changed", repaired, err)
		}
	})
}
