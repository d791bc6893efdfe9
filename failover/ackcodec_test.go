package failover

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/seckill/seckill/inventory"
)

// TestOrderEncodingRoundTrips: every field of an order comes back from the
// ring's encoding as it went in (nil and empty lines told apart, times
// with their zone, the zero time).
func TestOrderEncodingRoundTrips(t *testing.T) {
	created := time.Unix(1_790_000_000, 123_456_789)
	orders := []inventory.Order{
		{},
		{ID: "s1.0001", SaleID: "s1", UserID: "u1", Status: inventory.OrderPending,
			Items:          []inventory.Line{{SKU: "A", Qty: 1}, {SKU: "é-ß", Qty: -3}, {SKU: "", Qty: 1 << 40}},
			IdempotencyKey: "k-1", CreatedAt: created, Payment: inventory.PaymentAwaiting,
			PayBy: created.Add(90 * time.Second).UTC(), PaymentRef: "ref 7"},
		{ID: "s2.x", SaleID: "s2", UserID: "u2", Status: inventory.OrderCancelled, Items: []inventory.Line{},
			CreatedAt: created.In(time.FixedZone("", 5*3600+1800))},
	}
	for _, o := range orders {
		got, err := decodeOrder(appendOrder(nil, o))
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("round trip of %+v:\n got %+v, %v", o, got, err)
		}
	}
}

// TestRingReusesItsSlots: once full, the ring keeps the latest orders, each
// once in its last state, and encodes a new order into the slot it
// overwrites without allocating; a record that does not decode fails the
// snapshot rather than leave its order out of the hand-over.
func TestRingReusesItsSlots(t *testing.T) {
	r := ackRing{size: 3}
	order := func(id string, st inventory.OrderStatus) inventory.Order {
		return inventory.Order{ID: id, SaleID: "s", UserID: "u-" + id, Status: st, Items: []inventory.Line{{SKU: "A", Qty: 1}}}
	}
	for _, id := range []string{"1", "2", "3", "4"} {
		r.add(order(id, inventory.OrderPending))
	}
	r.add(order("3", inventory.OrderCancelled))
	acked, _, err := r.snapshot()
	want := []inventory.Order{order("3", inventory.OrderCancelled), order("4", inventory.OrderPending)}
	if err != nil || !reflect.DeepEqual(acked, want) {
		t.Fatalf("snapshot = %+v, %v; want %+v", acked, err, want)
	}
	o := order("5", inventory.OrderPending)
	if n := testing.AllocsPerRun(100, func() { r.add(o) }); n != 0 {
		t.Errorf("add into a full ring allocates %v times, want 0", n)
	}
	r.buf[0] = r.buf[0][:len(r.buf[0])-1]
	if _, _, err := r.snapshot(); !errors.Is(err, errBadRecord) {
		t.Errorf("snapshot of a truncated record: %v, want errBadRecord", err)
	}
}
