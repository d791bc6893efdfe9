package store

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestAdvUnvoidKeepsTheBuyersLimit: an order handed over unsure by one
// instance arrives from the stream and is voided; the instance that
// acknowledged it (a replay of the buyer's key) is passed over, so the
// database sells, and the buyer, whose voided order no longer counts,
// buys again there (another key). When the passed-over instance hands its
// acknowledgement over at last, the units are still free, and the order
// is made live again: the buyer would hold two units under a limit of 1.
// The void must stay when making the order live again would put its buyer
// over the limit, as it stays when its units were sold.
func TestAdvUnvoidKeepsTheBuyersLimit(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		m, err := s.SellMode(ctx)
		must(t, err)
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
		must(t, err)
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "lim", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}}}))
		e := newEvents("lim")
		lost := e.bought("alice", line("A", 1))
		must(t, s.MarkUnsure(ctx, []inventory.Order{lost.Order}))
		must(t, s.Apply(ctx, "lim", []inventory.Event{lost}))
		o, err := s.Order(ctx, lost.Order.ID)
		must(t, err)
		check(t, "the unsure order arrived", o.Status, inventory.OrderCancelled)

		// The database sells: alice, whose voided order does not count, buys.
		_, err = s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Now: now,
			Buy: checked(inventory.BuyRequest{SaleID: "lim", UserID: "alice", IdempotencyKey: "k2", Lines: []inventory.Line{line("A", 1)}})})
		must(t, err)

		// The passed-over instance hands its acknowledgement over.
		must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))

		orders, err := s.readOrders(ctx, s.db, "o.sale_id = ? AND o.user_id = ? AND o.status = ?", "lim", "alice", string(inventory.OrderConfirmed))
		must(t, err)
		var held int64
		for _, o := range orders {
			for _, l := range o.Items {
				held += l.Qty
			}
		}
		if held > 1 {
			t.Fatalf("alice holds %d units of A under a limit of 1: %+v", held, orders)
		}
	})
}

// TestAdvUnvoidKeepsOneOrderPerKey: the same with a limit of 2 and the
// buyer's retry of the very key sold by the database before the lost
// first request arrived (voided): made live again, the first order and
// the retry's would be two live orders of one idempotency key.
func TestAdvUnvoidKeepsOneOrderPerKey(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		m, err := s.SellMode(ctx)
		must(t, err)
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
		must(t, err)
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "key", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 5}}}}))
		e := newEvents("key")
		lost := e.bought("alice", line("A", 1)) // key "key-alice"
		must(t, s.MarkUnsure(ctx, []inventory.Order{lost.Order}))
		_, err = s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Now: now,
			Buy: checked(inventory.BuyRequest{SaleID: "key", UserID: "alice", IdempotencyKey: "key-alice", Lines: []inventory.Line{line("A", 1)}})})
		must(t, err)
		must(t, s.Apply(ctx, "key", []inventory.Event{lost}))
		must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))

		orders, err := s.readOrders(ctx, s.db, "o.sale_id = ? AND o.user_id = ? AND o.idempotency_key = ? AND o.status = ?",
			"key", "alice", "key-alice", string(inventory.OrderConfirmed))
		must(t, err)
		if len(orders) != 1 {
			t.Fatalf("key-alice names %d live orders: %+v", len(orders), orders)
		}
	})
}
