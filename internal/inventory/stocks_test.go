package inventory_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestOrderCounts: one pipelined read gives every sale its own count of the
// orders Redis holds (a cancelled order still counted), a sale never made
// reads 0, and a bad id is that sale's error alone.
func TestOrderCounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		line := []inventory.Line{{SKU: "A", Qty: 1}}
		for _, s := range []string{"s1", "s2"} {
			r.create(inventory.Sale{ID: s, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		}
		var first inventory.Receipt
		for i, u := range []string{"u1", "u2", "u3"} {
			rc, err := r.eng.Buy(r.ctx, "s1", u, line, "")
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = rc
			}
		}
		if _, err := r.eng.Buy(r.ctx, "s2", "u1", line, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, first.Order.ID, "u1"); err != nil {
			t.Fatal(err)
		}
		counts, errs := r.eng.OrderCounts(r.ctx, []string{"s2", "bad id!", "s1", "never"})
		want := []int64{1, 0, 3, 0}
		for i := range want {
			if i == 1 {
				if !errors.Is(errs[i], inventory.ErrInvalid) {
					t.Errorf("bad id: error %v, want ErrInvalid", errs[i])
				}
				continue
			}
			if errs[i] != nil || counts[i] != want[i] {
				t.Errorf("sale %d: %d, %v; want %d", i, counts[i], errs[i], want[i])
			}
		}
	})
}
