package reconcile

import "testing"

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
