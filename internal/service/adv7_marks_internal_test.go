package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// Adversarial tests of the sampler and the reconcile loop that read the
// stream marks of the sales that moved lately and of a share of the others
// (live_marks.go). Each lowers the knobs so that a sale whose mark is not
// read shows nothing until a recount, and pushes the recounts away, so
// that only the marks can bring a change into the live view.

// adv7Sale creates a live sale (item A, stock 10, limit 2) in the database
// and Redis; payment: a sale with a payment step.
func adv7Sale(t *testing.T, s *Service, id string, payment bool) {
	t.Helper()
	ctx := context.Background()
	sale := inventory.Sale{ID: id, PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
	if payment {
		sale.PaymentTimeout = time.Hour
	}
	if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
		t.Fatal(err)
	}
	if err := s.eng.CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}
}

// adv7Settle samples until every one of n sales is sampled without a
// backlog and none moved lately, then puts every sale's recount an hour
// away: from then on only a read mark (or a reason of the sampler's own)
// brings a sale's change into the view.
func adv7Settle(t *testing.T, s *Service, st *samplerState, n int) {
	t.Helper()
	ctx := context.Background()
	waitfor.Until(t, waitfor.Patience, "every sale sampled without a backlog, none moved lately", func() error {
		v := s.sample(ctx, st, time.Second)
		backlog := int64(0)
		for _, ls := range v.Sales {
			backlog += ls.Backlog
		}
		if active := s.orders.Active(); len(v.Sales) != n || backlog != 0 || len(active) != 0 {
			return fmt.Errorf("%d sales sampled (want %d), backlog %d, moved lately %v", len(v.Sales), n, backlog, active)
		}
		return nil
	})
	adv7NoRecount(st)
}

func adv7NoRecount(st *samplerState) {
	for id, r := range st.read {
		r.due = time.Now().Add(time.Hour)
		st.read[id] = r
	}
}

func adv7Find(v liveView, id string) liveSale {
	for _, ls := range v.Sales {
		if ls.ID == id {
			return ls
		}
	}
	return liveSale{ID: id, Error: "not listed"}
}

// TestAdv7ChangesThroughThisInstanceShowAtTheNextSample: with no marks of
// quiet sales read at all (quietMarksPerSample 0, as when thousands of
// sales share the budget) and no recount due, each change made through
// this instance — a buy, a cancel, a pay, a restock, a pause, a close —
// shows in the very next sample.
func TestAdv7ChangesThroughThisInstanceShowAtTheNextSample(t *testing.T) {
	defer func(was int) { quietMarksPerSample = was }(quietMarksPerSample)
	quietMarksPerSample = 0
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	ids := []string{"v000", "v001", "v002", "v003", "v004"}
	for i, id := range ids {
		adv7Sale(t, s, id, i == 4)
	}
	st := newSamplerState()
	adv7Settle(t, s, st, len(ids))

	check := func(what, id string, ok func(ls liveSale) bool) {
		t.Helper()
		if ls := adv7Find(s.sample(ctx, st, time.Second), id); !ok(ls) {
			t.Errorf("the sample after %s shows %s as %+v", what, id, ls)
		}
	}
	rc, err := s.Buy(ctx, BuyRequest{SaleID: "v000", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	check("a buy of 2", "v000", func(ls liveSale) bool { return ls.Orders == 1 && ls.Items[0].Remaining == 8 })
	if _, err := s.Cancel(ctx, rc.Order.ID, "u1"); err != nil {
		t.Fatal(err)
	}
	check("a cancel of the buy", "v000", func(ls liveSale) bool { return ls.Items[0].Remaining == 10 })
	if _, err := s.Restock(ctx, "v001", "A", 5); err != nil {
		t.Fatal(err)
	}
	check("a restock of 5", "v001", func(ls liveSale) bool { return ls.Items[0].Remaining == 15 && ls.Items[0].Stocked == 15 })
	if _, err := s.SetPaused(ctx, "v002", true); err != nil {
		t.Fatal(err)
	}
	check("a pause", "v002", func(ls liveSale) bool { return ls.Status == string(inventory.StatusPaused) })
	if _, err := s.CloseSale(ctx, "v003"); err != nil {
		t.Fatal(err)
	}
	check("a close", "v003", func(ls liveSale) bool { return ls.Status == string(inventory.StatusEnded) })
	rc, err = s.Buy(ctx, BuyRequest{SaleID: "v004", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	check("a reservation", "v004", func(ls liveSale) bool { return ls.Items[0].Awaiting == 1 })
	// The reservation stored, the sale quiet again: the pay alone must
	// bring it into the next sample.
	waitfor.Until(t, waitfor.Patience, "the reservation stored, the sale quiet", func() error {
		if ls := adv7Find(s.sample(ctx, st, time.Second), "v004"); ls.Backlog != 0 || len(s.orders.Active()) != 0 {
			return fmt.Errorf("backlog %d, moved lately %v", ls.Backlog, s.orders.Active())
		}
		return nil
	})
	adv7NoRecount(st)
	if _, err := s.Pay(ctx, rc.Order.ID, "u1", "ref-1"); err != nil {
		t.Fatal(err)
	}
	check("a pay", "v004", func(ls liveSale) bool { return ls.Items[0].Awaiting == 0 })
}

// TestAdv7RefillFromASiblingShowsAtTheNextSample: a buy through this
// instance of a segmented sale whose home segment is short moves units from
// the other segment (segment.Seller's refill): both segments' streams move,
// but only the home segment is told to the consumer (Heard). With more
// sales than a reader names in every read (the other segment only swept)
// and no quiet marks read, the sample after the buy must still show the
// sale's true remaining units, not the giving segment's units twice.
func TestAdv7RefillFromASiblingShowsAtTheNextSample(t *testing.T) {
	defer func(was int) { quietMarksPerSample = was }(quietMarksPerSample)
	quietMarksPerSample = 0
	ctx := context.Background()
	// One reader of more sales than it names in every read, whose sweeps
	// are an hour apart: only news bring a sale into its rounds.
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, QuietAfter: time.Second,
		Readers: 1, QuietEvery: time.Hour})
	const fillers = 70
	for i := range fillers {
		adv7Sale(t, s, fmt.Sprintf("f%03d", i), false)
	}
	if _, err := s.CreateSale(ctx, SaleDef{Sale: inventory.Sale{ID: "hot", PerUserLimit: 4, Items: []inventory.Item{{SKU: "A", Stock: 4}}},
		Segments: []int64{2}}); err != nil {
		t.Fatal(err)
	}
	segs, err := s.router.Segments(ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments %v (%v)", segs, err)
	}
	st := newSamplerState()
	adv7Settle(t, s, st, fillers+1)
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("u%d", i); segment.Home(segs, u) == segs[0] {
			user = u
		}
	}
	// 2 units in each segment: a buy of 3 at home moves 1 from the other.
	if _, err := s.Buy(ctx, BuyRequest{SaleID: "hot", UserID: user, Lines: []inventory.Line{{SKU: "A", Qty: 3}}}); err != nil {
		t.Fatal(err)
	}
	if left, err := s.rdb.HGet(ctx, s.eng.Key(segs[1], "sale"), "r:A").Int64(); err != nil || left != 1 {
		t.Fatalf("the other segment has %d left (%v), want 1: the test does not test the refill", left, err)
	}
	if ls := adv7Find(s.sample(ctx, st, time.Second), "hot"); len(ls.Items) != 1 || ls.Items[0].Remaining != 1 {
		t.Errorf("the sample after a buy of 3 of 4 through this instance (1 unit moved between segments) shows %+v, want 1 remaining", ls)
	}
}

// TestAdv7DriftRepairedWithinTheSweepAndNeverFromOneGlimpse: drift a hand
// edit of Redis makes (no stream moves) is found within a sweep of the
// unmoved sales and repaired at the pass after the one that found it, not
// by that pass; the live view shows the repair at its next sample (the
// sampler reads no quiet mark and recounts nothing here); drift a pass
// saw once and that is gone at the next is never repaired.
func TestAdv7DriftRepairedWithinTheSweepAndNeverFromOneGlimpse(t *testing.T) {
	defer func(was int) { quietMarksPerSample = was }(quietMarksPerSample)
	quietMarksPerSample = 0
	const n, every = 10, 50 * time.Millisecond
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	ids := createLiveSales(t, s, n)
	st := newSamplerState()
	adv7Settle(t, s, st, n)
	s.cfg.ReconcileEvery = every
	rc := newReconciler(s)
	// every < sweep: a pass visits ⌈n × every / sweep⌉ unmoved sales.
	budget := int((int64(n)*int64(every) + int64(sweepOf(n)) - 1) / int64(sweepOf(n)))
	passes := (n+budget-1)/budget + 2
	remaining := func(id string) int64 {
		t.Helper()
		v, err := s.rdb.HGet(ctx, s.eng.Key(id, "sale"), "r:A").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	drift := func(id string) int64 {
		if d, ok := s.live.drift.Load(id + "|A"); ok {
			return d.([2]int64)[1]
		}
		return 0
	}

	bad := ids[5]
	if err := s.rdb.HIncrBy(ctx, s.eng.Key(bad, "sale"), "r:A", 3).Err(); err != nil {
		t.Fatal(err)
	}
	// The sampler recounts it once by hand, so that the view shows the
	// drift and must show the repair.
	r := st.read[bad]
	r.due = time.Now()
	st.read[bad] = r
	if ls := adv7Find(s.sample(ctx, st, time.Second), bad); ls.Items[0].Remaining != 13 {
		t.Fatalf("the recount shows %+v, want 13 remaining", ls)
	}
	adv7NoRecount(st)
	found := 0
	for k := 1; remaining(bad) != 10; k++ {
		if k > passes {
			t.Fatalf("drift of %s not repaired after %d passes (found at pass %d)", bad, passes, found)
		}
		rc.pass(ctx)
		if found == 0 && drift(bad) != 0 {
			found = k
			if remaining(bad) != 13 {
				t.Fatalf("pass %d repaired %s from the one pass that found its drift", k, bad)
			}
		}
	}
	if ls := adv7Find(s.sample(ctx, st, time.Second), bad); ls.Items[0].Remaining != 10 {
		t.Errorf("the sample after the repair shows %+v, want 10 remaining", ls)
	}

	glimpse := ids[7]
	if err := s.rdb.HIncrBy(ctx, s.eng.Key(glimpse, "sale"), "r:A", 3).Err(); err != nil {
		t.Fatal(err)
	}
	for k := 1; drift(glimpse) == 0; k++ {
		if k > passes {
			t.Fatalf("drift of %s not found after %d passes", glimpse, passes)
		}
		rc.pass(ctx)
	}
	if err := s.rdb.HIncrBy(ctx, s.eng.Key(glimpse, "sale"), "r:A", -3).Err(); err != nil {
		t.Fatal(err)
	}
	rc.pass(ctx)
	rc.pass(ctx)
	var repairs dto.Metric
	if err := s.metrics.repairs.WithLabelValues(glimpse).Write(&repairs); err != nil {
		t.Fatal(err)
	}
	if got := repairs.GetCounter().GetValue(); got != 0 || drift(glimpse) != 0 {
		t.Errorf("drift seen by one pass only: %v repairs, drift %d now", got, drift(glimpse))
	}
}

// TestAdv7QuietChangeNotStarvedByBusySales: every sample, sales bought
// through this instance take the whole bound on full reads (2) and more;
// a change behind the instance's back in a quiet sale (a buy through the
// engine, its order stored, the sale quiet again) still shows within
// ⌈quiet sales ÷ quietMarksPerSample⌉ samples and a few more for the
// full reads it waits for: the rotation of the quiet marks and the
// oldest-read-first order of the full reads leave no sale behind.
func TestAdv7QuietChangeNotStarvedByBusySales(t *testing.T) {
	defer func(q, f int) { quietMarksPerSample, fullReadsPerSample = q, f }(quietMarksPerSample, fullReadsPerSample)
	const n, busy = 24, 4
	quietMarksPerSample, fullReadsPerSample = 2, 2
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	ids := createLiveSales(t, s, n)
	st := newSamplerState()
	adv7Settle(t, s, st, n)
	quiet := ids[n-1]
	rc, err := s.eng.Buy(ctx, quiet, "behind", []inventory.Line{{SKU: "A", Qty: 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the order stored, its sale quiet again", func() error {
		if o, err := s.db.Order(ctx, rc.Order.ID); err != nil || o.Status != inventory.OrderConfirmed {
			return fmt.Errorf("order %+v (%v)", o, err)
		}
		for _, id := range s.orders.Active() {
			if id == quiet {
				return fmt.Errorf("%s moved lately", quiet)
			}
		}
		return nil
	})
	limit := (n-busy+quietMarksPerSample-1)/quietMarksPerSample + busy + 2
	for k := 1; ; k++ {
		// busy sales bought from through this instance, before each sample.
		for j := range busy {
			id := ids[j]
			if _, err := s.Restock(ctx, id, "A", 1); err != nil {
				t.Fatal(err)
			}
		}
		if ls := adv7Find(s.sample(ctx, st, time.Second), quiet); ls.Items[0].Remaining == 9 {
			break
		}
		if k == limit {
			t.Fatalf("%d samples with %d busy sales after a buy behind the instance's back, %s does not show it", k, busy, quiet)
		}
	}
}

// TestAdv7ArchivedSalesLeaveNoState: sales that end, drain and are
// archived leave the live view and every map the sampler and the reconcile
// loop keep of them (st.marked among them), and the passes and samples
// after go on without them.
func TestAdv7ArchivedSalesLeaveNoState(t *testing.T) {
	defer func(q int) { quietMarksPerSample = q }(quietMarksPerSample)
	quietMarksPerSample = 1
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	s := startForTest(t, Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbtest.PostgresURL(t),
		Addr: "127.0.0.1:0", ReconcileEvery: -1, SampleEvery: -1, ArchiveEvery: 20 * time.Millisecond, Pipeline: quietPipe})
	ids := createLiveSales(t, s, 4)
	if _, err := s.CreateSale(ctx, SaleDef{Sale: inventory.Sale{ID: "hot", PerUserLimit: 4, Items: []inventory.Item{{SKU: "A", Stock: 4}}},
		Segments: []int64{2}}); err != nil {
		t.Fatal(err)
	}
	st := newSamplerState()
	s.cfg.ReconcileEvery = 10 * time.Millisecond
	rc := newReconciler(s)
	for range 3 {
		s.sample(ctx, st, time.Second)
		rc.pass(ctx)
	}
	if _, err := s.Buy(ctx, BuyRequest{SaleID: "hot", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 3}}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ids[0], ids[1], "hot"} {
		if _, err := s.CloseSale(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	keep := map[string]bool{ids[2]: true, ids[3]: true}
	waitfor.Until(t, waitfor.Patience, "the closed sales archived and forgotten", func() error {
		v := s.sample(ctx, st, time.Second)
		rc.pass(ctx)
		if len(v.Sales) != len(keep) {
			return fmt.Errorf("%d sales in the view, want %d", len(v.Sales), len(keep))
		}
		for name, m := range map[string][]string{"last": keysOf(st.last), "read": keysOf(st.read), "marked": keysOf(st.marked),
			"prev": keysOf(st.prev), "final": keysOf(st.final), "skipped": keysOf(st.skipped), "visited": keysOf(rc.visited), "live": keysOf(rc.live)} {
			for _, id := range m {
				if !keep[id] {
					return fmt.Errorf("%s still holds %s", name, id)
				}
			}
		}
		return nil
	})
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestAdv7ExpiryShowsAtTheNextSample: a reservation the expiry loop
// expires (no buyer, no operator: the loop's OnExpired is all that tells
// the consumer) shows in the next sample, with no quiet marks read and no
// recount due.
func TestAdv7ExpiryShowsAtTheNextSample(t *testing.T) {
	defer func(q int) { quietMarksPerSample = q }(quietMarksPerSample)
	quietMarksPerSample = 0
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	sale := inventory.Sale{ID: "x000", PerUserLimit: 2, PaymentTimeout: 3 * time.Second, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
	if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
		t.Fatal(err)
	}
	if err := s.eng.CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}
	adv7Sale(t, s, "x001", false)
	st := newSamplerState()
	adv7Settle(t, s, st, 2)
	if _, err := s.Buy(ctx, BuyRequest{SaleID: "x000", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 1}}}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the reservation shown and stored, the sale quiet again", func() error {
		ls := adv7Find(s.sample(ctx, st, time.Second), "x000")
		if ls.Items[0].Awaiting != 1 || ls.Backlog != 0 || len(s.orders.Active()) != 0 {
			return fmt.Errorf("%+v, moved lately %v", ls, s.orders.Active())
		}
		return nil
	})
	adv7NoRecount(st)
	waitfor.Until(t, waitfor.Patience, "the reservation expired in Redis", func() error {
		states, errs := s.eng.Stocks(ctx, []string{"x000"})
		if errs[0] != nil || states[0].Items[0].Awaiting != 0 {
			return fmt.Errorf("awaiting: %+v (%v)", states[0].Items, errs[0])
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // OnExpired runs once the script returned
	if ls := adv7Find(s.sample(ctx, st, time.Second), "x000"); ls.Items[0].Awaiting != 0 || ls.Items[0].Remaining != 10 {
		t.Errorf("the sample after the reservation expired shows %+v", ls)
	}
}
