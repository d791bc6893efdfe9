package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestQuietSalesAreSwept: with more quiet sales than a reader reads every
// round, a sale nobody bought from lately is read in a sweep, a few times
// a second, not in every round; an entry appended to it behind the
// consumer's back (no Wake, no Heard) still reaches the database; and
// Active lists the sales that moved, not the quiet ones.
func TestQuietSalesAreSwept(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(40, time.Time{})
		h := &inFlight{}
		c := r.run(r.ownClient(h), pipeline.Options{QuietAfter: 300 * time.Millisecond,
			QuietEvery: 100 * time.Millisecond, QuietReads: 100})
		r.stored(orders, inventory.OrderConfirmed)
		waitfor.Until(t, waitfor.Patience, "every sale quiet", func() error {
			if a := c.Active(); len(a) > 0 {
				return fmt.Errorf("active: %v", a)
			}
			return nil
		})
		// 20 quiet sales a reader, 100 reads a second: each is read every
		// 200 ms; read every round (Block and DiscoverAll 20 ms), it was
		// named 25 to 50 times a second.
		key := r.eng.EventsKey("m007")
		h.watching(key)
		time.Sleep(time.Second)
		if n := h.watching(); n < 1 || n > 12 {
			t.Errorf("a quiet sale's stream named by %d commands in a second, want 1 to 12 (one read every 200 ms)", n)
		}
		// Behind the consumer's back: found by the sweep.
		rc, err := r.eng.Buy(r.ctx, "m011", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		r.stored([]string{rc.Order.ID}, inventory.OrderConfirmed)
		if a := c.Active(); !slices.Contains(a, "m011") || slices.Contains(a, "m012") {
			t.Errorf("Active() = %v, want m011 (read lately) and not m012", a)
		}
		// Announced: active at once.
		rc, err = r.eng.Buy(r.ctx, "m013", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		c.Heard("m013")
		if a := c.Active(); !slices.Contains(a, "m013") {
			t.Errorf("Active() = %v right after Heard(m013), want m013", a)
		}
		r.stored([]string{rc.Order.ID}, inventory.OrderConfirmed)
	})
}

// TestHeardSaleIsReadWithoutASweep: a reader of many sales with no sweep
// due for an hour reads a sale as soon as Heard names it (and each sale
// once when it first sees it): Heard is what brings a buy's order to the
// database, not a sweep.
func TestHeardSaleIsReadWithoutASweep(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		c := r.run(r.rdb, pipeline.Options{QuietEvery: time.Hour, Linger: -1})
		r.stored(orders, inventory.OrderConfirmed)
		for _, sale := range []string{"m003", "m017"} {
			rc, err := r.eng.Buy(r.ctx, sale, "u2", []inventory.Line{{SKU: "A", Qty: 1}}, "")
			if err != nil {
				t.Fatal(err)
			}
			c.Heard(sale)
			r.stored([]string{rc.Order.ID}, inventory.OrderConfirmed)
		}
	})
}
