package inventory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// TestRebuildRaisesTheStreamToTheFloor rebuilds a lost sale whose stream
// is behind the newest event id the system of record holds: once missing
// altogether, once left behind as an empty stream with a consumer group (the
// consumer makes one on a stream it finds gone). The rebuilt stream's next
// event comes after the floor; the group sees that event and nothing else.
func TestRebuildRaisesTheStreamToTheFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, withGroup := range []bool{false, true} {
			name := "missing stream"
			if withGroup {
				name = "empty stream with a group"
			}
			t.Run(name, func(t *testing.T) {
				const floor = "9999999999999-7" // far past any clock here
				var snap inventory.Snapshot
				r := newRig(t, b, inventory.Options{Loader: inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) {
					return snap, nil
				})})
				sale := inventory.Sale{ID: "floor", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 3}}}
				r.create(sale)
				snap = inventory.Snapshot{Sale: sale, NewestEvent: floor}
				// Redis loses the sale and its stream.
				for _, k := range []string{"sale", "bought", "orders", "idem"} {
					if err := r.rdb.Del(r.ctx, r.eng.Key("floor", k)).Err(); err != nil {
						t.Fatal(err)
					}
				}
				events := r.eng.EventsKey("floor")
				if err := r.rdb.Del(r.ctx, events).Err(); err != nil {
					t.Fatal(err)
				}
				if withGroup {
					if err := r.rdb.XGroupCreateMkStream(r.ctx, events, "g", "0").Err(); err != nil {
						t.Fatal(err)
					}
				}
				rc, err := r.eng.Buy(r.ctx, "floor", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "")
				if err != nil {
					t.Fatal(err)
				}
				msgs, err := r.rdb.XRange(r.ctx, events, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) != 1 || inventory.CompareEventIDs(msgs[0].ID, floor) <= 0 {
					t.Fatalf("stream after the rebuild and one buy: %v, want one entry after %s", msgs, floor)
				}
				if withGroup {
					got, err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{events, ">"}, Count: 10}).Result()
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != 1 || len(got[0].Messages) != 1 || got[0].Messages[0].ID != msgs[0].ID {
						t.Fatalf("the group read %v, want only the buy %s", got, msgs[0].ID)
					}
					ev, err := inventory.ParseEvent("floor", got[0].Messages[0])
					if err != nil || ev.Order.ID != rc.Order.ID {
						t.Fatalf("the group's entry is %+v (%v), want the buy of order %s", ev, err, rc.Order.ID)
					}
				}
			})
		}
	})
}

// TestRebuildRefusesACorruptFloor: a newest event id that is not a stream
// id is a corrupt snapshot; the sale is not made live.
func TestRebuildRefusesACorruptFloor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		sale := inventory.Sale{ID: "floor", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 3}}}
		for _, bad := range []string{"0-0", "12", "12-x", "-1-2", "012-1", "1-2-3", "18446744073709551616-0"} {
			r := newRig(t, b, inventory.Options{Loader: inventory.LoaderFunc(func(context.Context, string) (inventory.Snapshot, error) {
				return inventory.Snapshot{Sale: sale, NewestEvent: bad}, nil
			})})
			_, err := r.eng.Buy(r.ctx, "floor", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "")
			if !errors.Is(err, inventory.ErrCorrupt) {
				t.Errorf("floor %q: %v, want ErrCorrupt", bad, err)
			}
			if n, err := r.rdb.Exists(r.ctx, r.eng.Key("floor", "sale")).Result(); err != nil || n != 0 {
				t.Errorf("floor %q: the sale is live (%d, %v)", bad, n, err)
			}
		}
	})
}
