package store

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// TestOrderCountsMigration: orders stored before migration 013 are counted
// by it (CountOrdersOf and OrderTalliesOf read order_counts), and orders
// written after it are counted on top of them.
func TestOrderCountsMigration(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := openMigratedBelow(t, d.Name, d.URL, 13)
			t.Cleanup(func() { checkOrderCounts(t, s) })
			for _, o := range []struct{ sale, status, pay string }{
				{"a", "confirmed", ""}, {"a", "confirmed", ""}, {"a", "cancelled", ""},
				{"a", "confirmed", "paid"}, {"a", "cancelled", "expired"}, {"a", "cancelled", "expired"},
				{"b", "confirmed", ""},
			} {
				_, err := s.exec(ctx, s.db, `INSERT INTO orders (id, sale_id, user_id, status, created_at, payment_status)
					VALUES (?, ?, 'u', ?, 1, ?)`, newEvents(o.sale).orderID(), o.sale, o.status, o.pay)
				must(t, err)
			}
			must(t, s.migrate(ctx))
			counts, err := s.CountOrdersOf(ctx, []string{"a", "b", "c"})
			must(t, err)
			check(t, "orders", counts, map[string]map[inventory.OrderStatus]int{
				"a": {inventory.OrderConfirmed: 3, inventory.OrderCancelled: 3},
				"b": {inventory.OrderConfirmed: 1, inventory.OrderCancelled: 0},
				"c": {inventory.OrderConfirmed: 0, inventory.OrderCancelled: 0},
			})
			tallies, err := s.OrderTalliesOf(ctx, []string{"a", "b", "c"})
			must(t, err)
			check(t, "tallies", tallies, map[string]OrderTally{
				"a": {Confirmed: 3, Cancelled: 3, Paid: 1, Unpaid: 2, Expired: 2},
				"b": {Confirmed: 1, Unpaid: 1},
				"c": {},
			})
			// Written after the migration: counted on top.
			e := newEvents("b")
			bought := e.bought("u2", line("A", 1))
			must(t, s.Apply(ctx, "b", []inventory.Event{bought, e.bought("u3", line("A", 1)), e.cancelled(bought)}))
			counts, err = s.CountOrdersOf(ctx, []string{"b"})
			must(t, err)
			check(t, "orders of b", counts["b"], map[inventory.OrderStatus]int{inventory.OrderConfirmed: 2, inventory.OrderCancelled: 1})
		})
	}
}

// TestOrderCountsRolledBack: a transaction that wrote orders and failed
// leaves the counts as they were (the optimistic insert of a batch that
// holds an order stored before is refused and run again).
func TestOrderCountsRolledBack(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("r")
		first := e.bought("u1", line("A", 1))
		must(t, s.Apply(ctx, "r", []inventory.Event{first}))
		// Again, with new orders: on PostgreSQL the first try inserts the
		// new ones, is refused for first's, and is rolled back.
		must(t, s.Apply(ctx, "r", []inventory.Event{e.bought("u2", line("A", 1)), first, e.bought("u3", line("A", 1))}))
		counts, err := s.CountOrdersOf(ctx, []string{"r"})
		must(t, err)
		check(t, "orders", counts["r"], map[inventory.OrderStatus]int{inventory.OrderConfirmed: 3, inventory.OrderCancelled: 0})
	})
}
