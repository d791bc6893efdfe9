package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// fullOrder sets every field of an order, each line's fields too, to a
// value that is not the zero one. Its times carry no monotonic reading (the
// encoding keeps the instant and the zone offset, which is all the
// database is handed).
func fullOrder() inventory.Order {
	created := time.Unix(1_790_000_000, 123_456_789).In(time.FixedZone("", -(3*3600 + 30*60)))
	return inventory.Order{ID: "s1.00ff", SaleID: "s1", UserID: "ü-1", Status: inventory.OrderConfirmed,
		Items:          []inventory.Line{{SKU: "A", Qty: 2}, {SKU: "日本", Qty: 1<<62 + 1}},
		IdempotencyKey: "k-é", CreatedAt: created, Payment: inventory.PaymentPaid,
		PayBy: created.Add(time.Minute).UTC(), PaymentRef: "ref-9"}
}

// zeroFields reports the path of every field under v that holds its zero value.
func zeroFields(path string, v reflect.Value) []string {
	if v.IsZero() {
		return []string{path}
	}
	var out []string
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return nil
		}
		for i := range v.NumField() {
			out = append(out, zeroFields(path+"."+v.Type().Field(i).Name, v.Field(i))...)
		}
	case reflect.Slice:
		for i := range v.Len() {
			out = append(out, zeroFields(fmt.Sprintf("%s[%d]", path, i), v.Index(i))...)
		}
	}
	return out
}

// TestEveryOrderFieldRoundTrips: the fixture sets every field of
// inventory.Order (so a field added to Order fails here until the fixture,
// and so the codec, covers it), and it comes back from the ring's encoding
// unchanged.
func TestEveryOrderFieldRoundTrips(t *testing.T) {
	o := fullOrder()
	if zero := zeroFields("Order", reflect.ValueOf(o)); len(zero) > 0 {
		t.Fatalf("the fixture leaves %v at zero: set them, and encode them in appendOrder", zero)
	}
	got, err := decodeOrder(appendOrder(nil, o))
	if err != nil || !reflect.DeepEqual(got, o) {
		t.Fatalf("round trip:\n got %+v, %v\nwant %+v", got, err, o)
	}
}

// sameOrder compares what the hand-over needs: every string and line as it
// was (nil lines told from empty ones), and each time's instant (the
// database keeps timestamptz: a monotonic reading, a zone's name or offset
// do not reach it).
func sameOrder(a, b inventory.Order) string {
	ta, tb := a.CreatedAt, b.CreatedAt
	pa, pb := a.PayBy, b.PayBy
	a.CreatedAt, b.CreatedAt, a.PayBy, b.PayBy = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if (a.Items == nil) != (b.Items == nil) {
		return fmt.Sprintf("lines %#v != %#v", a.Items, b.Items)
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("%+v != %+v", a, b)
	}
	for _, p := range [][2]time.Time{{ta, tb}, {pa, pb}} {
		if !p[0].Equal(p[1]) {
			return fmt.Sprintf("time %v != %v", p[0], p[1])
		}
		if p[0].IsZero() != p[1].IsZero() {
			return fmt.Sprintf("zero time %v != %v", p[0], p[1])
		}
	}
	return ""
}

func FuzzOrderRoundTrip(f *testing.F) {
	f.Add("s1.1", "s1", "u1", "pending", "A", int64(1), uint8(1), "k", "", int64(1_790_000_000), int64(5), 0, "")
	f.Add("", "", "", "", "", int64(0), uint8(0), "", "", int64(0), int64(0), 0, "")
	f.Add("é\x00\xff", "日本", "u", "paid", "", int64(-1<<63), uint8(2), "k", "paid", int64(-62135596800), int64(999_999_999), -60, "r")
	f.Add("x", "y", "z", "cancelled", "B", int64(1<<62), uint8(3), "", "awaiting", int64(1<<40), int64(-1), 5*3600+1800+7, "r")
	f.Fuzz(func(t *testing.T, id, sale, user, status, sku string, qty int64, lines uint8,
		key, payment string, sec, nsec int64, offset int, ref string) {
		o := inventory.Order{ID: id, SaleID: sale, UserID: user, Status: inventory.OrderStatus(status),
			IdempotencyKey: key, Payment: inventory.PaymentStatus(payment), PaymentRef: ref}
		if lines > 0 {
			o.Items = make([]inventory.Line, lines-1)
			for i := range o.Items {
				o.Items[i] = inventory.Line{SKU: sku + strings.Repeat("·", i), Qty: qty - int64(i)}
			}
		}
		o.CreatedAt = time.Unix(sec, nsec).In(time.FixedZone("z", offset))
		if lines%2 == 0 {
			o.PayBy = time.Now().Add(time.Duration(nsec)) // a monotonic reading
		}
		got, err := decodeOrder(appendOrder(nil, o))
		if err != nil {
			t.Fatalf("decode of %+v: %v", o, err)
		}
		if diff := sameOrder(got, o); diff != "" {
			t.Fatalf("round trip: %s", diff)
		}
		// Into a reused slot holding a longer record: the same bytes.
		slot := appendOrder(nil, inventory.Order{ID: strings.Repeat("x", 300)})
		if re := appendOrder(slot[:0], o); !bytes.Equal(re, appendOrder(nil, o)) {
			t.Fatalf("encoding into a reused slot differs")
		}
	})
}

// FuzzDecodeOrder: any bytes decode or are refused, never a panic; what
// decodes encodes back to something that decodes the same.
func FuzzDecodeOrder(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendOrder(nil, inventory.Order{}))
	f.Add(appendOrder(nil, fullOrder()))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeOrder(b)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error %v is not errBadRecord", err)
			}
			return
		}
		again, err := decodeOrder(appendOrder(nil, o))
		if err != nil {
			t.Fatalf("re-encoding of %+v: %v", o, err)
		}
		if diff := sameOrder(again, o); diff != "" {
			t.Fatalf("re-encoding: %s", diff)
		}
	})
}

// TestSnapshotDoesNotAliasTheRing: the orders a snapshot returned (handed
// to the database) do not change when later orders overwrite their slots.
func TestSnapshotDoesNotAliasTheRing(t *testing.T) {
	r := ackRing{size: 2}
	mk := func(c string) inventory.Order {
		s := strings.Repeat(c, 8)
		return inventory.Order{ID: s, SaleID: s, UserID: s, Items: []inventory.Line{{SKU: s, Qty: 1}}}
	}
	r.add(mk("a"))
	r.add(mk("b"))
	r.add(mk("c")) // full: slots now reused
	acked, _, _, err := r.snapshot()
	if err != nil || len(acked) != 2 {
		t.Fatalf("snapshot %+v, %v", acked, err)
	}
	r.add(mk("d"))
	r.add(mk("e"))
	if diff := sameOrder(acked[0], mk("b")); diff != "" {
		t.Errorf("handed-over order changed by a later add: %s", diff)
	}
	if diff := sameOrder(acked[1], mk("c")); diff != "" {
		t.Errorf("handed-over order changed by a later add: %s", diff)
	}
}

// TestRingAddConcurrentWithSnapshot: adds racing snapshots (run with -race)
// leave every snapshot whole: each order decodes, is itself, and is once.
func TestRingAddConcurrentWithSnapshot(t *testing.T) {
	r := ackRing{size: 16}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				id := fmt.Sprintf("w%d.%d", w, i%40)
				r.add(inventory.Order{ID: id, UserID: "u-" + id + strings.Repeat("!", i%7), Items: []inventory.Line{{SKU: id, Qty: int64(i)}}})
			}
		})
	}
	for range 200 {
		acked, _, _, err := r.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, o := range acked {
			if seen[o.ID] || !strings.HasPrefix(o.UserID, "u-"+o.ID) || len(o.Items) != 1 || o.Items[0].SKU != o.ID {
				t.Fatalf("torn or repeated order %+v", o)
			}
			seen[o.ID] = true
		}
	}
	wg.Wait()
}

// adoptStore records the hand-over.
type adoptStore struct {
	fakeStore
	adopted []inventory.Order
	calls   int
}

func (s *adoptStore) AdoptOrders(_ context.Context, o []inventory.Order) error {
	s.calls++
	s.adopted = append(s.adopted, o...)
	return nil
}

func (s *adoptStore) MarkUnsure(context.Context, []inventory.Order) error { return nil }

func (s *adoptStore) AdoptMoves(context.Context, []inventory.MoveHalf, []inventory.MoveHalf) error {
	return nil
}

// TestFlushWithABadRecordDoesNotHandOver: a record that does not decode
// stops this instance's hand-over (its epoch is not marked handed over, so
// the database does not sell without its orders) and is logged as an error.
func TestFlushWithABadRecordDoesNotHandOver(t *testing.T) {
	var logs bytes.Buffer
	db := &adoptStore{}
	f := New(Config{Tick: time.Second, AckRing: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f.Wire(Parts{Engine: &fakeEngine{}, Store: db})
	if _, err := f.Buy(context.Background(), buy("u1")); err != nil {
		t.Fatal(err)
	}
	f.acks.buf[0] = append(f.acks.buf[0], 0x01) // a byte left over
	f.flush(context.Background(), 2, false)
	if db.calls != 0 || f.flushedEpoch() >= 2 {
		t.Fatalf("handed over %d times (%+v), flushed epoch %d, with a bad record", db.calls, db.adopted, f.flushedEpoch())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), errBadRecord.Error()) {
		t.Errorf("the refused hand-over is not logged as an error: %q", logs.String())
	}
	f.acks.buf[0] = f.acks.buf[0][:len(f.acks.buf[0])-1]
	f.flush(context.Background(), 2, false)
	if db.calls != 1 || len(db.adopted) != 1 || db.adopted[0].UserID != "u1" || f.flushedEpoch() != 2 {
		t.Fatalf("after the record is whole: handed over %d times (%+v), flushed epoch %d", db.calls, db.adopted, f.flushedEpoch())
	}
}
