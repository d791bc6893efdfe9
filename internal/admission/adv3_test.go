package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdv3GateBindsTheNonce: the gate (buy.lua, KEYS[9]) must accept the
// user's live admission only, not any admission of the user that happens
// to end at the same until. Admissions granted within admit_ttl of the
// room's end all end at that end (admitted_until is never past ends_at),
// so an admission the room lost (Redis lost the room while the sale
// lives: the service makes it again, empty, and the buyer joins again)
// ends at the very until of the buyer's new one. The old token, never
// spent (so no spent mark comes back from the orders), must not buy: else
// one live admission buys twice (old token, then new), and the room
// counts one unit for two orders.
func TestAdv3GateBindsTheNonce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		cfg := config()
		cfg.EndsAt = t0.Add(5 * time.Second) // within admit_ttl (10 s): every until is the end
		r.create("s", cfg)
		r.clock.Set(t0)
		r.join("s", "u1")
		r.step("s")
		old := r.place("s", "u1")
		if old.Status != Admitted || !old.AdmittedUntil.Equal(cfg.EndsAt) {
			t.Fatalf("u1: %+v", old)
		}
		// The room is lost (its keys only: the sale lives) and made again;
		// u1 joins again and is admitted again.
		if err := r.rooms.Remove(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.create("s", cfg)
		r.clock.Set(t0.Add(time.Second))
		r.join("s", "u1")
		r.step("s")
		cur := r.place("s", "u1")
		if cur.Status != Admitted || cur.Nonce == old.Nonce || !cur.AdmittedUntil.Equal(old.AdmittedUntil) {
			t.Fatalf("u1 again: %+v (old %+v)", cur, old)
		}
		if _, err := r.buyGated("s", "u1", "A", old); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("the lost room's admission bought beside the live one: %v, want ErrTokenSpent", err)
		}
		if _, err := r.buyGated("s", "u1", "A", cur); err != nil {
			t.Errorf("the live admission: %v", err)
		}
		if got := r.remaining("s"); got != 4 {
			t.Errorf("%d remaining, want 4: one live admission bought %d units", got, 5-got)
		}
	})
}
