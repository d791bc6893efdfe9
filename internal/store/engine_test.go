package store

import (
	"context"
	"errors"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestEngineEventsAndRebuild runs a sale on the real engine (on miniredis),
// applies its stream to each database the way the consumer does, compares
// the database with what Redis says, then loses Redis and rebuilds the sale
// from Snapshot.
func TestEngineEventsAndRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _ := redistest.Mini(t)
	prefix := redistest.Prefix(t, rdb)
	eng := inventory.New(rdb, inventory.Options{Prefix: prefix})
	lines := func(l ...inventory.Line) []inventory.Line { return l }

	must(t, eng.CreateSale(ctx, inventory.Sale{ID: "launch", PerUserLimit: 3,
		Items: []inventory.Item{{SKU: "phone", Stock: 5}, {SKU: "case", Stock: inventory.Unlimited}}}))
	var receipts []inventory.Receipt
	buy := func(user string, l []inventory.Line, key string) {
		t.Helper()
		rc, err := eng.Buy(ctx, "launch", user, l, key)
		must(t, err)
		receipts = append(receipts, rc)
	}
	buy("alice", lines(line("phone", 2), line("case", 1)), "k1")
	buy("bob", lines(line("phone", 1)), "")
	buy("carol", lines(line("case", 3)), "k3")
	_, err := eng.Cancel(ctx, receipts[1].Order.ID, "bob")
	must(t, err)
	_, err = eng.Restock(ctx, "launch", "phone", 10)
	must(t, err)
	must(t, eng.Pause(ctx, "launch"))
	must(t, eng.Resume(ctx, "launch"))
	buy("dave", lines(line("phone", 3), line("case", 1)), "k4")

	msgs, err := rdb.XRange(ctx, eng.EventsKey("launch"), "-", "+").Result()
	must(t, err)
	var evs []inventory.Event
	for _, m := range msgs {
		ev, err := inventory.ParseEvent("launch", m)
		must(t, err)
		evs = append(evs, ev)
	}
	lastID := msgs[len(msgs)-1].ID
	live, err := eng.Stock(ctx, "launch")
	must(t, err)
	wantTypes := []inventory.EventType{inventory.EventCreated, inventory.EventBought, inventory.EventBought,
		inventory.EventBought, inventory.EventCancelled, inventory.EventRestocked, inventory.EventPaused,
		inventory.EventResumed, inventory.EventBought}
	var types []inventory.EventType
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	check(t, "stream", types, wantTypes)

	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			// Batches of 4, as the consumer reads them: a created event, buys,
			// a cancel, and the rest in stream order.
			for i := 0; i < len(evs); i += 4 {
				must(t, s.Apply(ctx, "launch", evs[i:min(i+4, len(evs))]))
			}

			totals, err := s.Totals(ctx, "launch")
			must(t, err)
			var fromRedis []ItemTotals
			for _, it := range live.Items {
				fromRedis = append(fromRedis, ItemTotals{SKU: it.SKU, Stocked: it.Stocked, Sold: it.Sold})
			}
			check(t, "Totals (database) vs Stock (Redis)", totals, fromRedis)
			check(t, "Totals", totals, []ItemTotals{{"phone", 15, 5}, {"case", -1, 5}})

			snap, err := s.Snapshot(ctx, "launch")
			must(t, err)
			check(t, "Snapshot sale vs Redis", snap.Sale, live.Sale)
			byID := map[string]inventory.Order{}
			for _, o := range snap.Orders {
				byID[o.ID] = o
			}
			check(t, "orders in the snapshot", len(snap.Orders), len(receipts))
			for _, rc := range receipts {
				want, err := eng.Order(ctx, rc.Order.ID)
				must(t, err)
				if want.Status == inventory.OrderPending {
					want.Status = inventory.OrderConfirmed
				}
				got, err := s.Order(ctx, rc.Order.ID)
				must(t, err)
				check(t, "Order (database) vs Order (Redis)", got, want)
				check(t, "snapshot order", byID[rc.Order.ID], want)
			}
			counts, err := s.CountOrders(ctx, "launch")
			must(t, err)
			check(t, "CountOrders", counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 3, inventory.OrderCancelled: 1})
			j, err := s.Journal(ctx, "launch")
			must(t, err)
			check(t, "journal rows", len(j), 12) // 2 items + 2+1+1 lines + 1 + 1 + 1 + 1 + 2 lines

			// Redis loses everything; a new engine rebuilds the sale from the
			// database alone and carries on as if nothing happened.
			rdb2, _ := redistest.Mini(t)
			eng2 := inventory.New(rdb2, inventory.Options{Prefix: prefix,
				Loader: inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
					snap, err := s.Snapshot(ctx, saleID)
					snap.EventsApplied = lastID
					return snap, err
				})})
			rebuilt, err := eng2.Stock(ctx, "launch")
			must(t, err)
			check(t, "rebuilt Stock", rebuilt, live)
			if _, err := eng2.Buy(ctx, "launch", "alice", lines(line("phone", 2)), ""); !errors.Is(err, inventory.ErrLimitExceeded) {
				t.Fatalf("alice over her limit after the rebuild: %v", err)
			}
			again, err := eng2.Buy(ctx, "launch", "alice", lines(line("phone", 2), line("case", 1)), "k1")
			must(t, err)
			if !again.Replayed || again.Order.ID != receipts[0].Order.ID {
				t.Fatalf("idempotency key lost in the rebuild: %+v", again)
			}
			if rc, err := eng2.Cancel(ctx, receipts[1].Order.ID, "bob"); err != nil || !rc.Replayed {
				t.Fatalf("bob's cancelled order after the rebuild: %+v, %v", rc, err)
			}
		})
	}
}
