package inventory_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/inventory"
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
