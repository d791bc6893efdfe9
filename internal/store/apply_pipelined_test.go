package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// TestPipelinedMatchesCareful: batches of only bought events — the ones
// ApplyMany sends as one pipeline on PostgreSQL — of several sales, with
// lines of several skus, delivered in turn, then again in part (a consumer
// that crashed between commit and ack: the pipeline is refused by the
// unique key and the batch goes the careful way), with an order handed
// over as unsure before it arrives (rolled back, voided the ordinary way),
// leave every table as the careful way alone does, and each order once.
func TestPipelinedMatchesCareful(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pipelined, careful := openStore(t, dbtest.PostgresURL(t)), openStore(t, dbtest.PostgresURL(t))
	var batches [][]SaleEvents
	gens := map[string]*events{"p1": newEvents("p1"), "p2": newEvents("p2")}
	var prev []SaleEvents
	for b := range 6 {
		var batch []SaleEvents
		for _, sale := range []string{"p1", "p2"} {
			var evs []inventory.Event
			for i := range 3 + b {
				lines := []inventory.Line{line("A", 1)}
				if i%2 == 1 {
					lines = append(lines, line("B", 2))
				}
				evs = append(evs, gens[sale].bought(fmt.Sprintf("u%d-%d", b, i), lines...))
			}
			batch = append(batch, SaleEvents{SaleID: sale, Events: evs})
		}
		batches = append(batches, batch)
		if b%2 == 1 { // delivered again, with the batch before
			var again []SaleEvents
			for i := range batch {
				again = append(again, SaleEvents{SaleID: batch[i].SaleID, Events: append(prev[i].Events[1:len(prev[i].Events):len(prev[i].Events)], batch[i].Events[:2]...)})
			}
			batches = append(batches, again)
		}
		prev = batch
	}
	unsure := gens["p1"].bought("lost", line("A", 1))
	batches = append(batches, []SaleEvents{{SaleID: "p1", Events: []inventory.Event{unsure}}})
	for _, s := range []*Store{pipelined, careful} {
		for _, sale := range []string{"p1", "p2"} {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: sale, Items: []inventory.Item{{SKU: "A", Stock: -1}, {SKU: "B", Stock: -1}}}}))
			_, err := s.exec(ctx, s.db, "INSERT INTO degraded_stock (sale_id, sku, epoch, sold) VALUES (?, 'A', 1, 5)", sale)
			must(t, err)
		}
		must(t, s.MarkUnsure(ctx, []inventory.Order{unsure.Order}))
	}
	for i, batch := range batches {
		txs := pipelined.txs.Load()
		must(t, pipelined.ApplyMany(ctx, batch))
		if n := pipelined.txs.Load() - txs; i == 0 && n != 1 {
			t.Fatalf("the first batch took %d transactions, want 1 (the pipeline)", n)
		}
		must(t, applyCarefully(ctx, careful, batch))
	}
	got, want := dumpState(t, pipelined), dumpState(t, careful)
	delete(want, "sales") // created_at: the clock's
	for table := range want {
		check(t, table, got[table], want[table])
	}
	for _, s := range []*Store{pipelined, careful} {
		var left int
		must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM degraded_stock").Scan(&left))
		check(t, "degraded-mode counters left", left, 0)
		o, err := s.Order(ctx, unsure.Order.ID)
		must(t, err)
		check(t, "the unsure order that arrived", o.Status, inventory.OrderCancelled)
	}
	counts, err := pipelined.CountOrdersOf(ctx, []string{"p1", "p2"})
	must(t, err)
	n := 0
	for i := range 6 {
		n += 3 + i
	}
	check(t, "orders of p2", counts["p2"][inventory.OrderConfirmed], n)
}
