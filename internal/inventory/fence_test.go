package inventory_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestFence: a fenced sale refuses every buy with ErrFenced and changes
// nothing; lifting the fence lets it sell again. A sale missing from Redis
// is not fenced (nor created).
func TestFence(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newRig(t, b, inventory.Options{})
		f.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		if _, err := f.eng.Buy(f.ctx, "s1", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
		if ok, err := f.eng.Fence(f.ctx, "s1", 7); err != nil || !ok {
			t.Fatalf("fence: %v, %v", ok, err)
		}
		before := f.events("s1")
		for _, key := range []string{"", "k1"} {
			if _, err := f.eng.Buy(f.ctx, "s1", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, key); !errors.Is(err, inventory.ErrFenced) || errors.Is(err, inventory.ErrSaleNotActive) {
				t.Fatalf("buy of a fenced sale (key %q): %v", key, err)
			}
		}
		if st := f.remaining("s1"); st["A"] != 9 || len(f.events("s1")) != len(before) {
			t.Fatalf("a refused buy changed the sale: %v, %d events (was %d)", st, len(f.events("s1")), len(before))
		}
		// A lift of an earlier period (a recovery's lift resent after a lost
		// reply, arriving after the sale was fenced again) leaves the fence.
		if err := f.eng.Unfence(f.ctx, "s1", 6); !errors.Is(err, inventory.ErrFenced) {
			t.Fatalf("unfence of period 6 over a fence of period 7: %v, want ErrFenced", err)
		}
		if _, err := f.eng.Buy(f.ctx, "s1", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, ""); !errors.Is(err, inventory.ErrFenced) {
			t.Fatalf("buy after an earlier period's unfence: %v, want ErrFenced", err)
		}
		if err := f.eng.Unfence(f.ctx, "s1", 7); err != nil {
			t.Fatal(err)
		}
		if err := f.eng.Unfence(f.ctx, "nope", 7); err != nil {
			t.Fatalf("unfence of a sale Redis does not hold: %v", err)
		}
		if r, err := f.eng.Buy(f.ctx, "s1", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil || r.Remaining[0] != 8 {
			t.Fatalf("buy after the fence was lifted: %+v, %v", r, err)
		}
		// A stale fence (of an epoch before the given one) is lifted; a
		// newer or equal one stays.
		if _, err := f.eng.Fence(f.ctx, "s1", 7); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			epoch  int64
			lifted bool
		}{{7, false}, {3, false}, {8, true}, {9, true}} {
			if ok, err := f.eng.LiftStaleFence(f.ctx, "s1", c.epoch); err != nil || ok != c.lifted {
				t.Fatalf("lift a fence of epoch 7 as stale before %d: %v, %v", c.epoch, ok, err)
			}
		}
		if _, err := f.eng.Buy(f.ctx, "s1", "u3", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatalf("buy after a stale fence was lifted: %v", err)
		}
		if ok, err := f.eng.Fence(f.ctx, "nope", 7); err != nil || ok {
			t.Fatalf("fencing a sale Redis does not hold: %v, %v", ok, err)
		}
		if _, err := f.eng.Stock(f.ctx, "nope"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("fencing created the missing sale: %v", err)
		}
	})
}

// TestFencedSaleIsNeitherClosedNorExpired: while the database sells a sale
// (fenced in Redis), a close is refused with ErrFenced and changes
// nothing, and a reservation past its pay_by waits (the recovery brings
// Redis back to the database first); once the fence is lifted both go
// ahead.
func TestFencedSaleIsNeitherClosedNorExpired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s", PerUserLimit: 2, PaymentTimeout: 10 * time.Second,
			EndsAt: r.clock.Now().Add(time.Hour), Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		ids := r.buyEach("s", "u1")
		payBy := r.payment(ids[0]).PayBy
		if ok, err := r.eng.Fence(r.ctx, "s", 1); err != nil || !ok {
			t.Fatalf("fence: %v, %v", ok, err)
		}
		before := len(r.events("s"))
		r.clock.Set(payBy)
		if _, _, err := r.eng.Close(r.ctx, "s"); !errors.Is(err, inventory.ErrFenced) {
			t.Fatalf("close of a fenced sale: %v, want ErrFenced", err)
		}
		if got, more, err := r.eng.ExpireDue(r.ctx, "s", 10); err != nil || more || len(got) != 0 {
			t.Fatalf("expiry of a fenced sale: %v, %v, %v; want nothing expired", got, more, err)
		}
		if o := r.payment(ids[0]); o.Payment != inventory.PaymentAwaiting {
			t.Fatalf("the fenced sale's reservation: %+v, want awaiting", o)
		}
		if n := len(r.events("s")); n != before {
			t.Fatalf("the fenced sale's stream grew from %d to %d events", before, n)
		}
		if err := r.eng.Unfence(r.ctx, "s", 1); err != nil {
			t.Fatal(err)
		}
		if got, _, err := r.eng.ExpireDue(r.ctx, "s", 10); err != nil || fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("expiry once unfenced: %v, %v; want %v", got, err, ids)
		}
		if _, end, err := r.eng.Close(r.ctx, "s"); err != nil || !end.Equal(payBy) {
			t.Fatalf("close once unfenced: end %v, %v; want %v", end, err, payBy)
		}
	})
}
