package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
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

// TestAdvRepairRaisesTheStreamToTheFloor: a sale still in Redis whose
// stream is behind the newest event id the system of record holds (a
// replica promoted while behind) is repaired, not rebuilt; the repair
// raises the stream's last id to the floor even when no counter differs,
// and the next event comes after it, on every backend (the script's XADD
// and XDEL of the floor on a Cluster, the embedded server without XSETID).
func TestAdvRepairRaisesTheStreamToTheFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const floor = "9999999999999-7"
		sale := inventory.Sale{ID: "floor", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 3}}}
		loader := inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) {
			return inventory.Snapshot{Sale: sale, NewestEvent: floor}, nil
		})
		r := newRig(t, b, inventory.Options{Loader: loader})
		r.create(sale)
		events := r.eng.EventsKey("floor")
		if err := r.rdb.XGroupCreateMkStream(r.ctx, events, "seckill", "$").Err(); err != nil {
			t.Fatal(err)
		}
		rep, err := r.eng.Repair(r.ctx, "floor", nil)
		if err != nil || len(rep.Changes) != 0 {
			t.Fatalf("Repair: %+v, %v; want no change", rep, err)
		}
		info, err := r.rdb.XInfoStream(r.ctx, events).Result()
		if err != nil || info.LastGeneratedID != floor {
			t.Fatalf("the stream's last id after the repair: %+v, %v; want %s", info, err, floor)
		}
		if _, err := r.eng.Repair(r.ctx, "floor", nil); err != nil {
			t.Fatalf("a second repair (nothing in flight): %v", err)
		}
		if _, err := r.eng.Buy(r.ctx, "floor", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
		msgs, err := r.rdb.XRange(r.ctx, events, "("+floor, "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("entries after the floor: %v, %v; want the buy", msgs, err)
		}
	})
}
