package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// advSales builds the events of n sales: half with a row (created through
// the service), half without (created through the library: their created
// event is in the stream); 40 buys each, some cancelled after (windows
// reclaimed out of order apply a cancel before its buy).
func advSales(t *testing.T, s *Store, n int) (map[string][]inventory.Event, []string) {
	t.Helper()
	ctx := context.Background()
	all := map[string][]inventory.Event{}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("c%02d", i)
		ids = append(ids, id)
		e := newEvents(id)
		var evs []inventory.Event
		if i%2 == 0 {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: -1}, {SKU: "B", Stock: -1}}}}))
		} else {
			evs = append(evs, e.created(100, inventory.Item{SKU: "A", Stock: -1}, inventory.Item{SKU: "B", Stock: -1}))
		}
		for j := range 40 {
			b := e.bought(fmt.Sprintf("u%d", j), line("A", 1), line("B", 2))
			evs = append(evs, b)
			if j%7 == 3 {
				evs = append(evs, e.cancelled(b))
			}
		}
		all[id] = evs
	}
	return all, ids
}

// advCounts returns the sale's rows: orders, lines, journal rows, and the
// number of (order, sku) pairs with more than one line.
func advCounts(t *testing.T, s *Store, sale string) (orders, lines, journal, dupLines int) {
	t.Helper()
	q := func(query string) int {
		var n int
		must(t, s.db.QueryRow(query).Scan(&n))
		return n
	}
	orders = q(fmt.Sprintf("SELECT COUNT(*) FROM orders WHERE sale_id = '%s'", sale))
	// Lines in the order's row or in order_items (migration 014), and
	// lines of orders without a row (none should be).
	ofSale := orderLines(fmt.Sprintf("o.sale_id = '%s'", sale))
	lines = q("SELECT COUNT(*) FROM "+ofSale+" l") + q(fmt.Sprintf(
		"SELECT COUNT(*) FROM order_items oi WHERE oi.order_id LIKE '%s.%%' AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = oi.order_id)", sale))
	j, err := s.Journal(context.Background(), sale) // its rows and those its orders carry (migration 015)
	must(t, err)
	journal = len(j)
	dupLines = q("SELECT COUNT(*) FROM (SELECT order_id, sku FROM " + ofSale + " l GROUP BY order_id, sku HAVING COUNT(*) > 1) d")
	return
}

// TestAdvConcurrentOverlappingApplies: several consumers apply overlapping
// windows of the same sales' events at once (a claim of a slow consumer's
// pending entries), through ApplyMany and Apply, with a hand-over
// (AdoptOrders) of some orders meanwhile. Every order must end exactly
// once with its lines exactly once and every journal row exactly once.
func TestAdvConcurrentOverlappingApplies(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		all, ids := advSales(t, s, 6)
		var wg sync.WaitGroup
		retry := func(f func() error) {
			for range 50 { // deadlocks between overlapping applies are retried
				err := f()
				if err == nil {
					return
				}
				if errors.Is(err, ErrPermanent) {
					t.Errorf("permanent: %v", err)
					return
				}
			}
			t.Errorf("never applied")
		}
		for w := range 6 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for range 15 {
					var batch []SaleEvents
					for _, id := range ids {
						evs := all[id]
						a := r.IntN(len(evs))
						b := min(len(evs), a+1+r.IntN(20))
						batch = append(batch, SaleEvents{SaleID: id, Events: evs[a:b]})
					}
					r.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					if w%2 == 0 {
						retry(func() error { return s.ApplyMany(ctx, batch) })
					} else {
						for _, se := range batch {
							retry(func() error { return s.Apply(ctx, se.SaleID, se.Events) })
						}
					}
				}
			})
		}
		wg.Go(func() {
			for k := 0; k < 40; k += 5 {
				var orders []inventory.Order
				for _, id := range ids {
					for _, ev := range all[id] {
						if ev.Type == inventory.EventBought && len(orders)%3 == k%3 {
							o := ev.Order
							o.Status = inventory.OrderConfirmed
							orders = append(orders, o)
						}
					}
				}
				retry(func() error { return s.AdoptOrders(ctx, orders[:min(len(orders), k*4)]) })
			}
		})
		wg.Wait()
		for _, id := range ids { // everything once more, in order
			must(t, s.Apply(ctx, id, all[id]))
		}
		for _, id := range ids {
			wantOrders, wantLines, wantJournal := 0, 0, 0
			for _, ev := range all[id] {
				wantJournal += len(appendJournalRows(nil, id, ev)) / 8
				if ev.Type == inventory.EventBought {
					wantOrders++
					wantLines += len(ev.Order.Items)
				}
			}
			orders, lines, journal, dup := advCounts(t, s, id)
			if orders != wantOrders || lines != wantLines || journal != wantJournal || dup != 0 {
				t.Errorf("sale %s: %d orders, %d lines, %d journal rows, %d duplicated lines; want %d, %d, %d, 0",
					id, orders, lines, journal, dup, wantOrders, wantLines, wantJournal)
			}
		}
	})
}

// TestAdvReusedStreamIDStoresTheOrder: a stream id seen before comes again
// with another order (Redis lost the stream's tail or all of it, and the
// new master's clock is behind: XADD * hands out ids the consumer applied
// already, and nothing moves the new stream past the journal's newest id).
// The second order is an accepted buy: it must be stored, once. Before
// migration 008's plain inserts it was dropped silently (its journal rows
// "were there"); now Apply fails with a unique violation on every retry, so
// the consumer never acknowledges the batch and none of its orders land.
func TestAdvReusedStreamIDStoresTheOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "r", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}}}))
		e := newEvents("r")
		first := e.bought("u1", line("A", 1))
		must(t, s.Apply(ctx, "r", []inventory.Event{first}))
		again := e.bought("u2", line("A", 1))
		again.ID, again.At = first.ID, first.At // the same id, another buy
		other := e.bought("u3", line("A", 1))   // and a buy after it
		err := s.Apply(ctx, "r", []inventory.Event{again, other})
		if err != nil && !errors.Is(err, ErrPermanent) {
			t.Errorf("Apply of a reused stream id: %v (retryable: the consumer retries it forever and stores nothing of the batch)", err)
		}
		for _, ev := range []inventory.Event{first, again, other} {
			if _, err := s.Order(ctx, ev.Order.ID); err != nil {
				t.Errorf("order %s of an accepted buy: %v", ev.Order.ID, err)
			}
		}
	})
}
