package inventory_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
)

// TestThrottleBurstAcrossClocks: a buyer's burst is the same whichever
// instance's clock stamps each buy. Two engines on one sale whose clocks
// are 10 ms apart (or one engine whose concurrent calls reach Redis in the
// other order than their times) share a buyer's bucket: the buyer has made
// two buys of a burst of three, and the third is let through.
//
// Fails today: buy.lua runs the throttle on the time the engine sends,
// so a buy stamped earlier than the bucket's last update finds that
// difference added to its debt, and the last token of the burst is
// refused. Redis's own clock (TIME) in the script would make the bucket's
// time move forward only.
func TestThrottleBurstAcrossClocks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ahead := newRig(t, b, inventory.Options{})
		ahead.clock.Set(ahead.clock.Now().Add(10 * time.Millisecond))
		behind := inventory.New(ahead.rdb, inventory.Options{Prefix: ahead.prefix, Clock: newTestClock()})
		ahead.create(inventory.Sale{ID: "s1", PerUserLimit: 10, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		bucket, err := throttleOf(ratelimit.PerHour(1, 2)) // a burst of three
		if err != nil {
			t.Fatal(err)
		}
		req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: &bucket}
		for i := range 2 {
			if _, err := ahead.eng.BuyWith(ahead.ctx, req); err != nil {
				t.Fatalf("buy %d of the burst: %v", i+1, err)
			}
		}
		if _, err := behind.BuyWith(ahead.ctx, req); err != nil {
			t.Errorf("the third buy of a burst of three, stamped 10 ms earlier: %v", err)
		}
	})
}
