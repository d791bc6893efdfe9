package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
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

// halfOf is the half of a move a moved event records.
func halfOf(ev inventory.Event) inventory.MoveHalf {
	return inventory.MoveHalf{SaleID: ev.SaleID, Move: inventory.Move{ID: ev.MoveID, Peer: ev.Peer, SKU: ev.SKU, Units: ev.Qty}}
}

// TestHandedOverMovesCountOnce: the two halves of a move between segments
// p:0 and p:1 (3 units each), handed over by the instance that made them
// while their events were still in the streams, count before the database
// sells; the events arriving after (or before) change nothing more. An out
// half of unknown outcome holds the units it may have taken until its
// event arrives (with what it really took) or the stream is settled; a
// half of a sale the database has no item of waits for its stream.
func TestHandedOverMovesCountOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		for _, id := range []string{"p:0", "p:1"} {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 3}}}}))
		}
		m, err := s.SellMode(ctx)
		must(t, err)
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
		must(t, err)
		buys := func(sale string) (n int64) {
			for {
				_, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Now: now,
					Buy: checked(inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("b%d", orderSeq.Add(1)), Lines: []inventory.Line{line("A", 1)}})})
				if errors.Is(err, inventory.ErrSoldOut) {
					return n
				}
				must(t, err)
				n++
			}
		}
		stocked := func(sale string) int64 {
			totals, err := s.Totals(ctx, sale)
			must(t, err)
			return totals[0].Stocked
		}
		e0, e1 := newEvents("p:0"), newEvents("p:1")
		out := e1.moved(t, "A", -2, "p:0")
		in := e0.moved(t, "A", 2, "p:1")
		in.MoveID = out.MoveID
		must(t, s.Apply(ctx, "p:0", []inventory.Event{in})) // the in half's stream was read, the out half's not
		must(t, s.AdoptMoves(ctx, []inventory.MoveHalf{halfOf(out), halfOf(in)}, nil))
		must(t, s.AdoptMoves(ctx, []inventory.MoveHalf{halfOf(out), halfOf(in)}, nil)) // handed over twice
		check(t, "stocked after the hand-over", [2]int64{stocked("p:0"), stocked("p:1")}, [2]int64{5, 1})
		check(t, "units the database sells in p:1", buys("p:1"), int64(1))
		must(t, s.Apply(ctx, "p:1", []inventory.Event{out}))
		check(t, "stocked after the events", [2]int64{stocked("p:0"), stocked("p:1")}, [2]int64{5, 1})
		check(t, "journaled in p:1", len(movedRows(t, s, "p:1")), 1)

		// Out of p:0, outcome unknown: up to 3 units held.
		lost := e0.moved(t, "A", -2, "p:1")
		asked := halfOf(lost)
		asked.Units = -3
		never := halfOf(e0.moved(t, "A", -1, "p:1"))
		must(t, s.AdoptMoves(ctx, nil, []inventory.MoveHalf{asked, never}))
		check(t, "units the database sells in p:0 while 4 may be moving", buys("p:0"), int64(1))
		must(t, s.Apply(ctx, "p:0", []inventory.Event{lost})) // it took 2
		check(t, "stocked once the move arrived", stocked("p:0"), int64(3))
		check(t, "units the database sells in p:0 then", buys("p:0"), int64(1))
		must(t, s.SettleUnsure(ctx, "p:0"))
		check(t, "units the database sells in p:0 once settled", buys("p:0"), int64(1))
		totals, err := s.Totals(ctx, "p:0")
		must(t, err)
		check(t, "p:0 sold of stocked", [2]int64{totals[0].Sold, totals[0].Stocked}, [2]int64{3, 3})

		// A half of a sale the database has no item of: left to its stream.
		must(t, s.AdoptMoves(ctx, []inventory.MoveHalf{{SaleID: "p:9", Move: inventory.Move{ID: "mv-x", Peer: "p:0", SKU: "A", Units: 1}}}, nil))
		moves, err := s.readMoves(ctx, s.db, "p:9")
		must(t, err)
		check(t, "moves of a sale without a row", len(moves), 0)
	})
}

// TestDegradedBuyOfAnItemHeldPastItsStock: an item whose units held are
// more than its stock in the database (a move's in half not there yet) is
// sold out, not taken for unlimited.
func TestDegradedBuyOfAnItemHeldPastItsStock(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now) // A: 5 units
		var orders []inventory.Order
		for i := range 6 {
			orders = append(orders, inventory.Order{ID: inventory.NewOrderID("s1"), SaleID: "s1", UserID: fmt.Sprintf("r%d", i),
				Status: inventory.OrderConfirmed, Items: []inventory.Line{line("A", 1)}, CreatedAt: now})
		}
		must(t, s.AdoptOrders(ctx, orders))
		_, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Now: now, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: []inventory.Line{line("A", 1)}})})
		if !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("a buy of an item held past its stock: %v", err)
		}
	})
}
