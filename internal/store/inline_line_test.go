package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// allJournalRows counts every sale's journal rows: the journal's own and
// those the orders carry (migration 015).
var allJournalRows = "SELECT (SELECT COUNT(*) FROM journal) + (SELECT COUNT(*) FROM " + orderLines("o.event_id <> ''") + " l)"

// TestInlineLineMigration: orders stored before migrations 014 and 015
// (every line in order_items, every journal row in journal) read back as
// they were after them, next to orders stored after them (an order of one
// line in its own row; a bought event's journal rows carried by its
// order), by every reader of lines: Snapshot's orders, Totals,
// AwaitingUnits, and degraded mode's remaining stock and per-user limit;
// and of the journal: Journal, the newest event applied, TotalsWith's
// rows. An event of an old order applied after the migration (a cancel,
// its bought event again) adds no line and no journal row.
func TestInlineLineMigration(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := openMigratedBelow(t, d.Name, d.URL, 14)
			t.Cleanup(func() { checkOrderCounts(t, s) })
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "m", PerUserLimit: 3,
				Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "B", Stock: 10}}}}))
			e := newEvents("m")
			old := []inventory.Event{
				e.bought("u1", line("A", 2)),
				e.bought("u2", line("A", 1), line("B", 1)),
				e.bought("u3", line("B", 3)),
			}
			// As 013's store wrote them: the order, a row per line, the
			// journal's rows.
			var j journalRows
			for _, ev := range old {
				j.add("m", ev)
			}
			must(t, s.insertRows(ctx, s.db, journalInsert, 8, rowsOf(j.columns()), "", nil))
			for i, ev := range old {
				o := ev.Order
				status := inventory.OrderConfirmed
				if i == 2 {
					status = inventory.OrderCancelled
				}
				_, err := s.exec(ctx, s.db, `INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at)
					VALUES (?, ?, ?, ?, ?, ?)`, o.ID, "m", o.UserID, string(status), o.IdempotencyKey, ms(o.CreatedAt))
				must(t, err)
				for p, l := range o.Items {
					_, err := s.exec(ctx, s.db, "INSERT INTO order_items (order_id, sku, qty, position) VALUES (?, ?, ?, ?)",
						o.ID, l.SKU, l.Qty, p)
					must(t, err)
				}
			}
			must(t, s.migrate(ctx))

			lines := func(sale string) map[string][]inventory.Line {
				snap, err := s.Snapshot(ctx, sale)
				must(t, err)
				out := map[string][]inventory.Line{}
				for _, o := range snap.Orders {
					out[o.UserID] = o.Items
				}
				return out
			}
			check(t, "old orders' lines", lines("m"), map[string][]inventory.Line{
				"u1": {line("A", 2)}, "u2": {line("A", 1), line("B", 1)}, "u3": {line("B", 3)}})
			totals, err := s.Totals(ctx, "m")
			must(t, err)
			check(t, "totals of the old orders", totals, []ItemTotals{{"A", 10, 3}, {"B", 10, 1}})

			// New orders, an old one's cancel, and all of them again.
			newer := []inventory.Event{
				e.cancelled(old[0]),
				e.bought("u4", line("A", 1)),
				e.bought("u5", line("A", 1), line("B", 2)),
			}
			must(t, s.Apply(ctx, "m", newer))
			must(t, s.Apply(ctx, "m", append(old, newer...)))
			check(t, "lines", lines("m"), map[string][]inventory.Line{
				"u1": {line("A", 2)}, "u2": {line("A", 1), line("B", 1)}, "u3": {line("B", 3)},
				"u4": {line("A", 1)}, "u5": {line("A", 1), line("B", 2)}})
			var inRow, listed int
			must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM orders WHERE sku <> ''").Scan(&inRow))
			must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM order_items").Scan(&listed))
			check(t, "orders carrying their line", inRow, 1)
			check(t, "order_items rows (4 old, 2 of u5)", listed, 6)
			type jrow struct {
				ev    string
				typ   inventory.EventType
				sku   string
				qty   int64
				order string
			}
			journal, err := s.Journal(ctx, "m")
			must(t, err)
			var got []jrow
			for _, r := range journal {
				got = append(got, jrow{r.EventID, r.Type, r.SKU, r.Qty, r.OrderID})
			}
			row := func(ev inventory.Event, i int) jrow {
				l := ev.Order.Items[i]
				return jrow{ev.ID, ev.Type, l.SKU, l.Qty, ev.Order.ID}
			}
			check(t, "journal (each event's rows once)", got, []jrow{row(old[0], 0), row(old[1], 0), row(old[1], 1), row(old[2], 0),
				row(newer[0], 0), row(newer[1], 0), row(newer[2], 0), row(newer[2], 1)})
			snap, err := s.Snapshot(ctx, "m")
			must(t, err)
			check(t, "newest event applied (a bought one its order carries)", snap.NewestEvent, newer[2].ID)
			totals, rows, err := s.TotalsWith(ctx, "m", []string{old[1].ID, newer[1].ID}, newer[2].ID)
			must(t, err)
			check(t, "totals", totals, []ItemTotals{{"A", 10, 3}, {"B", 10, 3}})
			check(t, "rows of the events asked for", rows, []JournalRow{
				{newer[2].ID, inventory.EventBought, "A", 1}, {newer[2].ID, inventory.EventBought, "B", 2},
				{old[1].ID, inventory.EventBought, "A", 1}, {old[1].ID, inventory.EventBought, "B", 1},
				{newer[1].ID, inventory.EventBought, "A", 1}})
			awaiting, err := s.AwaitingUnits(ctx, "m")
			must(t, err)
			check(t, "awaiting units", awaiting, map[string]int64{"A": 3, "B": 3})

			// Degraded mode counts both kinds: 7 of A left; u4 holds 1 of A
			// (in its row), u2 1 (in order_items), limit 3.
			m, err := s.SellMode(ctx)
			must(t, err)
			now := time.Now()
			m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
			must(t, err)
			buy := func(user string, l inventory.Line) (inventory.Receipt, error) {
				return s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Buy: checked(inventory.BuyRequest{SaleID: "m", UserID: user,
					Lines: []inventory.Line{l}}), Now: now})
			}
			for _, user := range []string{"u4", "u2"} {
				if _, err := buy(user, line("A", 3)); !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Fatalf("%s buys 3 of A holding 1: %v, want over the limit", user, err)
				}
			}
			rc, err := buy("u4", line("A", 2))
			must(t, err)
			check(t, "remaining of A after a degraded buy of 2", rc.Remaining, []int64{5})
			totals, err = s.Totals(ctx, "m")
			must(t, err)
			check(t, "totals with the degraded order", totals, []ItemTotals{{"A", 10, 5}, {"B", 10, 3}})
		})
	}
}
