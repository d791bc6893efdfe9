package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// The adversary's attacks on the room's script (bad luck, at the
// millisecond, on the script's clock).

// TestAdvLateBuyAfterLapse: a buy checks its admission live (Check) a
// millisecond before admitted_until, then reaches buy.lua late — at
// until, within the grace, and past it (500 ms): a GC pause, a slow
// network. Meanwhile a Step lapsed the admission and gave its unit to the
// next buyer. The gate checks until by the script's clock, so the late
// buy is refused as spent every time, spends nothing in the room, and the
// unit stays for the next buyer: never more unused admissions out than
// units left, and the lapse is counted once, never turned into a use.
func TestAdvLateBuyAfterLapse(t *testing.T) {
	r := newRig(t, redistest.Backends()[0], true)
	r.sale("s", 0, "A", 1)
	r.create("s", config())
	r.clock.Set(t0)
	r.join("s", "u1")
	r.join("s", "u2")
	r.step("s")
	p := r.place("s", "u1")
	if p.Status != Admitted {
		t.Fatalf("u1: %+v", p)
	}
	r.clock.Set(p.AdmittedUntil.Add(-time.Millisecond))
	if chk, err := r.rooms.Check(r.ctx, "s", "u1", p.Nonce); err != nil || chk != CheckAdmitted {
		t.Fatalf("the buy's check: %v %v", chk, err)
	}
	// late := the buy landing now, gated as the service buys, and the
	// room's helper doing what an accepted one would: both refused.
	late := func(when string) {
		t.Helper()
		if _, err := r.buyGated("s", "u1", "A", p); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("the late buy %s: %v, want ErrTokenSpent", when, err)
		}
		if err := r.rooms.MarkUsed(r.ctx, "s", "u1", p.Nonce, "late"); !errors.Is(err, errNotLive) {
			t.Errorf("the late spend %s: %v, want errNotLive", when, err)
		}
		if left := r.remaining("s"); left != 1 {
			t.Errorf("the late buy %s: %d units left, want 1", when, left)
		}
		if q := r.place("s", "u1"); q.Status != Lapsed || q.OrderID != "" {
			t.Errorf("u1 after the late buy %s: %+v, want lapsed", when, q)
		}
	}
	r.clock.Set(p.AdmittedUntil)
	late("at until")
	r.clock.Set(p.AdmittedUntil.Add(499 * time.Millisecond))
	late("within the grace")
	if st := r.stats("s"); st.Used != 0 || st.Lapsed != 0 || st.Live != 1 {
		t.Errorf("within the grace: %+v, want u1 still live, none used nor lapsed", st)
	}
	r.clock.Set(p.AdmittedUntil.Add(600 * time.Millisecond))
	if s := r.step("s"); s.Lapsed != 1 || s.Admitted != 1 {
		t.Fatalf("the step past the grace: %+v, want u1 lapsed and u2 admitted", s)
	}
	q := r.place("s", "u2")
	if q.Status != Admitted {
		t.Fatalf("u2 after u1's lapse: %+v", q)
	}
	late("after the lapse")
	if live, left := r.stats("s").Live, r.remaining("s"); live > left {
		t.Errorf("%d unused admissions out, %d units left", live, left)
	}
	// The unit went to the next buyer, and it buys it.
	o, err := r.buyGated("s", "u2", "A", q)
	if err != nil {
		t.Fatalf("u2's buy of the unit u1 left: %v", err)
	}
	if x := r.place("s", "u2"); x.Status != Used || x.OrderID != o.ID {
		t.Errorf("u2 after its buy: %+v", x)
	}
	if st := r.stats("s"); st.Admitted != 2 || st.Used != 1 || st.Lapsed != 1 || st.Live != 0 {
		t.Errorf("stats: %+v, want admitted 2 = used 1 + lapsed 1, none live", st)
	}
	if left := r.remaining("s"); left != 0 {
		t.Errorf("%d units left, want 0", left)
	}
}

// TestAdvJoinAtDrawUntilEdges: a join a millisecond before draw_until is
// in the draw, one at it or after is not, and a join a millisecond before
// opens_at is refused; the draw then admits its entrants before the
// arrival whatever their join times.
func TestAdvJoinAtDrawUntilEdges(t *testing.T) {
	r := newRig(t, redistest.Backends()[0], true)
	r.sale("s", 0, "A", 10)
	cfg := config()
	r.create("s", cfg)
	r.clock.Set(cfg.OpensAt.Add(-time.Millisecond))
	if _, err := r.rooms.Join(r.ctx, "s", "early"); err != ErrNotOpen {
		t.Fatalf("a join before opens_at: %v", err)
	}
	r.clock.Set(cfg.OpensAt)
	if p := r.join("s", "first"); p.Status != Drawing {
		t.Fatalf("a join at opens_at: %+v", p)
	}
	r.clock.Set(t0.Add(-time.Millisecond))
	if p := r.join("s", "last"); p.Status != Drawing || !p.InDraw {
		t.Fatalf("a join 1 ms before draw_until: %+v", p)
	}
	r.clock.Set(t0)
	if p := r.join("s", "arrival"); p.Status != Waiting || p.InDraw || p.Position != 3 {
		t.Fatalf("a join at draw_until: %+v", p)
	}
	users, ok, err := r.rooms.Entrants(r.ctx, "s")
	if err != nil || !ok || len(users) != 2 {
		t.Fatalf("entrants: %v %v %v", users, ok, err)
	}
	// The arrival is not admitted before the draw is written.
	if s := r.step("s"); s.Admitted != 0 || !s.NeedsDraw {
		t.Fatalf("a step before the draw is written: %+v", s)
	}
	if err := r.rooms.WriteDraw(r.ctx, "s", []string{"last", "first"}); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(20 * time.Millisecond) // the next step, a step period on
	r.step("s")
	for _, u := range []string{"last", "first", "arrival"} {
		if p := r.place("s", u); p.Status != Admitted {
			t.Errorf("%s: %+v", u, p)
		}
	}
}

// TestAdvJoinInTheGrace: a place reads lapsed from admitted_until on, and
// the contract says a lapsed buyer who joins again gets a new place at the
// back; in the 500 ms grace after admitted_until a join answers lapsed and
// makes no place (the buyer must join again later).
func TestAdvJoinInTheGrace(t *testing.T) {
	t.Skip("known (minor): in the 500 ms grace after admitted_until, a join of the lapsed buyer answers lapsed " +
		"without a new place (room.lua's join lapses an admission only past until + grace). A buy landing after " +
		"until is refused by the gate on the script's clock (TestAdvLateBuyAfterLapse), so the grace no longer " +
		"guards a buy; whether a join should lapse the admission from until on is room.lua's owner's call")
	r := newRig(t, redistest.Backends()[0], true)
	r.sale("s", 0, "A", 1)
	r.create("s", config())
	r.clock.Set(t0)
	r.join("s", "u1")
	r.step("s")
	p := r.place("s", "u1")
	r.clock.Set(p.AdmittedUntil.Add(100 * time.Millisecond))
	if q := r.place("s", "u1"); q.Status != Lapsed {
		t.Fatalf("u1 past its admission: %+v", q)
	}
	if q := r.join("s", "u1"); q.Status != Waiting {
		t.Errorf("u1 joins again, lapsed: %+v", q)
	}
}

// TestAdvSoldOutWithAnUnlimitedItem: a sale of a limited item and an
// unlimited one. Once the limited item is sold, the room reads sold_out
// ("no unit remains") and admits nobody, though the unlimited item can
// still be bought by anyone admitted.
func TestAdvSoldOutWithAnUnlimitedItem(t *testing.T) {
	t.Skip("known (by the contract's letter): the stock rule sums the limited items only, so a sale that also " +
		"has an unlimited item reads sold_out and admits nobody once its limited items are gone, while the " +
		"unlimited one still sells; whether sold_out should mean that is the contract owner's call")
	r := newRig(t, redistest.Backends()[0], true)
	r.sale("s", 0, "A", 1, "X", -1)
	r.create("s", config())
	r.clock.Set(t0)
	r.join("s", "u1")
	r.join("s", "u2")
	r.step("s")
	if _, err := r.buyGated("s", "u1", "A", r.place("s", "u1")); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(time.Second)
	r.step("s")
	if q := r.place("s", "u2"); q.Status == SoldOut || q.Status == Waiting {
		t.Errorf("u2, with X unlimited still on sale: %+v", q)
	}
}
