package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestRebuiltStreamNeverReusesAnEventID loses a sale with its stream and
// rebuilds it on a Redis whose clock stands where the lost stream's did (a
// failover to a server whose clock is behind, or a restart within the same
// millisecond): the new stream would hand out the ids the journal already
// holds, and the database would skip the cancel and the restock made under
// them as applied. The rebuilt stream starts above the newest id the
// database has seen (Snapshot.NewestEvent), so every event after the
// rebuild reaches the database.
func TestRebuiltStreamNeverReusesAnEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			rdb1, m1 := redistest.Mini(t)
			m1.SetTime(clock) // a frozen clock: ids clock-0, clock-1, ...
			prefix := redistest.Prefix(t, rdb1)
			eng1 := inventory.New(rdb1, inventory.Options{Prefix: prefix})
			must(t, eng1.CreateSale(ctx, inventory.Sale{ID: "floor", PerUserLimit: 2,
				Items: []inventory.Item{{SKU: "phone", Stock: 5}}}))
			bob, err := eng1.Buy(ctx, "floor", "bob", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			_, err = eng1.Buy(ctx, "floor", "alice", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			_, err = eng1.Restock(ctx, "floor", "phone", 1)
			must(t, err)
			lost := applyStream(t, s, rdb1, eng1.EventsKey("floor"), "-")

			// Redis loses everything; the new one's clock stands where the
			// old one's did.
			rdb2, m2 := redistest.Mini(t)
			m2.SetTime(clock)
			eng2 := inventory.New(rdb2, inventory.Options{Prefix: prefix, Loader: inventory.LoaderFunc(s.Snapshot)})
			_, err = eng2.Buy(ctx, "floor", "carol", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			_, err = eng2.Cancel(ctx, bob.Order.ID, "bob")
			must(t, err)
			_, err = eng2.Restock(ctx, "floor", "phone", 2)
			must(t, err)
			msgs, err := rdb2.XRange(ctx, eng2.EventsKey("floor"), "-", "+").Result()
			must(t, err)
			for _, m := range msgs {
				if inventory.CompareEventIDs(m.ID, lost) <= 0 {
					t.Errorf("the rebuilt stream handed out %s, at or below the lost stream's newest %s", m.ID, lost)
				}
			}
			applyStream(t, s, rdb2, eng2.EventsKey("floor"), "-")

			got, err := s.Order(ctx, bob.Order.ID)
			must(t, err)
			check(t, "bob's order in the database after his cancel", got.Status, inventory.OrderCancelled)
			live, err := eng2.Stock(ctx, "floor")
			must(t, err)
			totals, err := s.Totals(ctx, "floor")
			must(t, err)
			check(t, "Totals (database)", totals, []ItemTotals{{"phone", 8, 2}})
			check(t, "Stock (Redis) stocked and sold", []int64{live.Items[0].Stocked, live.Items[0].Sold}, []int64{8, 2})
		})
	}
}

// applyStream applies the entries of a stream from id on to the database,
// as the consumer would, and returns the last entry's id.
func applyStream(t *testing.T, s *Store, rdb *redis.Client, key, from string) string {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), key, from, "+").Result()
	must(t, err)
	var evs []inventory.Event
	for _, m := range msgs {
		ev, err := inventory.ParseEvent("floor", m)
		must(t, err)
		evs = append(evs, ev)
	}
	must(t, s.Apply(context.Background(), "floor", evs))
	return msgs[len(msgs)-1].ID
}
