package inventory

import (
	"strconv"
	"testing"
	"time"
)

// TestSoldOutFlagsBounded: an engine that sees item after item sell out,
// over sale after sale, keeps at most MaxFlags flags (the default one
// here), and a flag just set still refuses.
func TestSoldOutFlagsBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newSoldOutFlags(SoldOut{}, ClockFunc(func() time.Time { return now }))
	const bound = 1 << 16
	for i := range bound + 5000 {
		sale := "s" + strconv.Itoa(i)
		f.mark(sale, "A", f.epoch.Load())
		if i%1000 == 0 {
			now = now.Add(time.Millisecond) // flags set 500ms ago have expired
		}
		if f.refuse(sale, []Line{{SKU: "A", Qty: 1}}, "") == nil {
			t.Fatalf("sale %s: the flag just set does not refuse", sale)
		}
	}
	if n := f.flags.Len(); n > bound {
		t.Errorf("%d flags kept, bound %d", n, bound)
	}
}
