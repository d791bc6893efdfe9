package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdv2JoinThenReadOnAnotherInstance: a place read is never older than
// the caller's own last join, whatever instance serves the read. Instance
// B keeps the room's facts from a read made before the room sold out (and
// then before units came back); a join on instance A answers from fresh
// facts; the same user's read on B right after must not go back to B's
// older facts. (B keeps its facts for an hour here so the window is not a
// matter of timing; the service keeps them 500 ms, the same window.)
func TestAdv2JoinThenReadOnAnotherInstance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u1")
		r.step("s")
		p := r.place("s", "u1")
		if p.Status != Admitted {
			t.Fatalf("u1: %+v", p)
		}
		other := r.newRooms(r.rdb)
		other.SetFactsMaxAge(time.Hour)
		if q, err := other.Place(r.ctx, "s", "u1"); err != nil || q.Status != Admitted {
			t.Fatalf("u1 on B: %+v %v", q, err)
		}
		// The last unit is bought: the buy spends the admission in the
		// room itself, so the room is sold out at once, before any step.
		if _, err := r.buyGated("s", "u1", "A", p); err != nil {
			t.Fatal(err)
		}
		j := r.join("s", "u9")
		if j.Status != SoldOut {
			t.Fatalf("u9's join once sold out: %+v", j)
		}
		q, err := other.Place(r.ctx, "s", "u9")
		if err != nil {
			t.Fatal(err)
		}
		if q.Status != SoldOut {
			t.Fatalf("u9's join answered sold_out, its read on another instance right after: %+v (older than the join)", q)
		}
		// Units come back: a join answers waiting, and so must a read after it.
		if _, err := r.eng.Restock(r.ctx, "s", "A", 1); err != nil {
			t.Fatal(err)
		}
		j = r.join("s", "u9")
		if j.Status != Waiting {
			t.Fatalf("u9's join after a restock: %+v", j)
		}
		if q, err = other.Place(r.ctx, "s", "u9"); err != nil {
			t.Fatal(err)
		}
		if q.Status != Waiting {
			t.Fatalf("u9's join answered waiting, its read on another instance right after: %+v (older than the join)", q)
		}
	})
}

// TestAdv2BatchFullAndTwice: a crowd's joins, coalesced into batches with
// the same users more than once, never exceed max_waiting, give each user
// one place, and refuse only with ErrRoomFull.
func TestAdv2BatchFullAndTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 100)
		cfg := config()
		cfg.MaxWaiting = 7
		r.create("s", cfg)
		r.clock.Set(t0) // sealed: arrivals, ranked
		us := users("u", 40)
		type res struct {
			u   string
			p   Place
			err error
		}
		out := make(chan res, 3*len(us))
		for range 3 {
			for _, u := range us {
				go func() {
					p, err := r.rooms.Join(r.ctx, "s", u)
					out <- res{u, p, err}
				}()
			}
		}
		ranks := map[string]int64{}
		for range 3 * len(us) {
			x := <-out
			if x.err != nil {
				if x.err != ErrRoomFull {
					t.Fatalf("join of %s: %v", x.u, x.err)
				}
				continue
			}
			if x.p.Status != Waiting {
				t.Fatalf("%s: %+v", x.u, x.p)
			}
			if had, ok := ranks[x.u]; ok && had != x.p.Position {
				t.Fatalf("%s has two places: %d and %d", x.u, had, x.p.Position)
			}
			ranks[x.u] = x.p.Position
		}
		seen := map[int64]string{}
		for u, p := range ranks {
			if o, ok := seen[p]; ok {
				t.Fatalf("%s and %s share position %d", u, o, p)
			}
			seen[p] = u
		}
		if st := r.stats("s"); st.Waiting > 7 || len(ranks) > 7 {
			t.Fatalf("max_waiting 7 exceeded: %+v, %d placed", st, len(ranks))
		}
	})
}

// TestAdv2BuyThenReadShowsUsed: a buy then a read shows used at once,
// and the room counts it at once (used, no longer live), before any step:
// the gated buy spends the admission in the room in its own script. A
// buy with another until, or at the admission's until, is refused and
// spends nothing; a step after the buy changes none of it.
func TestAdv2BuyThenReadShowsUsed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 2)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u1")
		r.join("s", "u2")
		r.step("s")
		p := r.place("s", "u1")
		forged := p
		forged.AdmittedUntil = p.AdmittedUntil.Add(time.Millisecond)
		if _, err := r.buyGated("s", "u1", "A", forged); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy with another until: %v", err)
		}
		if q := r.place("s", "u1"); q != p {
			t.Fatalf("u1 after a refused buy: %+v, want %+v", q, p)
		}
		o, err := r.buyGated("s", "u1", "A", p)
		if err != nil {
			t.Fatal(err)
		}
		if q := r.place("s", "u1"); q.Status != Used || q.OrderID != o.ID {
			t.Fatalf("after its buy: %+v", q)
		}
		if st := r.stats("s"); st.Used != 1 || st.Live != 1 || st.Lapsed != 0 {
			t.Fatalf("stats right after the buy: %+v, want 1 used, 1 live (u2)", st)
		}
		r.step("s")
		if st := r.stats("s"); st.Used != 1 || st.Live != 1 || st.Lapsed != 0 {
			t.Fatalf("stats after the buy's step: %+v", st)
		}
		q := r.place("s", "u2")
		r.clock.Set(q.AdmittedUntil)
		if _, err := r.buyGated("s", "u2", "A", q); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy at its until: %v", err)
		}
		if st := r.stats("s"); st.Used != 1 || st.Live != 1 {
			t.Fatalf("stats after a buy at until: %+v, want u2 still live, not used", st)
		}
		if left := r.remaining("s"); left != 1 {
			t.Fatalf("%d units left, want 1", left)
		}
	})
}

// TestAdv2SpendAfterLapse: once a step lapsed an admission, no spend of
// it lands any more, however often it is tried (a buy retried late, the
// helper's spend): each is refused, and the counts stay one use (the
// admission bought in time) and one lapse, none live; an admission bought
// in time stays used with its order through the steps past its until,
// and is not spent again either.
func TestAdv2SpendAfterLapse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u1")
		r.join("s", "u2")
		r.step("s")
		p, p2 := r.place("s", "u1"), r.place("s", "u2")
		o, err := r.buyGated("s", "u1", "A", p)
		if err != nil {
			t.Fatal(err)
		}
		r.clock.Add(config().AdmitTTL + time.Second)
		if s := r.step("s"); s.Lapsed != 1 {
			t.Fatalf("the step past u2's until: %+v, want u2 lapsed (only)", s)
		}
		for i := range 2 { // tried twice, each followed by a step
			if _, err := r.buyGated("s", "u2", "A", p2); !errors.Is(err, inventory.ErrTokenSpent) {
				t.Errorf("try %d: u2's buy after its lapse: %v, want ErrTokenSpent", i, err)
			}
			if err := r.rooms.MarkUsed(r.ctx, "s", "u2", p2.Nonce, "late"); !errors.Is(err, errNotLive) {
				t.Errorf("try %d: u2's spend after its lapse: %v, want errNotLive", i, err)
			}
			if err := r.rooms.MarkUsed(r.ctx, "s", "u1", p.Nonce, "again"); !errors.Is(err, errNotLive) {
				t.Errorf("try %d: u1's used admission spent again: %v, want errNotLive", i, err)
			}
			r.step("s")
		}
		if st := r.stats("s"); st.Admitted != 2 || st.Used != 1 || st.Lapsed != 1 || st.Live != 0 {
			t.Fatalf("stats: %+v, want admitted 2 = used 1 + lapsed 1, none live", st)
		}
		if x := r.place("s", "u1"); x.Status != Used || x.OrderID != o.ID {
			t.Fatalf("u1: %+v", x)
		}
		if x := r.place("s", "u2"); x.Status != Lapsed || x.OrderID != "" {
			t.Fatalf("u2: %+v", x)
		}
		if left := r.remaining("s"); left != 4 {
			t.Fatalf("%d units left, want 4", left)
		}
	})
}
