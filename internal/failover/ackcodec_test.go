package failover

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
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
	acked, _, _, err := r.snapshot()
	want := []inventory.Order{order("3", inventory.OrderCancelled), order("4", inventory.OrderPending)}
	if err != nil || !reflect.DeepEqual(acked, want) {
		t.Fatalf("snapshot = %+v, %v; want %+v", acked, err, want)
	}
	o := order("5", inventory.OrderPending)
	if n := testing.AllocsPerRun(100, func() { r.add(o) }); n != 0 {
		t.Errorf("add into a full ring allocates %v times, want 0", n)
	}
	r.buf[0] = r.buf[0][:len(r.buf[0])-1]
	if _, _, _, err := r.snapshot(); !errors.Is(err, errBadRecord) {
		t.Errorf("snapshot of a truncated record: %v, want errBadRecord", err)
	}
}

// TestRingFillsInOneAllocationPerOrder: while the ring fills, each order
// takes one allocation, its record, and no record shares the buffer it was
// encoded in. (Seen failing with each record appended to
// nil: 2 allocations per order for the record alone.)
func TestRingFillsInOneAllocationPerOrder(t *testing.T) {
	const n = 300
	r := ackRing{size: 2 * n}
	r.buf = make([][]byte, 0, r.size) // the slots' own slice is not counted
	o := inventory.Order{ID: "s.01KAZ5V3J9Q8W2E4R6T8Y0U2I4", SaleID: "s", UserID: "user-1234", Status: inventory.OrderPending,
		Items: []inventory.Line{{SKU: "A", Qty: 1}}, CreatedAt: time.Unix(1_800_000_000, 0).UTC()}
	r.add(o) // the scratch buffer's own allocation
	if got := testing.AllocsPerRun(n-1, func() { r.add(o) }); got != 1 {
		t.Errorf("add into a filling ring allocates %v times, want 1", got)
	}
	o.UserID = "another"
	r.add(o)
	acked, _, _, err := r.snapshot()
	if err != nil || len(acked) != 1 || acked[0].UserID != "another" {
		t.Fatalf("snapshot: %v, %+v", err, acked)
	}
	first, err := decodeOrder(r.buf[0])
	if err != nil || first.UserID != "user-1234" {
		t.Fatalf("first record %+v, %v: overwritten through the scratch buffer", first, err)
	}
}
