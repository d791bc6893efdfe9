package segment_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// TestThrottledBuyFallsThroughCountsOnce: a buyer's throttle counts one
// Seller.Buy once, however many times the buy is sent while units are
// moved to its home segment; and a buyer with no token left is refused,
// even when the engine's sold-out flag of the home segment refused the
// first attempt before the throttle saw it.
func TestThrottledBuyFallsThroughCountsOnce(t *testing.T) {
	bucket := inventory.Throttle{Rate: 1, Period: time.Hour} // one buy, then none for an hour
	sale := inventory.Sale{ID: "hot", PerUserLimit: 5, Items: []inventory.Item{{SKU: "X", Stock: 6}}}
	// drain buys the units of seg as others homed there, and returns the throttled buyer homed there.
	drain := func(r *rig, segs []string, seg string, units int) string {
		users := usersHomedAt(segs, seg, 2)
		if _, err := r.eng.Buy(r.ctx, seg, users[1], []inventory.Line{{SKU: "X", Qty: int64(units)}}, ""); err != nil {
			t.Fatalf("drain %s: %v", seg, err)
		}
		return users[0]
	}
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Run("one buy falls through", func(t *testing.T) {
			// No sold-out flags: the first attempt reaches the script and
			// the throttle; the units are moved; the buy is sent again.
			r := newRig(t, be, inventory.Options{SoldOut: inventory.SoldOut{Off: true}}, segment.Options{})
			segs := r.create(sale, 2)
			buyer := drain(r, segs, segs[0], 3)
			rc, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: buyer, Lines: one("X"), Throttle: &bucket})
			if err != nil {
				t.Fatalf("the buyer's only buy, short at home with units elsewhere: %v", err)
			}
			if rc.Order.SaleID != segs[0] {
				t.Errorf("order in %s, want the home segment %s", rc.Order.SaleID, segs[0])
			}
		})
		t.Run("no token left", func(t *testing.T) {
			r := newRig(t, be, inventory.Options{}, segment.Options{})
			segs := r.create(sale, 2)
			buyer := usersHomedAt(segs, segs[0], 1)[0]
			if _, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: buyer, Lines: one("X"), Throttle: &bucket}); err != nil {
				t.Fatalf("the first buy: %v", err)
			}
			drain(r, segs, segs[0], 2) // home empty: the engine flags it sold out
			_, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: buyer, Lines: one("X"), Throttle: &bucket})
			if !errors.Is(err, inventory.ErrThrottled) {
				t.Errorf("a second buy with no token left, its home flagged sold out: %v, want throttled", err)
			}
		})
	})
}
