package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdv4EdgeBuyThenOwnJoinLapses: an admission bought 1 ms before its
// until (no step since), then its buyer's join just past the grace (the
// join lapses an admission of its user past the grace first): the
// admission is used, never lapsed, and buys nothing more: its place reads
// used with the order, a second buy (a token at until - 1 ms, at until,
// at until + 1 ms) is refused, the join makes no new place, and the room
// counts one used and u1 not live after the join (u2's admission, not
// bought, live until a step), then one used, one lapsed (u2), none live
// after the next step. On every backend.
func TestAdv4EdgeBuyThenOwnJoinLapses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5, "B", 5)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u1")
		r.join("s", "u2")
		r.step("s")
		p := r.place("s", "u1")
		p2 := r.place("s", "u2")
		if p.Status != Admitted || p2.Status != Admitted {
			t.Fatalf("u1: %+v, u2: %+v", p, p2)
		}
		// u2 at until exactly: refused.
		r.clock.Set(p2.AdmittedUntil)
		if _, err := r.buyGated("s", "u2", "A", p2); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("a buy at until: %v, want ErrTokenSpent", err)
		}
		r.clock.Set(p.AdmittedUntil.Add(-time.Millisecond))
		o, err := r.buyGated("s", "u1", "A", p)
		if err != nil {
			t.Fatalf("a buy 1 ms before until: %v", err)
		}
		if st := r.stats("s"); st.Used != 1 || st.Lapsed != 0 || st.Live != 1 {
			t.Errorf("right after u1's buy: %+v, want 1 used, none lapsed, 1 live (u2)", st)
		}
		r.clock.Set(p.AdmittedUntil.Add(500 * time.Millisecond))
		j := r.join("s", "u1")
		if j.Status != Used || j.OrderID != o.ID {
			t.Errorf("u1's join past the grace after buying: %+v, want used with order %s", j, o.ID)
		}
		if st := r.stats("s"); st.Used != 1 || st.Lapsed != 0 || st.Live != 1 || st.Waiting != 0 {
			t.Errorf("after u1's join: %+v, want 1 used, none lapsed, 1 live (u2), none waiting", st)
		}
		for _, at := range []time.Duration{-time.Millisecond, 0, time.Millisecond} {
			r.clock.Set(p.AdmittedUntil.Add(at))
			if _, err := r.buyGated("s", "u1", "B", p); !errors.Is(err, inventory.ErrTokenSpent) {
				t.Errorf("the used admission again at until%+v: %v, want ErrTokenSpent", at, err)
			}
		}
		r.clock.Set(p.AdmittedUntil.Add(600 * time.Millisecond))
		check := func(when string) {
			t.Helper()
			if q := r.place("s", "u1"); q.Status != Used || q.OrderID != o.ID {
				t.Errorf("%s: u1 reads %+v, want used with order %s", when, q, o.ID)
			}
			st := r.stats("s")
			if st.Used != 1 || st.Lapsed != 1 || st.Live != 0 || st.Admitted != 2 {
				t.Errorf("%s: %+v, want admitted 2, used 1, lapsed 1 (u2), live 0", when, st)
			}
		}
		r.step("s") // lapses u2
		check("after the step")
		if got := r.remaining("s"); got != 9 {
			t.Errorf("%d remaining, want 9", got)
		}
	})
}
