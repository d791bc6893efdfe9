package segment

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestSoldOutFlagsBounded: a Seller that finds item after item empty, over
// sale after sale, keeps at most maxSoldOutFlags flags, and a flag just
// set still refuses.
func TestSoldOutFlagsBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(nil, nil, Options{Clock: inventory.ClockFunc(func() time.Time { return now })})
	for i := range maxSoldOutFlags + 5000 {
		sale := "s" + strconv.Itoa(i)
		s.markEmpty(sale, "A")
		if s.refuse(sale, []inventory.Line{{SKU: "A", Qty: 1}}, "") == nil {
			t.Fatalf("sale %s: the flag just set does not refuse", sale)
		}
	}
	if n := s.empty.Len(); n > maxSoldOutFlags {
		t.Errorf("%d flags kept, bound %d", n, maxSoldOutFlags)
	}
}
