package reconcile

import (
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestCombine: a segmented sale's report sums its segments' items (an
// unlimited item's stock figures stay -1) and is consistent only if every
// segment is, even when their drifts cancel out.
func TestCombine(t *testing.T) {
	seg := func(consistent bool, drift int64) Report {
		return Report{Consistent: consistent, Items: []Item{
			{SKU: "A", Stocked: 10, Remaining: 4, Sold: 6, OrdersInDB: 5, InFlight: 1 + drift, Drift: drift, Held: 6, StockedInDB: 10},
			{SKU: "B", Stocked: -1, Remaining: -1, Sold: 2, OrdersInDB: 2, Held: 2, StockedInDB: -1},
		}}
	}
	r := Combine("hot", []Report{seg(true, 0), seg(true, 0), seg(true, 0)})
	if !r.Consistent || r.Sale != "hot" || len(r.Items) != 2 {
		t.Fatalf("%+v", r)
	}
	if a := r.Items[0]; a.Stocked != 30 || a.Remaining != 12 || a.Sold != 18 || a.OrdersInDB != 15 || a.InFlight != 3 || a.Held != 18 || a.StockedInDB != 30 {
		t.Errorf("A: %+v", a)
	}
	if b := r.Items[1]; b.Stocked != -1 || b.Remaining != -1 || b.StockedInDB != -1 || b.Sold != 6 || b.OrdersInDB != 6 {
		t.Errorf("B: %+v", b)
	}
	if r := Combine("hot", []Report{seg(false, 2), seg(false, -2)}); r.Consistent {
		t.Errorf("drifts that cancel out read consistent: %+v", r)
	}
}

// TestCombineCountsUnitsMoving: 3 units left segment hot:1 for hot:0 and
// have not arrived (the move's second half never ran). Each segment is
// consistent alone; the sale stocks its 20 units, 3 of them moving, and is
// not consistent until they are in a segment again. Before, it read 17
// stocked and consistent. Read in both segments (the source before the
// move, the destination after), they count once.
func TestCombineCountsUnitsMoving(t *testing.T) {
	item := func(stocked, remaining int64) []Item {
		return []Item{{SKU: "A", Stocked: stocked, Remaining: remaining, Sold: stocked - remaining, OrdersInDB: stocked - remaining,
			Held: stocked - remaining, StockedInDB: stocked}}
	}
	out := inventory.Move{ID: "mv-1", Peer: "hot:0", SKU: "A", Units: -3}
	in := inventory.Move{ID: "mv-1", Peer: "hot:1", SKU: "A", Units: 3}
	r := Combine("hot", []Report{
		{Sale: "hot:0", Consistent: true, Items: item(10, 4)},
		{Sale: "hot:1", Consistent: true, Items: item(7, 7), Moves: []inventory.Move{out}},
	})
	a := r.Items[0]
	if r.Consistent || a.Stocked != 20 || a.Remaining != 11 || a.Sold != 6 || a.Moving != 3 || a.StockDrift != -3 || a.StockedDrift != 0 {
		t.Errorf("with 3 units moving: consistent %v, %+v", r.Consistent, a)
	}
	r = Combine("hot", []Report{
		{Sale: "hot:0", Consistent: true, Items: item(13, 7), Moves: []inventory.Move{in}},
		{Sale: "hot:1", Consistent: true, Items: item(10, 10)},
	})
	a = r.Items[0]
	if !r.Consistent || a.Stocked != 20 || a.Remaining != 14 || a.Moving != 0 || a.StockDrift != 0 || a.StockedDrift != 0 {
		t.Errorf("with 3 units read in both segments: consistent %v, %+v", r.Consistent, a)
	}
}
