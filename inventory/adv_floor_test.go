package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/inventory"
)

// TestAdvRepairAfterAFloorWithNoEventSince: a lost sale is rebuilt with a
// floor (the stream's last id raised by an entry added and deleted at
// once), and nothing is appended after it: the buy that made it rebuild was
// refused (sold out). The stream then has no entry at all, and the consumer
// group (made by the consumer at "0") has nothing to read. Repair must see
// the sale as settled: nothing is in flight. Were the raised last id taken
// for an undelivered entry, every repair of the sale would say in flight
// until its next event, and degraded mode's recovery (which repairs every
// sale while nobody sells, so no event can come) would never end.
func TestAdvRepairAfterAFloorWithNoEventSince(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, withGroup := range []bool{false, true} {
			const floor = "9999999999999-7"
			sale := inventory.Sale{ID: "floor", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
			snap := inventory.Snapshot{Sale: sale, NewestEvent: floor, Orders: []inventory.Order{{ID: inventory.NewOrderID("floor"), SaleID: "floor",
				UserID: "u0", Status: inventory.OrderConfirmed, Items: []inventory.Line{{SKU: "A", Qty: 1}}, CreatedAt: time.UnixMilli(1000)}}}
			loader := inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) { return snap, nil })
			r := newRig(t, b, inventory.Options{Loader: loader})
			if _, err := r.eng.Buy(r.ctx, "floor", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("buy of a sold-out rebuilt sale: %v, want ErrSoldOut", err)
			}
			events := r.eng.EventsKey("floor")
			if withGroup { // as the order consumer makes it
				if err := r.rdb.XGroupCreateMkStream(r.ctx, events, "seckill", "0").Err(); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := r.eng.Repair(r.ctx, "floor", loader)
			if err != nil {
				t.Errorf("group %v: Repair of a settled rebuilt sale: %v", withGroup, err)
			} else if len(rep.Changes) != 0 {
				t.Errorf("group %v: Repair changed %+v, want nothing", withGroup, rep.Changes)
			}
		}
	})
}
