package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/inventory"
)

// unitsJournaled sums what the journal says is sold of sku.
func unitsJournaled(t *testing.T, s *Store, sale, sku string) int64 {
	t.Helper()
	journal, err := s.Journal(context.Background(), sale)
	must(t, err)
	var n int64
	for _, j := range journal {
		if j.SKU != sku {
			continue
		}
		switch j.Type {
		case inventory.EventBought:
			n += j.Qty
		case inventory.EventCancelled, inventory.EventExpired:
			n -= j.Qty
		}
	}
	return n
}

// TestAcknowledgedOrderIsNeverVoided: one instance hands an order over as
// unsure (its buy's replies were lost), the order arrives from the stream
// and is voided, then another instance hands it over as acknowledged (the
// buyer's retry of the key was a replay there). The acknowledgement wins:
// the order is live again and its units are not sold twice. Not when the
// buyer cancelled it meanwhile (the stream's cancel, or a hand-over of the
// cancel, came first), and not when the database sold its units before
// the acknowledgement came (an instance passed over): then it stays voided
// rather than oversold.
func TestAcknowledgedOrderIsNeverVoided(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		m, err := s.SellMode(ctx)
		must(t, err)
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
		must(t, err)
		buy := func(sale, user string) error {
			_, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Now: now,
				Buy: checked(inventory.BuyRequest{SaleID: sale, UserID: user, Lines: []inventory.Line{line("A", 1)}})})
			return err
		}
		// voided makes a sale of 3 units (limit 2), two sold to u0 from
		// Redis, and alice's order of 1 handed over unsure and voided.
		voided := func(sale string) (*events, inventory.Event) {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: sale, PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 3}}}}))
			e := newEvents(sale)
			must(t, s.Apply(ctx, sale, []inventory.Event{e.bought("u0", line("A", 2))}))
			lost := e.bought("alice", line("A", 1))
			must(t, s.MarkUnsure(ctx, []inventory.Order{lost.Order}))
			must(t, s.Apply(ctx, sale, []inventory.Event{lost}))
			o, err := s.Order(ctx, lost.Order.ID)
			must(t, err)
			check(t, "the unsure order arrived", o.Status, inventory.OrderCancelled)
			return e, lost
		}
		status := func(id string) inventory.OrderStatus {
			o, err := s.Order(ctx, id)
			must(t, err)
			return o.Status
		}

		t.Run("acknowledged after the void", func(t *testing.T) {
			_, lost := voided("v1")
			must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))
			check(t, "the acknowledged order", status(lost.Order.ID), inventory.OrderConfirmed)
			if err := buy("v1", "bob"); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("the database sold the acknowledged order's unit again: %v", err)
			}
			must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order})) // again: nothing changes
			totals, err := s.Totals(ctx, "v1")
			must(t, err)
			check(t, "units sold of 3", totals[0].Sold, int64(3))
			check(t, "units the journal says are sold", unitsJournaled(t, s, "v1", "A"), int64(3))
		})
		t.Run("cancelled by the buyer after the void", func(t *testing.T) {
			e, lost := voided("v2")
			must(t, s.Apply(ctx, "v2", []inventory.Event{e.cancelled(lost)}))
			must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))
			check(t, "an order its buyer cancelled", status(lost.Order.ID), inventory.OrderCancelled)
			check(t, "units the journal says are sold", unitsJournaled(t, s, "v2", "A"), int64(2))
		})
		t.Run("its cancel handed over after the void", func(t *testing.T) {
			_, lost := voided("v3")
			cancelled := lost.Order
			cancelled.Status = inventory.OrderCancelled
			must(t, s.AdoptOrders(ctx, []inventory.Order{cancelled}))
			must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))
			check(t, "an order its buyer cancelled", status(lost.Order.ID), inventory.OrderCancelled)
		})
		t.Run("its unit sold before the acknowledgement", func(t *testing.T) {
			_, lost := voided("v4")
			must(t, buy("v4", "bob"))
			must(t, s.AdoptOrders(ctx, []inventory.Order{lost.Order}))
			check(t, "an order whose unit the database sold", status(lost.Order.ID), inventory.OrderCancelled)
			totals, err := s.Totals(ctx, "v4")
			must(t, err)
			check(t, "units sold of 3", totals[0].Sold, int64(3))
		})
	})
}
