package reconcile

import (
	"context"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// Combine is the report of a segmented sale (package segment) from the
// reports of its segments, each an ordinary sale reconciled alone (Sale):
// every figure of an item summed over the segments (an unlimited item's
// stock figures stay -1), and the units on their way between segments
// (inventory.CountMoves of the segments' Moves) added back: counted in
// Stocked and StockedInFlight, shown as Moving, and not in Remaining. So
// Stocked is every unit the sale stocked whatever is moving, and the sale
// is consistent only if every segment is and no unit is in none of them
// (StockDrift is -Moving). Segments have the same items in the same order;
// an item a segment's report lacks counts nothing there.
func Combine(saleID string, segments []Report) Report {
	out := Report{Sale: saleID, Consistent: true}
	moves := make(map[string][]inventory.Move, len(segments))
	for i, r := range segments {
		moves[r.Sale] = r.Moves
		out.Consistent = out.Consistent && r.Consistent
		if i == 0 {
			out.Items = append([]Item(nil), r.Items...)
			continue
		}
		for j := range out.Items {
			var it Item
			for _, cand := range r.Items {
				if cand.SKU == out.Items[j].SKU {
					it = cand
				}
			}
			sum := &out.Items[j]
			sum.Sold += it.Sold
			sum.OrdersInDB += it.OrdersInDB
			sum.InFlight += it.InFlight
			sum.Drift += it.Drift
			sum.Held += it.Held
			sum.HeldDrift += it.HeldDrift
			if sum.Stocked != inventory.Unlimited {
				sum.Stocked += it.Stocked
				sum.Remaining += it.Remaining
				sum.StockDrift += it.StockDrift
				sum.StockedInDB += it.StockedInDB
				sum.StockedInFlight += it.StockedInFlight
				sum.StockedDrift += it.StockedDrift
			}
		}
	}
	inMotion := inventory.CountMoves(moves)
	for j := range out.Items {
		it := &out.Items[j]
		m := inMotion[it.SKU]
		if it.Stocked == inventory.Unlimited || m == (inventory.InMotion{}) {
			continue
		}
		it.Stocked += m.Moving - m.Twice
		it.StockedInFlight += m.Moving - m.Twice
		it.Remaining -= m.Twice
		it.StockDrift -= m.Moving
		it.Moving = m.Moving
		if it.StockDrift != 0 {
			out.Consistent = false
		}
	}
	return out
}

// Archived is the report of a sale whose keys are gone from Redis
// (archived): the database is all there is, so its numbers are compared
// with nothing and the sale is consistent.
func Archived(ctx context.Context, db *store.Store, saleID string) (Report, error) {
	totals, err := db.Totals(ctx, saleID)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Sale: saleID, Consistent: true, Items: make([]Item, 0, len(totals))}
	for _, t := range totals {
		remaining := int64(-1)
		if t.Stocked != -1 {
			remaining = t.Stocked - t.Sold
		}
		rep.Items = append(rep.Items, Item{SKU: t.SKU, Stocked: t.Stocked, Remaining: remaining, Sold: t.Sold,
			OrdersInDB: t.Sold, StockedInDB: t.Stocked, Held: t.Sold})
	}
	return rep, nil
}
