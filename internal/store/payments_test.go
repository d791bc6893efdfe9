package store

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

func (e *events) paid(of inventory.Event, ref string) inventory.Event {
	ev := e.next(inventory.EventPaid)
	ev.Order = of.Order
	ev.Order.Payment, ev.Order.PaymentRef = inventory.PaymentPaid, ref
	return ev
}

func (e *events) expired(of inventory.Event) inventory.Event {
	ev := e.next(inventory.EventExpired)
	ev.Order = of.Order
	ev.Order.Status, ev.Order.Payment = inventory.OrderCancelled, inventory.PaymentExpired
	return ev
}

// TestPaymentEventsApplyOnceInAnyOrder: paid and expired events are
// applied once, also when they come before their order's bought event (a
// crashed consumer's entries reclaimed late) and when applied again; an
// order neither paid nor expired reads awaiting, with its pay_by; expired
// units are not sold.
func TestPaymentEventsApplyOnceInAnyOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("p")
		created := e.created(1, inventory.Item{SKU: "A", Stock: 10})
		created.Sale.PaymentTimeout = time.Minute
		b1, b2, b3 := e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1)), e.bought("u3", line("A", 1))
		p1, x2 := e.paid(b1, "ref-1"), e.expired(b2)
		must(t, s.Apply(ctx, "p", []inventory.Event{created, p1, x2}))
		must(t, s.Apply(ctx, "p", []inventory.Event{b1, b2, b3}))
		must(t, s.Apply(ctx, "p", []inventory.Event{created, b1, p1, b2, x2, b3}))

		o1, err := s.Order(ctx, b1.Order.ID)
		must(t, err)
		check(t, "paid order", [3]string{string(o1.Status), string(o1.Payment), o1.PaymentRef},
			[3]string{"confirmed", "paid", "ref-1"})
		o2, err := s.Order(ctx, b2.Order.ID)
		must(t, err)
		check(t, "expired order", [2]string{string(o2.Status), string(o2.Payment)}, [2]string{"cancelled", "expired"})
		o3, err := s.Order(ctx, b3.Order.ID)
		must(t, err)
		check(t, "awaiting order", [2]string{string(o3.Status), string(o3.Payment)}, [2]string{"confirmed", "awaiting"})
		check(t, "pay_by", o3.PayBy, b3.Order.CreatedAt.Add(time.Minute))

		totals, err := s.Totals(ctx, "p")
		must(t, err)
		check(t, "Totals", totals, []ItemTotals{{"A", 10, 2}})
		journal, err := s.Journal(ctx, "p")
		must(t, err)
		kinds := map[inventory.EventType]int{}
		for _, j := range journal {
			kinds[j.Type]++
		}
		check(t, "journal", kinds, map[inventory.EventType]int{"created": 1, "bought": 3, "paid": 1, "expired": 1})
		awaiting, err := s.AwaitingPayment(ctx, []string{"p", "none"})
		must(t, err)
		check(t, "AwaitingPayment", awaiting, []string{"p"}) // b3
		must(t, s.BeginArchive(ctx, "p", time.Now()))
		awaiting, err = s.AwaitingPayment(ctx, []string{"p"})
		must(t, err)
		check(t, "AwaitingPayment of a sale being archived", len(awaiting), 0)
		sales, err := s.PaymentSales(ctx)
		must(t, err)
		check(t, "PaymentSales", len(sales) == 1 && sales[0].ID == "p" && sales[0].PaymentTimeout == time.Minute, true)
	})
}

// TestPaymentSalesLeavesArchivedOut: the expiry loop's list (read every
// second by every instance) holds the sales with a payment step that may
// still have reservations, not every such sale ever run: an archived sale
// has none (the archiver waits for them) and no keys left in Redis.
func TestPaymentSalesLeavesArchivedOut(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, id := range []string{"live", "gone"} {
			created := newEvents(id).created(1, inventory.Item{SKU: "A", Stock: 10})
			created.Sale.PaymentTimeout = time.Minute
			must(t, s.Apply(ctx, id, []inventory.Event{created}))
		}
		must(t, s.BeginArchive(ctx, "gone", time.Now()))
		must(t, s.FinishArchive(ctx, "gone", time.Now()))
		sales, err := s.PaymentSales(ctx)
		must(t, err)
		var ids []string
		for _, sale := range sales {
			ids = append(ids, sale.ID)
		}
		check(t, "PaymentSales", ids, []string{"live"})
	})
}

// TestPaidEventNeverUndoesACancel: a paid order cancelled after (a refund)
// stays cancelled when its paid event is applied after the cancel (a
// crashed consumer's entry reclaimed late), whether the order was stored
// by its bought event or by the cancel alone: the paid event records the
// payment and leaves the status, and the unit stays unsold.
func TestPaidEventNeverUndoesACancel(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("p")
		created := e.created(1, inventory.Item{SKU: "A", Stock: 10})
		created.Sale.PaymentTimeout = time.Minute
		b1, b2 := e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1))
		p1, p2 := e.paid(b1, "ref-1"), e.paid(b2, "ref-2")
		c1, c2 := e.cancelled(b1), e.cancelled(b2)
		must(t, s.Apply(ctx, "p", []inventory.Event{created, b1, c1}))
		must(t, s.Apply(ctx, "p", []inventory.Event{c2}))
		must(t, s.Apply(ctx, "p", []inventory.Event{p1, p2}))
		must(t, s.Apply(ctx, "p", []inventory.Event{b2}))
		for _, p := range []inventory.Event{p1, p2} {
			o, err := s.Order(ctx, p.Order.ID)
			must(t, err)
			check(t, "order of "+p.Order.UserID+", paid then cancelled", [3]string{string(o.Status), string(o.Payment), o.PaymentRef},
				[3]string{"cancelled", "paid", p.Order.PaymentRef})
		}
		totals, err := s.Totals(ctx, "p")
		must(t, err)
		check(t, "Totals", totals, []ItemTotals{{"A", 10, 0}})
		checkOrderCounts(t, s)
	})
}
