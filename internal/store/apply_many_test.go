package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// manyBatch is what one read of many sales returns: 30 sales of bought
// events only, a sale with a whole history (created, buys, a cancel, a
// restock, a pause...), a sale whose order was cancelled by an event
// applied before its bought event, and a sale with an event twice.
func manyBatch(t *testing.T, s *Store) (batch []SaleEvents, before []SaleEvents) {
	t.Helper()
	ctx := context.Background()
	for i := range 30 {
		id := fmt.Sprintf("m%02d", i)
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
		e := newEvents(id)
		batch = append(batch, SaleEvents{id, []inventory.Event{e.bought("u1", line("A", 1)), e.bought("u2", line("A", 2)), e.bought("u3", line("A", 1))}})
	}
	batch = append(batch, SaleEvents{"h", history("h")})
	e := newEvents("late")
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "late", Items: []inventory.Item{{SKU: "A", Stock: 10}}}}))
	b1, b2 := e.bought("u1", line("A", 1)), e.bought("u2", line("A", 3))
	before = append(before, SaleEvents{"late", []inventory.Event{e.cancelled(b1)}})
	batch = append(batch, SaleEvents{"late", []inventory.Event{b1, b2}})
	e = newEvents("twice")
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "twice", Items: []inventory.Item{{SKU: "A", Stock: 10}}}}))
	b := e.bought("u1", line("A", 1))
	batch = append(batch, SaleEvents{"twice", []inventory.Event{b, e.bought("u2", line("A", 1)), b}})
	// Not in id order: ApplyMany sorts.
	batch[0], batch[len(batch)-1] = batch[len(batch)-1], batch[0]
	return batch, before
}

// TestApplyManyIsOneTransaction: the events of many sales go to the
// database in one transaction, and leave every sale exactly as applying
// each sale's events on its own does; applied again, they change nothing.
func TestApplyManyIsOneTransaction(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		url := dbtest.SQLiteURL(t)
		if s.Dialect() == Postgres {
			url = dbtest.PostgresURL(t)
		}
		ref := openStore(t, url)
		batch, before := manyBatch(t, s)
		refBatch, refBefore := manyBatch(t, ref)
		for i := range before {
			must(t, s.Apply(ctx, before[i].SaleID, before[i].Events))
			must(t, ref.Apply(ctx, refBefore[i].SaleID, refBefore[i].Events))
		}
		for _, se := range refBatch {
			must(t, ref.Apply(ctx, se.SaleID, se.Events))
		}
		for round := range 2 { // the second time, a redelivery
			txs := s.txs.Load()
			must(t, s.ApplyMany(ctx, batch))
			if n := s.txs.Load() - txs; n != 1 {
				t.Fatalf("round %d: %d transactions for %d sales, want 1", round, n, len(batch))
			}
			for i, se := range batch {
				got, want := stateOf(t, s, se.SaleID), stateOf(t, ref, refBatch[i].SaleID)
				check(t, fmt.Sprintf("round %d: sale %s: Totals", round, se.SaleID), got.Totals, want.Totals)
				check(t, fmt.Sprintf("round %d: sale %s: CountOrders", round, se.SaleID), got.Counts, want.Counts)
				check(t, fmt.Sprintf("round %d: sale %s: journal rows", round, se.SaleID), got.Journal, want.Journal)
				check(t, fmt.Sprintf("round %d: sale %s: orders", round, se.SaleID), len(got.Orders), len(want.Orders))
			}
		}
		late := stateOf(t, s, "late")
		check(t, "late: orders", late.Counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 1, inventory.OrderCancelled: 1})
		check(t, "late: journal rows", late.Journal, 3) // the cancel, then both bought events
		check(t, "m07: orders", stateOf(t, s, "m07").Counts[inventory.OrderConfirmed], 3)
		check(t, "twice: journal rows", stateOf(t, s, "twice").Journal, 2)
	})
}

// TestApplyManyPoisonedSale: an event that can never be applied in one
// sale fails the whole call before anything is written, naming the sale;
// the others apply on their own.
func TestApplyManyPoisonedSale(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		batch, _ := manyBatch(t, s)
		bad := batch[5].Events[1]
		bad.ID = "not-a-stream-id"
		batch[5].Events = []inventory.Event{batch[5].Events[0], bad}
		err := s.ApplyMany(ctx, batch)
		var perm *PermanentError
		if !errors.As(err, &perm) || !errors.Is(err, ErrPermanent) || perm.SaleID != batch[5].SaleID || perm.EventID != bad.ID {
			t.Fatalf("ApplyMany with a poisoned sale = %v, want a PermanentError naming sale %s and event %s", err, batch[5].SaleID, bad.ID)
		}
		for _, se := range batch {
			counts, err := s.CountOrders(ctx, se.SaleID)
			must(t, err)
			check(t, "orders of "+se.SaleID+" after a refused ApplyMany", counts[inventory.OrderConfirmed], 0)
		}
	})
}
