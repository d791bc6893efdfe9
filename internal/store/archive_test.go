package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

func (e *events) closed(start int64) inventory.Event {
	ev := e.next(inventory.EventClosed)
	ev.Sale = inventory.Sale{ID: e.sale, EndsAt: ev.At}
	if start != 0 {
		ev.Sale.StartsAt = time.UnixMilli(start).UTC()
	}
	return ev
}

// A closed event ends the sale in the database; the earliest close wins in
// whatever order the events arrive, one that comes before the sale's
// created event too, and one whose end is not its time can never be
// applied.
func TestApplyClosed(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("cl")
		created := e.created(1, inventory.Item{SKU: "A", Stock: 5})
		first, second := e.closed(0), e.closed(0)
		must(t, s.Apply(ctx, "cl", []inventory.Event{created, second}))
		must(t, s.Apply(ctx, "cl", []inventory.Event{first})) // reclaimed late
		sale, err := s.Sale(ctx, "cl")
		must(t, err)
		check(t, "ends_at", sale.EndsAt, first.At)

		// A close stored before its sale's created event.
		e2 := newEvents("early")
		created2 := e2.created(1, inventory.Item{SKU: "A", Stock: 5})
		closed2 := e2.closed(0)
		must(t, s.Apply(ctx, "early", []inventory.Event{closed2}))
		must(t, s.Apply(ctx, "early", []inventory.Event{created2}))
		sale, err = s.Sale(ctx, "early")
		must(t, err)
		check(t, "ends_at of a sale closed before its created event arrived", sale.EndsAt, closed2.At)

		bad := e.closed(0)
		bad.Sale.EndsAt = bad.At.Add(time.Hour)
		if err := s.Apply(ctx, "cl", []inventory.Event{bad}); !errors.Is(err, ErrPermanent) {
			t.Fatalf("a close whose end is not its time: %v", err)
		}
	})
}

// A cancel on the database is for archived sales only; it journals the
// cancel once and leaves a cancelled order as it is.
func TestCancelArchived(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("ar")
		b := e.bought("u1", line("A", 1))
		must(t, s.Apply(ctx, "ar", []inventory.Event{e.created(1, inventory.Item{SKU: "A", Stock: 5}), b}))
		if _, err := s.CancelArchived(ctx, b.Order.ID, "u1", time.Now()); !errors.Is(err, ErrNotArchived) {
			t.Fatalf("cancel on the database of a live sale: %v", err)
		}
		must(t, s.BeginArchive(ctx, "ar", time.Now()))
		if _, err := s.CancelArchived(ctx, b.Order.ID, "u2", time.Now()); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("someone else's order: %v", err)
		}
		rc, err := s.CancelArchived(ctx, b.Order.ID, "u1", time.Now())
		if err != nil || rc.Order.Status != inventory.OrderCancelled || rc.Replayed {
			t.Fatalf("cancel: %+v %v", rc, err)
		}
		rc, err = s.CancelArchived(ctx, b.Order.ID, "", time.Now())
		if err != nil || !rc.Replayed {
			t.Fatalf("cancel again: %+v %v", rc, err)
		}
		totals, err := s.Totals(ctx, "ar")
		must(t, err)
		check(t, "totals", totals, []ItemTotals{{"A", 5, 0}})
		must(t, s.FinishArchive(ctx, "ar", time.Now()))
		st, err := s.Archive(ctx, "ar")
		if err != nil || !st.Archiving() || st.ArchivedAt.IsZero() {
			t.Fatalf("archive state %+v %v", st, err)
		}
		ends, err := s.SaleEnds(ctx)
		must(t, err)
		if _, ok := ends["ar"]; ok {
			t.Fatal("an archived sale is still among the sales the consumer reads")
		}
	})
}
