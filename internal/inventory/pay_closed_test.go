package inventory_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestPayOfClosedOrderSaysWhy: the pay of a reservation that can no longer
// be paid is ErrOrderClosed, and its message says why: "cancelled" for an
// order cancelled before its deadline, "expired" for one whose deadline
// has passed, taken by the expiry or not yet.
func TestPayOfClosedOrderSaysWhy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, 10*time.Second)
		closed := func(id, user, want, not string) {
			t.Helper()
			_, _, err := r.eng.Pay(r.ctx, id, user, "ref")
			if !errors.Is(err, inventory.ErrOrderClosed) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), not) {
				t.Errorf("pay of order %s: %v, want ErrOrderClosed saying %q", id, err, want)
			}
		}

		cancelled := r.buyEach("s", "u1")[0]
		if _, err := r.eng.Cancel(r.ctx, cancelled, "u1"); err != nil {
			t.Fatal(err)
		}
		closed(cancelled, "u1", "(cancelled)", "expired")

		expired := r.buyEach("s", "u2")[0]
		r.clock.Set(r.payment(expired).PayBy)
		if ids, _, err := r.eng.ExpireDue(r.ctx, "s", 10); err != nil || len(ids) != 1 || ids[0] != expired {
			t.Fatalf("ExpireDue = %v, %v; want [%s]", ids, err, expired)
		}
		closed(expired, "u2", "(expired", "cancelled")

		due := r.buyEach("s", "u3")[0]
		r.clock.Set(r.payment(due).PayBy)
		closed(due, "u3", "(expired", "cancelled") // the expiry has not run yet
	})
}
