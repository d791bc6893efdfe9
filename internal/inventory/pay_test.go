package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// paySale creates sale "s" with sku A (stock units), limit 2, and a payment
// timeout of timeout (0: none).
func (r *rig) paySale(id string, stock int64, timeout time.Duration) {
	r.t.Helper()
	r.create(inventory.Sale{ID: id, PerUserLimit: 2, PaymentTimeout: timeout,
		Items: []inventory.Item{{SKU: "A", Stock: stock}}})
}

// buyEach buys one unit of A in sale for each user, in turn, and returns
// the orders' ids.
func (r *rig) buyEach(sale string, users ...string) []string {
	r.t.Helper()
	var ids []string
	for _, u := range users {
		rc, err := r.eng.Buy(r.ctx, sale, u, lines("A", 1), "")
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, rc.Order.ID)
	}
	return ids
}

// payment returns the order's payment step as Redis holds it.
func (r *rig) payment(id string) inventory.Order {
	r.t.Helper()
	o, err := r.eng.Payment(r.ctx, id)
	if err != nil {
		r.t.Fatalf("Payment(%s): %v", id, err)
	}
	return o
}

// TestPayOutcomes covers every reply of pay.lua, and that a buy of a sale
// with a payment timeout files its order in the deadlines with pay_by =
// its time + the timeout, by the script's clock.
func TestPayOutcomes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, 10*time.Second)
		r.paySale("free", 10, 0)

		rc, err := r.eng.Buy(r.ctx, "s", "u1", lines("A", 2), "")
		if err != nil {
			t.Fatal(err)
		}
		o := r.payment(rc.Order.ID)
		if o.Payment != inventory.PaymentAwaiting || !o.PayBy.Equal(rc.Order.CreatedAt.Add(10*time.Second)) {
			t.Fatalf("after the buy: payment %q pay_by %v, want awaiting, %v", o.Payment, o.PayBy, rc.Order.CreatedAt.Add(10*time.Second))
		}
		if got := r.counter("s", func(it inventory.ItemState) int64 { return it.Awaiting }); got["A"] != 2 {
			t.Fatalf("awaiting units %v, want A: 2", got)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc.Order.ID, "u2", "ref-1"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("pay of another user's order: %v, want ErrNotFound", err)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc.Order.ID, "u1", "bad\x01ref"); !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("pay with a bad ref: %v, want ErrInvalid", err)
		}
		paid, replayed, err := r.eng.Pay(r.ctx, rc.Order.ID, "u1", "ref-1")
		if err != nil || replayed || paid.Payment != inventory.PaymentPaid || paid.PaymentRef != "ref-1" {
			t.Fatalf("pay: %+v replayed %v err %v", paid, replayed, err)
		}
		if _, replayed, err := r.eng.Pay(r.ctx, rc.Order.ID, "", "ref-1"); err != nil || !replayed {
			t.Fatalf("pay again with the same ref: replayed %v err %v", replayed, err)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc.Order.ID, "u1", "ref-2"); !errors.Is(err, inventory.ErrAlreadyPaid) {
			t.Fatalf("pay with another ref: %v, want ErrAlreadyPaid", err)
		}
		if o := r.payment(rc.Order.ID); o.Payment != inventory.PaymentPaid || o.PaymentRef != "ref-1" {
			t.Fatalf("after the pay: %+v", o)
		}
		if got := r.counter("s", func(it inventory.ItemState) int64 { return it.Awaiting }); got["A"] != 0 {
			t.Fatalf("awaiting units after the pay %v, want A: 0", got)
		}

		// A cancelled reservation is closed.
		rc2, err := r.eng.Buy(r.ctx, "s", "u2", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, rc2.Order.ID, "u2"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc2.Order.ID, "u2", "ref"); !errors.Is(err, inventory.ErrOrderClosed) {
			t.Fatalf("pay of a cancelled order: %v, want ErrOrderClosed", err)
		}
		if o := r.payment(rc2.Order.ID); o.Payment != inventory.PaymentExpired {
			t.Fatalf("cancelled reservation: payment %q, want expired", o.Payment)
		}

		// At pay_by the pay loses, even before the expiry ran.
		rc3, err := r.eng.Buy(r.ctx, "s", "u3", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		r.clock.Set(rc3.Order.CreatedAt.Add(10 * time.Second))
		if _, _, err := r.eng.Pay(r.ctx, rc3.Order.ID, "u3", "ref"); !errors.Is(err, inventory.ErrOrderClosed) {
			t.Fatalf("pay at pay_by: %v, want ErrOrderClosed", err)
		}
		ids, more, err := r.eng.ExpireDue(r.ctx, "s", 10)
		if err != nil || more || len(ids) != 1 || ids[0] != rc3.Order.ID {
			t.Fatalf("ExpireDue = %v, %v, %v; want [%s]", ids, more, err, rc3.Order.ID)
		}
		if o := r.payment(rc3.Order.ID); o.Payment != inventory.PaymentExpired || o.Status != inventory.OrderCancelled {
			t.Fatalf("expired order: %+v", o)
		}

		// A sale without a payment step.
		rc4, err := r.eng.Buy(r.ctx, "free", "u1", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc4.Order.ID, "u1", "ref"); !errors.Is(err, inventory.ErrNoPayment) || !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("pay of an order of a sale without payment: %v, want ErrNoPayment", err)
		}
		if o := r.payment(rc4.Order.ID); o.Payment != inventory.PaymentNotRequired {
			t.Fatalf("order of a sale without payment: %q", o.Payment)
		}
		if n, _ := r.rdb.Exists(r.ctx, r.key("free", "deadlines")).Result(); n != 0 {
			t.Fatal("a sale without a payment timeout filed a deadline")
		}
		var kinds []inventory.EventType
		for _, ev := range r.events("s") {
			kinds = append(kinds, ev.Type)
		}
		want := []inventory.EventType{"created", "bought", "paid", "bought", "cancelled", "bought", "expired"}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Fatalf("events %v, want %v", kinds, want)
		}
	})
}

// TestPayRacesExpiry runs many rounds of a pay arriving at the deadline
// against the expiry (and, every third round, a cancel), each from an
// engine whose clock says the order is still payable (pay: pay_by - 1 ms)
// or due (expiry: pay_by), sent at once. Exactly one of pay and expiry (or
// cancel) wins each order; the stock and the buyer's quota come back
// exactly once for every order that was not paid; nothing is oversold.
func TestPayRacesExpiry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const rounds, timeout = 60, time.Second
		const stock = 5 * rounds
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", stock, timeout)
		payClock, expireClock := newTestClock(), newTestClock()
		payer := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: payClock, ScriptClock: payClock})
		expirer := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: expireClock, ScriptClock: expireClock})

		paid, expired, cancelled := map[string]bool{}, map[string]bool{}, map[string]bool{}
		var kept int64 // units of paid orders
		for round := range rounds {
			// Five buyers, two units each; the clock moves on a round.
			r.clock.Set(newTestClock().Now().Add(time.Duration(round) * time.Minute))
			var ids []string
			for u := range 5 {
				rc, err := r.eng.Buy(r.ctx, "s", fmt.Sprintf("u%d-%d", round, u), lines("A", 1), "")
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, rc.Order.ID)
				payBy := rc.Order.CreatedAt.Add(timeout)
				payClock.Set(payBy.Add(-time.Millisecond))
				expireClock.Set(payBy)
			}
			var wg sync.WaitGroup
			payErr := make([]error, len(ids))
			var gotExpired []string
			var expireErr error
			cancelOK := make([]bool, len(ids))
			wg.Add(1)
			go func() {
				defer wg.Done()
				gotExpired, _, expireErr = expirer.ExpireDue(r.ctx, "s", 100)
			}()
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, payErr[i] = payer.Pay(r.ctx, id, "", "ref-"+id)
				}()
				if round%3 == 0 && i == 0 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rc, err := r.eng.Cancel(r.ctx, id, "")
						cancelOK[i] = err == nil && !rc.Replayed
					}()
				}
			}
			wg.Wait()
			if expireErr != nil {
				t.Fatal(expireErr)
			}
			exp := map[string]bool{}
			for _, id := range gotExpired {
				exp[id] = true
				expired[id] = true
			}
			for i, id := range ids {
				won := 0
				if payErr[i] == nil {
					won++
					paid[id] = true
				} else if !errors.Is(payErr[i], inventory.ErrOrderClosed) {
					t.Fatalf("pay of %s: %v", id, payErr[i])
				}
				if exp[id] {
					won++
				}
				if cancelOK[i] && !paid[id] {
					won++
					cancelled[id] = true
				}
				if won != 1 {
					t.Fatalf("round %d order %s: paid %v, expired %v, cancelled %v: want exactly one", round, id, payErr[i] == nil, exp[id], cancelOK[i])
				}
				if paid[id] && !cancelOK[i] {
					kept++
				}
			}
		}
		if len(paid) == 0 || len(expired) == 0 {
			t.Logf("paid %d, expired %d of %d orders: the race went one way only", len(paid), len(expired), 5*rounds)
		}
		// Stock: every unit not kept by a paid (uncancelled) order is back.
		st, err := r.eng.Stock(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if it := st.Items[0]; it.Remaining != stock-kept || it.Sold != kept || it.Awaiting != 0 {
			t.Fatalf("item %+v; want remaining %d, sold %d, awaiting 0", it, stock-kept, kept)
		}
		var held int64
		for _, n := range r.held("s") {
			held += n
		}
		if held != kept {
			t.Fatalf("buyers hold %d units, want %d", held, kept)
		}
		if n, _ := r.rdb.ZCard(r.ctx, r.key("s", "deadlines")).Result(); n != 0 {
			t.Fatalf("%d deadlines left", n)
		}
		// The events: one bought, and one of paid / expired / cancelled per
		// order that won (a paid order may be cancelled after).
		count := map[inventory.EventType]int{}
		for _, ev := range r.events("s") {
			count[ev.Type]++
		}
		if count["bought"] != 5*rounds || count["paid"] != len(paid) || count["expired"] != len(expired) {
			t.Fatalf("events %v; paid %d expired %d", count, len(paid), len(expired))
		}
	})
}

// TestRebuildRestoresPayment: a sale rebuilt from a snapshot gets its
// payment step back: the awaiting order's deadline (it can be paid, then
// expires at its pay_by), the paid order's ref, the awaiting units.
func TestRebuildRestoresPayment(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var snap inventory.Snapshot
		r := newRig(t, b, inventory.Options{Loader: inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) {
			return snap, nil
		})})
		r.paySale("s", 10, time.Minute)
		ids := r.buyEach("s", "u1", "u2", "u3", "u4")
		if _, _, err := r.eng.Pay(r.ctx, ids[1], "", "ref-2"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, ids[2], ""); err != nil {
			t.Fatal(err)
		}
		st, err := r.eng.Stock(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		snap = inventory.Snapshot{Sale: st.Sale, EventsApplied: inventory.EventsIgnored}
		for _, id := range ids {
			snap.Orders = append(snap.Orders, r.payment(id))
		}
		for _, name := range []string{"sale", "bought", "orders", "idem", "deadlines", "paid"} {
			if err := r.rdb.Del(r.ctx, r.key("s", name)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// The first call finds the sale missing and rebuilds it.
		if _, replayed, err := r.eng.Pay(r.ctx, ids[1], "", "ref-2"); err != nil || !replayed {
			t.Fatalf("pay of the paid order after the rebuild: replayed %v, %v", replayed, err)
		}
		if got := r.counter("s", func(it inventory.ItemState) int64 { return it.Awaiting }); got["A"] != 2 {
			t.Fatalf("awaiting units after the rebuild %v, want A: 2", got)
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentAwaiting || !o.PayBy.Equal(snap.Orders[0].PayBy) {
			t.Fatalf("awaiting order after the rebuild: %+v, want pay_by %v", o, snap.Orders[0].PayBy)
		}
		if _, _, err := r.eng.Pay(r.ctx, ids[2], "", "ref"); !errors.Is(err, inventory.ErrOrderClosed) {
			t.Fatalf("pay of the cancelled order after the rebuild: %v", err)
		}
		if _, _, err := r.eng.Pay(r.ctx, ids[3], "", "ref-4"); err != nil {
			t.Fatal(err)
		}
		r.clock.Set(snap.Orders[0].PayBy)
		got, _, err := r.eng.ExpireDue(r.ctx, "s", 10)
		if err != nil || len(got) != 1 || got[0] != ids[0] {
			t.Fatalf("ExpireDue after the rebuild = %v, %v; want [%s]", got, err, ids[0])
		}
		if rem := r.remaining("s"); rem["A"] != 8 {
			t.Fatalf("remaining %v, want A: 8 (two paid)", rem)
		}
	})
}

// TestRepairRestoresPayment: a sale whose payment step Redis lost (its
// deadlines, paid refs and awaiting units: an AOF that lost its tail, or
// orders the database sold in degraded mode) gets it back from the system
// of record by Repair, and nothing more changes on a second Repair.
func TestRepairRestoresPayment(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, time.Minute)
		ids := r.buyEach("s", "u1", "u2", "u3")
		if _, _, err := r.eng.Pay(r.ctx, ids[1], "", "ref-2"); err != nil {
			t.Fatal(err)
		}
		st, err := r.eng.Stock(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		snap := inventory.Snapshot{Sale: st.Sale, EventsApplied: inventory.EventsIgnored}
		for _, id := range ids {
			snap.Orders = append(snap.Orders, r.payment(id))
		}
		db := inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) { return snap, nil })
		for _, k := range []string{"deadlines", "paid", "events"} { // the stream: nothing in flight
			if err := r.rdb.Del(r.ctx, r.key("s", k)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.rdb.HDel(r.ctx, r.key("s", "sale"), "a:A").Err(); err != nil {
			t.Fatal(err)
		}
		rep, err := r.eng.Repair(r.ctx, "s", db)
		if err != nil || !rep.Changed() {
			t.Fatalf("Repair = %+v, %v", rep, err)
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentAwaiting || !o.PayBy.Equal(snap.Orders[0].PayBy) {
			t.Fatalf("awaiting order after the repair: %+v", o)
		}
		if _, replayed, err := r.eng.Pay(r.ctx, ids[1], "", "ref-2"); err != nil || !replayed {
			t.Fatalf("pay of the paid order after the repair: %v, %v", replayed, err)
		}
		if got := r.counter("s", func(it inventory.ItemState) int64 { return it.Awaiting }); got["A"] != 2 {
			t.Fatalf("awaiting units after the repair %v, want A: 2", got)
		}
		snap.Orders[0] = r.payment(ids[0])
		snap.Orders[2] = r.payment(ids[2])
		if err := r.rdb.Del(r.ctx, r.key("s", "events")).Err(); err != nil {
			t.Fatal(err)
		}
		if rep, err := r.eng.Repair(r.ctx, "s", db); err != nil || rep.Changed() {
			t.Fatalf("second Repair = %+v, %v; want nothing changed", rep, err)
		}
	})
}

// TestDueSales: of the sales asked about, those whose earliest deadline has
// passed (by the script's clock), whatever node each lives on; a sale
// without awaiting orders (or not in Redis) is not due.
func TestDueSales(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		start := r.clock.Now()
		for i, id := range []string{"a", "b", "c"} {
			r.paySale(id, 10, time.Duration(i+1)*time.Minute)
			if _, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), ""); err != nil {
				t.Fatal(err)
			}
		}
		r.paySale("none", 10, time.Minute)
		ids := []string{"a", "b", "c", "none", "missing"}
		for _, c := range []struct {
			at   time.Duration
			want []string
		}{{0, nil}, {time.Minute, []string{"a"}}, {2*time.Minute + time.Second, []string{"a", "b"}}, {time.Hour, []string{"a", "b", "c"}}} {
			r.clock.Set(start.Add(c.at))
			got, _, err := r.eng.DueSales(r.ctx, ids)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("at +%v: DueSales = %v, %v; want %v", c.at, got, err, c.want)
			}
		}
	})
}

// TestCorruptAwaitingCountWritesNothing: a sale's awaiting count ("a:<sku>")
// that is not an integer is found before any write: a buy, a cancel, a pay
// and an expiry of the sale fail with ErrCorrupt and leave everything as it
// was (the stream included).
func TestCorruptAwaitingCountWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, time.Second)
		rc, err := r.eng.Buy(r.ctx, "s", "u1", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.HSet(r.ctx, r.key("s", "sale"), "a:A", "x").Err(); err != nil {
			t.Fatal(err)
		}
		before := r.rdb.XLen(r.ctx, r.eng.EventsKey("s")).Val()
		if _, err := r.eng.Buy(r.ctx, "s", "u2", lines("A", 1), ""); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("buy: %v, want ErrCorrupt", err)
		}
		if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, ""); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("cancel: %v, want ErrCorrupt", err)
		}
		if _, _, err := r.eng.Pay(r.ctx, rc.Order.ID, "", "ref"); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("pay: %v, want ErrCorrupt", err)
		}
		r.clock.Set(rc.Order.CreatedAt.Add(time.Second))
		if _, _, err := r.eng.ExpireDue(r.ctx, "s", 10); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("expire: %v, want ErrCorrupt", err)
		}
		if after := r.rdb.XLen(r.ctx, r.eng.EventsKey("s")).Val(); after != before {
			t.Errorf("the stream grew from %d to %d entries", before, after)
		}
		if o := r.payment(rc.Order.ID); o.Payment != inventory.PaymentAwaiting || o.Status != inventory.OrderPending {
			t.Errorf("the order changed: %+v", o)
		}
		if rem := r.remaining("s"); rem["A"] != 9 {
			t.Errorf("remaining %v, want A: 9", rem)
		}
	})
}

// TestRepairOfARedisBehindOnAPay: Redis is behind the system of record on
// a pay (a restart from an older snapshot: the order awaits payment in
// Redis, paid in the database) while another order still awaits payment
// (the deadlines zset exists). Repair takes the paid order off the
// deadlines and gives it its ref; the deadlines are never read as a hash.
func TestRepairOfARedisBehindOnAPay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, time.Minute)
		ids := r.buyEach("s", "u1", "u2")
		st, err := r.eng.Stock(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		snap := inventory.Snapshot{Sale: st.Sale, EventsApplied: inventory.EventsIgnored}
		for _, id := range ids {
			snap.Orders = append(snap.Orders, r.payment(id))
		}
		snap.Orders[1].Payment, snap.Orders[1].PaymentRef, snap.Orders[1].PayBy = inventory.PaymentPaid, "ref-2", time.Time{}
		if err := r.rdb.Del(r.ctx, r.key("s", "events")).Err(); err != nil { // nothing in flight
			t.Fatal(err)
		}
		db := inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) { return snap, nil })
		if rep, err := r.eng.Repair(r.ctx, "s", db); err != nil || !rep.Changed() {
			t.Fatalf("Repair = %+v, %v", rep, err)
		}
		if _, replayed, err := r.eng.Pay(r.ctx, ids[1], "", "ref-2"); err != nil || !replayed {
			t.Fatalf("pay of the order paid in the database, after the repair: replayed %v, %v", replayed, err)
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentAwaiting {
			t.Fatalf("the other order after the repair: %+v", o)
		}
		if got := r.counter("s", func(it inventory.ItemState) int64 { return it.Awaiting }); got["A"] != 1 {
			t.Fatalf("awaiting units after the repair %v, want A: 1", got)
		}
	})
}

// TestExpiryTakesAReservationAtPayByNotBefore: a reservation is not due
// 1 ms before its pay_by (DueSales leaves its sale out, ExpireDue takes
// nothing and the order can still be paid) and is due at pay_by exactly.
func TestExpiryTakesAReservationAtPayByNotBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, 10*time.Second)
		ids := r.buyEach("s", "u1", "u2")
		payBy := r.payment(ids[0]).PayBy
		if payBy.IsZero() || !payBy.Equal(r.payment(ids[1]).PayBy) {
			t.Fatalf("pay_by %v and %v, want one deadline for both", payBy, r.payment(ids[1]).PayBy)
		}

		r.clock.Set(payBy.Add(-time.Millisecond))
		if due, _, err := r.eng.DueSales(r.ctx, []string{"s"}); err != nil || len(due) != 0 {
			t.Fatalf("1 ms before pay_by: DueSales = %v, %v; want none", due, err)
		}
		if got, more, err := r.eng.ExpireDue(r.ctx, "s", 10); err != nil || more || len(got) != 0 {
			t.Fatalf("1 ms before pay_by: ExpireDue = %v, %v, %v; want nothing expired", got, more, err)
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentAwaiting {
			t.Fatalf("1 ms before pay_by: order %+v, want awaiting", o)
		}
		if _, _, err := r.eng.Pay(r.ctx, ids[1], "u2", "ref"); err != nil {
			t.Fatalf("pay 1 ms before pay_by: %v", err)
		}

		r.clock.Set(payBy)
		if due, _, err := r.eng.DueSales(r.ctx, []string{"s"}); err != nil || fmt.Sprint(due) != "[s]" {
			t.Fatalf("at pay_by: DueSales = %v, %v; want [s]", due, err)
		}
		if got, _, err := r.eng.ExpireDue(r.ctx, "s", 10); err != nil || fmt.Sprint(got) != fmt.Sprint(ids[:1]) {
			t.Fatalf("at pay_by: ExpireDue = %v, %v; want %v", got, err, ids[:1])
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentExpired {
			t.Fatalf("at pay_by: order %+v, want expired", o)
		}
		if rem := r.remaining("s"); rem["A"] != 9 {
			t.Fatalf("remaining %v, want A: 9 (the paid unit sold, the expired one back)", rem)
		}
	})
}

// TestCancelTakesAReservationOffTheDeadlines: a cancelled reservation
// leaves the sale's deadlines at once: its sale is not due at its pay_by
// and, ended, is not held back as awaiting payment.
func TestCancelTakesAReservationOffTheDeadlines(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, 10*time.Second)
		ids := r.buyEach("s", "u1")
		payBy := r.payment(ids[0]).PayBy
		if _, err := r.eng.Cancel(r.ctx, ids[0], "u1"); err != nil {
			t.Fatal(err)
		}
		if n, err := r.rdb.ZCard(r.ctx, r.key("s", "deadlines")).Result(); err != nil || n != 0 {
			t.Fatalf("%d deadlines left after the cancel (%v), want none", n, err)
		}
		if _, _, err := r.eng.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.settle("s")
		if chk, err := r.eng.CheckArchive(r.ctx, "s"); err != nil || !chk.Ready {
			t.Fatalf("check of the closed sale: %+v, %v; want ready, nothing awaiting", chk, err)
		}
		r.clock.Set(payBy)
		if due, _, err := r.eng.DueSales(r.ctx, []string{"s"}); err != nil || len(due) != 0 {
			t.Fatalf("at the cancelled order's pay_by: DueSales = %v, %v; want none", due, err)
		}
	})
}
