package store

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdvRepairedStreamNeverReusesAnEventID: Redis fails over to a replica
// that was behind (or restarts from an AOF that lost its tail) on a clock
// that stands where the old master's did. The sale is still there, but as
// of before its buys, and its stream's last id is behind the ids the
// database holds. Degraded mode's recovery (and reconciliation) repair such
// a sale (Engine.Repair), not rebuild it: the repair must raise the stream
// past the newest id the database holds as the rebuild does, or bob's
// cancel after the repair takes his buy's id and the database skips it as
// applied (his order stays confirmed while Redis sells its unit again).
func TestAdvRepairedStreamNeverReusesAnEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	sale := inventory.Sale{ID: "floor", PerUserLimit: 2, Items: []inventory.Item{{SKU: "phone", Stock: 5}}}
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			rdb1, m1 := redistest.Mini(t)
			m1.SetTime(clock)
			prefix := redistest.Prefix(t, rdb1)
			eng1 := inventory.New(rdb1, inventory.Options{Prefix: prefix})
			must(t, eng1.CreateSale(ctx, sale))
			bob, err := eng1.Buy(ctx, "floor", "bob", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			_, err = eng1.Buy(ctx, "floor", "alice", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			lost := applyStream(t, s, rdb1, eng1.EventsKey("floor"), "-")

			// The promoted replica has the sale as created, its one event
			// delivered and acknowledged; its clock stands where the old one's did.
			rdb2, m2 := redistest.Mini(t)
			m2.SetTime(clock)
			eng2 := inventory.New(rdb2, inventory.Options{Prefix: prefix, Loader: inventory.LoaderFunc(s.Snapshot)})
			must(t, eng2.CreateSale(ctx, sale))
			must(t, rdb2.XGroupCreate(ctx, eng2.EventsKey("floor"), "seckill", "$").Err())
			_, err = eng2.Repair(ctx, "floor", nil)
			must(t, err)
			_, err = eng2.Cancel(ctx, bob.Order.ID, "bob")
			must(t, err)
			msgs, err := rdb2.XRange(ctx, eng2.EventsKey("floor"), "(0-0", "+").Result()
			must(t, err)
			for _, m := range msgs[1:] { // after the creation
				if inventory.CompareEventIDs(m.ID, lost) <= 0 {
					t.Errorf("the repaired stream handed out %s, at or below the newest id the database holds, %s", m.ID, lost)
				}
			}
			applyStream(t, s, rdb2, eng2.EventsKey("floor"), "("+msgs[0].ID)
			got, err := s.Order(ctx, bob.Order.ID)
			must(t, err)
			check(t, "bob's order in the database after his cancel", got.Status, inventory.OrderCancelled)
			totals, err := s.Totals(ctx, "floor")
			must(t, err)
			check(t, "Totals (database)", totals, []ItemTotals{{"phone", 5, 1}})
		})
	}
}
