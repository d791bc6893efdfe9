package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestLiveViewShowsASaleAsItEnded: a sale whose last change the sampler
// has not read yet (skipped for the bound on full reads, or bought from
// just before it ended) and that then ends and is drained — so that the
// order consumer no longer lists it as live — is read once more: the live
// view shows its final figures and its status "ended", not its figures
// from before its last buy for ever. Without the final read, the sale
// skipped keeps showing 10 remaining and both show "active".
func TestLiveViewShowsASaleAsItEnded(t *testing.T) {
	defer func(was int) { fullReadsPerSample = was }(fullReadsPerSample)
	fullReadsPerSample = 1
	ctx := context.Background()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, ClaimEvery: 50 * time.Millisecond})
	ends := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	ids := []string{"f000", "f001"}
	for _, id := range ids {
		sale := inventory.Sale{ID: id, PerUserLimit: 2, EndsAt: ends, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := s.eng.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, waitfor.Patience, "both sales live", func() error {
		if live, err := s.liveSaleIDs(ctx); err != nil || len(live) != len(ids) {
			return fmt.Errorf("live sales %v (%v)", live, err)
		}
		return nil
	})
	st := newSamplerState()
	s.sample(ctx, st, time.Second) // every sale read once
	for _, id := range ids {
		if _, err := s.eng.Buy(ctx, id, "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatalf("buy in %s before its end: %v", id, err)
		}
	}
	s.sample(ctx, st, time.Second) // reads one of the two in full, at most
	waitfor.Until(t, waitfor.Patience+time.Until(ends), "the sales ended and drained", func() error {
		if live, err := s.liveSaleIDs(ctx); err != nil || len(live) != 0 {
			return fmt.Errorf("live sales %v (%v)", live, err)
		}
		return nil
	})
	var v liveView
	for range 3 {
		v = s.sample(ctx, st, time.Second)
	}
	if len(v.Sales) != len(ids) {
		t.Fatalf("%d sales in the live view, want %d", len(v.Sales), len(ids))
	}
	for _, ls := range v.Sales {
		if ls.Status != string(inventory.StatusEnded) || ls.Orders != 1 || len(ls.Items) != 1 || ls.Items[0].Remaining != 9 ||
			ls.Confirmed != 1 || ls.Pending != 0 || ls.OrdersPerSecond != 0 {
			t.Errorf("sale %s, ended and drained after one buy of 1 of 10, shows %+v", ls.ID, ls)
		}
	}
}

// TestRateSpansAFailedSample: a sample whose read of a sale fails (its
// sale record unreadable here; the database unreachable, in life) is a
// sample missed: the next good read's rate spans both periods, as for a
// sample skipped by the bound on full reads. Without that, 4 orders over
// two one-second samples read as 4 a second, not 2: a spike after every
// outage the size of the outage.
func TestRateSpansAFailedSample(t *testing.T) {
	ctx := context.Background()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	sale := inventory.Sale{ID: "r000", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
	if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
		t.Fatal(err)
	}
	if err := s.eng.CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the sale live", func() error {
		if live, err := s.liveSaleIDs(ctx); err != nil || len(live) != 1 {
			return fmt.Errorf("live sales %v (%v)", live, err)
		}
		return nil
	})
	rate := func(v liveView) (float64, string) {
		for _, ls := range v.Sales {
			if ls.ID == sale.ID {
				return ls.OrdersPerSecond, ls.Error
			}
		}
		return -1, "not listed"
	}
	st := newSamplerState()
	s.sample(ctx, st, time.Second)
	for i := range 4 {
		if _, err := s.eng.Buy(ctx, sale.ID, fmt.Sprintf("u%d", i), []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	key := s.eng.Key(sale.ID, "sale")
	limit, err := s.rdb.HGet(ctx, key, "limit").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.HSet(ctx, key, "limit", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, why := rate(s.sample(ctx, st, time.Second)); why == "" {
		t.Fatal("the sale's read did not fail")
	}
	if err := s.rdb.HSet(ctx, key, "limit", limit).Err(); err != nil {
		t.Fatal(err)
	}
	if got, why := rate(s.sample(ctx, st, time.Second)); why != "" || got != 2 {
		t.Errorf("4 orders over two 1 s samples, the first failed: rate %v (%q), want 2", got, why)
	}
}

// TestFailingSalesDoNotStarveTheSample: sales whose reads keep failing (a
// Redis node down, in life; their sale records unreadable here), as many
// as a sample reads in full, do not take every sample's full reads for
// ever: the other sales that changed are read in their turn and show
// their buys. Without that, a failed read counted as a sale never read,
// read first every sample, and the others were skipped for as long as
// the failures lasted.
func TestFailingSalesDoNotStarveTheSample(t *testing.T) {
	const n, budget = 5, 2
	defer func(was int) { fullReadsPerSample = was }(fullReadsPerSample)
	fullReadsPerSample = budget
	ctx := context.Background()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	for i := range n {
		sale := inventory.Sale{ID: fmt.Sprintf("q%03d", i), PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := s.eng.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, waitfor.Patience, "every sale live", func() error {
		if live, err := s.liveSaleIDs(ctx); err != nil || len(live) != n {
			return fmt.Errorf("live sales %v (%v)", live, err)
		}
		return nil
	})
	st := newSamplerState()
	s.sample(ctx, st, time.Second) // every sale read once
	for i := range n {
		if _, err := s.eng.Buy(ctx, fmt.Sprintf("q%03d", i), "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := range budget { // the first ones read: they fail from now on
		if err := s.rdb.HSet(ctx, s.eng.Key(fmt.Sprintf("q%03d", i), "sale"), "limit", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var v liveView
	for range 2 * n {
		v = s.sample(ctx, st, time.Second)
	}
	for _, ls := range v.Sales {
		if ls.ID < fmt.Sprintf("q%03d", budget) {
			continue
		}
		if ls.Error != "" || ls.Orders != 1 || len(ls.Items) != 1 || ls.Items[0].Remaining != 9 {
			t.Errorf("sale %s, bought from %d samples ago, shows %+v", ls.ID, 2*n, ls)
		}
	}
}
