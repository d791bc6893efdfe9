package service

import (
	"cmp"
	"context"
	"slices"
)

// What the live view and the per-sale metrics hold stays bounded: a sale
// leaves both once it is archived (it can no longer change, and the
// database answers for it), and a very wide sale does not multiply what
// every event stream is sent every second, nor the series of /metrics.

// liveItemsShown is how many items of a sale a streamed sample (GET
// /v1/live, the dashboard) shows one by one: the most active ones (see
// mostActive); the others are summed in the sale's other_items.
const liveItemsShown = 24

// itemSeriesPerSale is how many items of a sale have series of their own
// in /metrics: the first ones, in the sale's order, so that a series never
// changes its item; the others are summed under the sku otherItemsLabel.
const itemSeriesPerSale = 100

// otherItemsLabel is the sku label of the series that sum a sale's items
// past itemSeriesPerSale: no sku can be named so (inventory.ValidID).
const otherItemsLabel = "(other)"

// liveItemsSum sums items of a sale. Remaining and Stocked are the
// limited items' (an unlimited item has neither): Unlimited counts the
// others.
type liveItemsSum struct {
	Count      int   `json:"count"`
	Unlimited  int   `json:"unlimited"`
	SoldOut    int   `json:"sold_out"` // how many of them are sold out
	Remaining  int64 `json:"remaining"`
	Stocked    int64 `json:"stocked"`
	Sold       int64 `json:"sold"`
	Awaiting   int64 `json:"awaiting_payment"`
	Drift      int64 `json:"drift"`
	StockDrift int64 `json:"stock_drift"`
}

func sumItems(items []liveItem) *liveItemsSum {
	sum := &liveItemsSum{Count: len(items)}
	for _, it := range items {
		if it.Stocked < 0 {
			sum.Unlimited++
		} else {
			sum.Remaining += it.Remaining
			sum.Stocked += it.Stocked
		}
		if it.SoldOut {
			sum.SoldOut++
		}
		sum.Sold += it.Sold
		sum.Awaiting += it.Awaiting
		sum.Drift += it.Drift
		sum.StockDrift += it.StockDrift
	}
	return sum
}

// streamed is the view as the event streams get it: each sale's
// liveItemsShown most active items, the others summed.
func (v liveView) streamed() liveView {
	var sales []liveSale // v.Sales, copied before the first change
	for i, ls := range v.Sales {
		if len(ls.Items) <= liveItemsShown {
			continue
		}
		if sales == nil {
			sales = slices.Clone(v.Sales)
		}
		sales[i] = ls.mostActive(liveItemsShown)
	}
	if sales != nil {
		v.Sales = sales
	}
	return v
}

// mostActive returns the sale with its n most active items, in the sale's
// order, and the others summed: drifting items first (an operator must see
// them), then by units sold, then by units awaiting payment.
func (ls liveSale) mostActive(n int) liveSale {
	rank := make([]int, len(ls.Items))
	for i := range rank {
		rank[i] = i
	}
	drifting := func(it liveItem) bool { return it.Drift != 0 || it.StockDrift != 0 }
	slices.SortStableFunc(rank, func(a, b int) int {
		x, y := ls.Items[a], ls.Items[b]
		if dx, dy := drifting(x), drifting(y); dx != dy {
			if dx {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(y.Sold, x.Sold), cmp.Compare(y.Awaiting, x.Awaiting))
	})
	shown := make([]bool, len(ls.Items))
	for _, i := range rank[:n] {
		shown[i] = true
	}
	items := make([]liveItem, 0, n)
	others := make([]liveItem, 0, len(ls.Items)-n)
	for i, it := range ls.Items {
		if shown[i] {
			items = append(items, it)
		} else {
			others = append(others, it)
		}
	}
	ls.Items, ls.OtherItems = items, sumItems(others)
	return ls
}

// dropGone drops from the sampler's state the sales that left the live
// set, were read a last time and are archived since (or deleted: a create
// undone): their figures leave the live view and /metrics, their counters
// by sale too. A segmented sale's segments go together, once every one is
// gone: until then the sale shows the sum of all of them.
func (s *Service) dropGone(ctx context.Context, st *samplerState, live map[string]bool) {
	var done []string
	for id := range st.last {
		if !live[id] && st.final[id] >= finalTries {
			done = append(done, id)
		}
	}
	if len(done) == 0 {
		return
	}
	slices.Sort(done)
	gone, err := s.db.Gone(ctx, done)
	if err != nil || len(gone) == 0 {
		return
	}
	isGone := make(map[string]bool, len(gone))
	for _, id := range gone {
		isGone[id] = true
	}
	// A gone segment's siblings this sampler has not seen end (archived
	// before this instance started, say) are asked of the database too.
	segsOf := map[string][]string{} // gone segment -> its sale's segments; nil: not known now
	var ask []string
	for _, id := range gone {
		parent, err := s.router.Parent(ctx, id)
		if err == nil && parent == "" {
			continue
		}
		var segs []string
		if err == nil {
			segs, _ = s.router.Segments(ctx, parent)
		}
		segsOf[id] = segs
		for _, seg := range segs {
			if _, seen := st.last[seg]; !seen && !live[seg] && !slices.Contains(ask, seg) {
				ask = append(ask, seg)
			}
		}
	}
	if len(ask) > 0 {
		more, err := s.db.Gone(ctx, ask)
		if err != nil {
			return
		}
		for _, id := range more {
			isGone[id] = true
		}
	}
	for _, id := range gone {
		if segs, segment := segsOf[id]; segment && (segs == nil || slices.ContainsFunc(segs, func(seg string) bool { return !isGone[seg] })) {
			continue // a segment whose siblings are not all gone, or not known now
		}
		s.forgetSale(st, id)
	}
}

// forgetSale drops a sale that can no longer change from the live view
// and its series from /metrics.
func (s *Service) forgetSale(st *samplerState, id string) {
	for _, it := range st.last[id].Items {
		s.live.drift.Delete(id + "|" + it.SKU)
	}
	delete(st.last, id)
	delete(st.prev, id)
	delete(st.skipped, id)
	delete(st.read, id)
	delete(st.marked, id)
	delete(st.final, id)
	s.live.dirty.Delete(id)
	s.metrics.deadLetters.DeleteLabelValues(id)
	s.metrics.repairs.DeleteLabelValues(id)
}
