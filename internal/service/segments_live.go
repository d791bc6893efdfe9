package service

import (
	"context"
	"slices"
)

// asOneSale merges the live samples of a segmented sale's segments into
// one sample under the sale's id, as buyers know it (the dashboard and
// the per-sale metrics show the sale once): counts and units summed, the
// oldest lag, the first segment's status, the first error. Samples of
// other sales pass unchanged, in their order; a merged sale takes its
// first segment's place.
func (s *Service) asOneSale(ctx context.Context, sales []liveSale) []liveSale {
	out := sales[:0:0]
	at := map[string]int{} // segmented sale -> its index in out
	for _, ls := range sales {
		parent, err := s.router.Parent(ctx, ls.ID)
		if err != nil || parent == "" {
			out = append(out, ls)
			continue
		}
		i, ok := at[parent]
		if !ok {
			ls.ID = parent
			ls.Items = slices.Clone(ls.Items)
			at[parent] = len(out)
			out = append(out, ls)
			continue
		}
		sum := &out[i]
		sum.Orders += ls.Orders
		sum.OrdersPerSecond += ls.OrdersPerSecond
		sum.Confirmed += ls.Confirmed
		sum.Pending += ls.Pending
		sum.Paid += ls.Paid
		sum.Awaiting += ls.Awaiting
		sum.Expired += ls.Expired
		sum.Backlog += ls.Backlog
		sum.LagSeconds = max(sum.LagSeconds, ls.LagSeconds)
		if sum.Error == "" {
			sum.Error = ls.Error
		}
		for j := range sum.Items {
			k := slices.IndexFunc(ls.Items, func(it liveItem) bool { return it.SKU == sum.Items[j].SKU })
			if k < 0 {
				continue
			}
			it, add := &sum.Items[j], ls.Items[k]
			it.Sold += add.Sold
			it.Awaiting += add.Awaiting
			it.Drift += add.Drift
			it.StockDrift += add.StockDrift
			if it.Stocked >= 0 {
				it.Stocked += add.Stocked
				it.Remaining += add.Remaining
			}
		}
	}
	for _, i := range at {
		for j := range out[i].Items {
			it := &out[i].Items[j]
			it.SoldOut = it.Stocked >= 0 && it.Remaining == 0
		}
	}
	return out
}
