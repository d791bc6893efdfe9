package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// applyCarefully applies sales as ApplyMany does, but only the way that
// checks every row (no optimistic first try): the reference the
// optimistic path must match.
func applyCarefully(ctx context.Context, s *Store, sales []SaleEvents) error {
	var todo []SaleEvents
	for _, se := range sales {
		if err := checkSale(se.SaleID, se.Events); err != nil {
			return err
		}
		if len(se.Events) > 0 {
			todo = append(todo, se)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	slices.SortStableFunc(todo, func(a, b SaleEvents) int { return strings.Compare(a.SaleID, b.SaleID) })
	return s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applySales(ctx, tx, todo, false) })
}

// dumpState is every row the consumer's writes touch, as sorted text
// (the journal without its identity column; a voided order's cancel time
// is the clock's, so only whether it has one).
func dumpState(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"orders":        `SELECT (to_jsonb(t) - 'cancelled_at')::text || (cancelled_at IS NULL)::text FROM orders t`,
		"order_items":   `SELECT to_jsonb(t)::text FROM order_items t`,
		"journal":       `SELECT (to_jsonb(t) - 'id' - CASE WHEN event_id LIKE 'void:%' THEN 'at' ELSE '' END)::text FROM journal t`,
		"sales":         `SELECT to_jsonb(t)::text FROM sales t`,
		"sale_items":    `SELECT to_jsonb(t)::text FROM sale_items t`,
		"moves":         `SELECT to_jsonb(t)::text FROM moves t`,
		"unsure_orders": `SELECT to_jsonb(t)::text FROM unsure_orders t`,
	}
	out := map[string][]string{}
	for name, q := range queries {
		rows, err := s.db.QueryContext(context.Background(), q)
		must(t, err)
		var got []string
		must(t, scanEach(rows, func() error {
			var v string
			err := rows.Scan(&v)
			got = append(got, v)
			return err
		}))
		slices.Sort(got)
		out[name] = got
	}
	return out
}

// advStream is a random stream of one sale as the engine could write it:
// created first, then buys of one to three lines (a limited and an
// unlimited item, empty idempotency keys among them), cancels of earlier
// buys, restocks, moves, pauses and resumes, and now and then a buy under
// a stream id handed out before (a stream Redis lost and recreated).
func advStream(rng *rand.Rand, sale, peer string, n int) []inventory.Event {
	e := newEvents(sale)
	evs := []inventory.Event{e.created(3, inventory.Item{SKU: "A", Stock: 1000}, inventory.Item{SKU: "U", Stock: inventory.Unlimited},
		inventory.Item{SKU: "C", Stock: 50})}
	var bought []inventory.Event
	for len(evs) < n {
		switch k := rng.IntN(20); {
		case k < 11:
			skus := []string{"A", "U", "C"}
			rng.Shuffle(len(skus), func(i, j int) { skus[i], skus[j] = skus[j], skus[i] })
			var lines []inventory.Line
			for _, sku := range skus[:1+rng.IntN(3)] {
				lines = append(lines, line(sku, 1+rng.Int64N(3)))
			}
			ev := e.bought(fmt.Sprintf("u%d", rng.IntN(30)), lines...)
			if rng.IntN(3) == 0 {
				ev.Order.IdempotencyKey = ""
			}
			if rng.IntN(15) == 0 && len(evs) > 1 { // a stream id handed out again
				ev.ID = evs[1+rng.IntN(len(evs)-1)].ID
			}
			bought = append(bought, ev)
			evs = append(evs, ev)
		case k < 14 && len(bought) > 0:
			evs = append(evs, e.cancelled(bought[rng.IntN(len(bought))]))
		case k < 16:
			evs = append(evs, e.restocked([]string{"A", "U", "C"}[rng.IntN(3)], 1+rng.Int64N(5)))
		case k < 18:
			ev := e.next(inventory.EventMoved)
			ev.SKU, ev.Qty, ev.Peer = "A", rng.Int64N(9)-4, peer
			if ev.Qty == 0 {
				ev.Qty = 1
			}
			ev.MoveID = fmt.Sprintf("mv-%026d", moveSeq.Add(1))
			evs = append(evs, ev)
		case k < 19:
			evs = append(evs, e.paused())
		default:
			evs = append(evs, e.resumed())
		}
	}
	return evs
}

// TestAdvOptimisticMatchesCareful: the same deliveries of several sales'
// streams — in order, overlapping (a consumer crashed between commit and
// ack), entries reclaimed after later ones (a cancel before its buy), buys
// handed over (acknowledged, or of unknown outcome) before or after they arrive, stream
// ids handed out twice, several sales per transaction — leave exactly the
// database through ApplyMany (plain inserts first on PostgreSQL, the
// careful way after a unique-key refusal) as through the careful way
// alone.
func TestAdvOptimisticMatchesCareful(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			fast, careful := openStore(t, dbtest.PostgresURL(t)), openStore(t, dbtest.PostgresURL(t))
			// racing gets every round from two consumers at once (the
			// entries of one were claimed by the other while it wrote them).
			racing := openStore(t, dbtest.PostgresURL(t))
			rng := rand.New(rand.NewPCG(seed, 7))
			sales := []string{fmt.Sprintf("adv%da", seed), fmt.Sprintf("adv%db", seed), fmt.Sprintf("adv%dc", seed)}
			streams := map[string][]inventory.Event{}
			done := map[string]int{} // how far each stream was delivered in order
			for i, id := range sales {
				streams[id] = advStream(rng, id, sales[(i+1)%len(sales)], 120)
			}
			for step := 0; ; step++ {
				var round []SaleEvents
				for _, id := range sales {
					evs := streams[id]
					if rng.IntN(3) == 0 {
						continue
					}
					var batch []inventory.Event
					switch k := rng.IntN(10); {
					case k < 6 && done[id] < len(evs): // the next entries, some held back to be reclaimed later
						end := min(len(evs), done[id]+1+rng.IntN(25))
						for _, ev := range evs[done[id]:end] {
							if ev.Type == inventory.EventBought && rng.IntN(8) == 0 {
								continue
							}
							batch = append(batch, ev)
						}
						done[id] = end
					case k < 8 && done[id] > 0: // an overlap: entries applied before, and maybe some that were not
						from := rng.IntN(done[id])
						batch = evs[from:min(len(evs), from+1+rng.IntN(20))]
						done[id] = max(done[id], from+len(batch))
					default: // reclaimed entries of the past, in stream order
						for _, ev := range evs[:done[id]] {
							if rng.IntN(6) == 0 {
								batch = append(batch, ev)
							}
						}
					}
					if len(batch) > 0 {
						round = append(round, SaleEvents{SaleID: id, Events: batch})
					}
				}
				// An instance hands over buys as of unknown outcome, some
				// before they arrive, some after.
				if rng.IntN(4) == 0 {
					var unsure []inventory.Order
					for _, id := range sales {
						for _, ev := range streams[id] {
							if ev.Type == inventory.EventBought && rng.IntN(40) == 0 {
								unsure = append(unsure, ev.Order)
							}
						}
					}
					must(t, fast.MarkUnsure(ctx, unsure))
					must(t, racing.MarkUnsure(ctx, unsure))
					must(t, careful.MarkUnsure(ctx, unsure))
				}
				// An instance hands over buys Redis acknowledged, before or
				// after they arrive through the stream.
				if rng.IntN(4) == 0 {
					var adopted []inventory.Order
					for _, id := range sales {
						for _, ev := range streams[id] {
							if ev.Type == inventory.EventBought && rng.IntN(30) == 0 {
								o := ev.Order
								o.Status = inventory.OrderConfirmed
								adopted = append(adopted, o)
							}
						}
					}
					must(t, fast.AdoptOrders(ctx, adopted))
					must(t, racing.AdoptOrders(ctx, adopted))
					must(t, careful.AdoptOrders(ctx, adopted))
				}
				must(t, fast.ApplyMany(ctx, round))
				must(t, applyCarefully(ctx, careful, round))
				sameState(t, fmt.Sprintf("step %d", step), fast, careful)
				errs := make(chan error, 2)
				for range 2 {
					go func() { errs <- racing.ApplyMany(ctx, round) }()
				}
				must(t, <-errs)
				must(t, <-errs)
				sameState(t, fmt.Sprintf("step %d, two consumers", step), racing, careful)
				finished := true
				for _, id := range sales {
					finished = finished && done[id] == len(streams[id])
				}
				if finished {
					break
				}
			}
			// Everything once more in one transaction, every sale.
			var all []SaleEvents
			for _, id := range sales {
				all = append(all, SaleEvents{SaleID: id, Events: streams[id]})
			}
			must(t, fast.ApplyMany(ctx, all))
			must(t, applyCarefully(ctx, careful, all))
			sameState(t, "all again", fast, careful)
			must(t, racing.ApplyMany(ctx, all))
			sameState(t, "all again, two consumers", racing, careful)
		})
	}
}

// sameState fails the test with the rows only one of the stores holds.
func sameState(t *testing.T, when string, fast, careful *Store) {
	t.Helper()
	got, want := dumpState(t, fast), dumpState(t, careful)
	for table := range want {
		if slices.Equal(got[table], want[table]) {
			continue
		}
		var onlyFast, onlyCareful []string
		for _, r := range got[table] {
			if !slices.Contains(want[table], r) {
				onlyFast = append(onlyFast, r)
			}
		}
		for _, r := range want[table] {
			if !slices.Contains(got[table], r) {
				onlyCareful = append(onlyCareful, r)
			}
		}
		t.Fatalf("%s: table %s differs (%d rows, %d careful):\n only fast:    %v\n only careful: %v",
			when, table, len(got[table]), len(want[table]), onlyFast, onlyCareful)
	}
}

// TestAdvColumnRowsMatchTheRowsBefore: the per-column rows (columns.go)
// are, row after row, the values the rows of []any held before them
// (7220f19): one journal row per line, item or sku, one for a pause or
// resume; one order_items row per line with its position, for an order of
// several lines.
func TestAdvColumnRowsMatchTheRowsBefore(t *testing.T) {
	before := func(saleID string, ev inventory.Event) (journal, items []any) {
		row := func(sku, orderID, userID string, qty int64) {
			journal = append(journal, saleID, ev.ID, string(ev.Type), sku, orderID, userID, qty, ms(ev.At))
		}
		switch ev.Type {
		case inventory.EventBought, inventory.EventCancelled:
			for i, l := range ev.Order.Items {
				row(l.SKU, ev.Order.ID, ev.Order.UserID, l.Qty)
				if len(ev.Order.Items) > 1 { // an order of one line carries it in its row (migration 014)
					items = append(items, ev.Order.ID, l.SKU, l.Qty, int64(i))
				}
			}
		case inventory.EventCreated:
			for _, it := range ev.Sale.Items {
				row(it.SKU, "", "", it.Stock)
			}
		case inventory.EventRestocked, inventory.EventMoved:
			row(ev.SKU, "", "", ev.Qty)
		default:
			row("", "", "", 0)
		}
		return journal, items
	}
	rng := rand.New(rand.NewPCG(1, 2))
	evs := advStream(rng, "cols", "peer", 400)
	var j journalRows
	var it itemRows
	var wantJ, wantI []any
	for _, ev := range evs {
		j.add("cols", ev)
		if ev.Type == inventory.EventBought {
			it.add(ev.Order)
		}
		bj, bi := before("cols", ev)
		wantJ = append(wantJ, bj...)
		if ev.Type == inventory.EventBought {
			wantI = append(wantI, bi...)
		}
	}
	check(t, "journal rows", rowsOf(j.columns()), wantJ)
	check(t, "appendJournalRows", func() []any {
		var args []any
		for _, ev := range evs {
			args = appendJournalRows(args, "cols", ev)
		}
		return args
	}(), wantJ)
	check(t, "order_items rows", rowsOf(it.columns()), wantI)
	// A truncated run's rows are gone, the ones before it stay.
	n := j.len()
	j.add("cols", evs[1])
	j.truncate(n)
	check(t, "journal rows after truncate", rowsOf(j.columns()), wantJ)
}
