package admission

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// adv5Counts checks the room's counts: admitted = used + lapsed + live,
// and never more live admissions than units left (one-unit buys).
func (r *rig) adv5Counts(sale, when string) Stats {
	r.t.Helper()
	st := r.stats(sale)
	if st.Admitted != st.Used+st.Lapsed+st.Live {
		r.t.Errorf("%s: admitted %d != used %d + lapsed %d + live %d", when, st.Admitted, st.Used, st.Lapsed, st.Live)
	}
	if left := r.remaining(sale); st.Live > left {
		r.t.Errorf("%s: %d live admissions, %d units left", when, st.Live, left)
	}
	return st
}

// TestAdv5RacingBuysStepsLapsesAndRejoins: rounds of a crowd in a room:
// steps admit, each admitted buyer's buy is sent by three clients at once
// (coalesced: the same admission several times in one call) while other
// steps run, some admissions are left to lapse, lapsed buyers join again
// and are admitted anew. Every admission (nonce) buys at most once, every
// buy is of a live admission, each used place names its order, and the
// counts hold after every round; the units sold are the used admissions.
func TestAdv5RacingBuysStepsLapsesAndRejoins(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 40)
		r.create("s", config())
		r.clock.Set(t0.Add(time.Millisecond))
		us := users("u", 60)
		for _, u := range us {
			r.join("s", u)
		}
		rng := rand.New(rand.NewPCG(5, 5))
		byNonce := map[string][]string{} // nonce -> orders
		var mu sync.Mutex
		for round := range 12 {
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if _, err := r.rooms.Step(r.ctx, "s"); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for _, u := range us {
				p := r.place("s", u)
				switch p.Status {
				case Admitted:
					if rng.IntN(3) == 0 {
						continue // left to lapse
					}
					for range 3 {
						wg.Go(func() {
							o, err := r.buyGated("s", u, "A", p)
							switch {
							case err == nil:
								mu.Lock()
								byNonce[p.Nonce] = append(byNonce[p.Nonce], o.ID)
								mu.Unlock()
							case errors.Is(err, inventory.ErrTokenSpent), errors.Is(err, inventory.ErrSoldOut):
							default:
								t.Error(err)
							}
						})
					}
					wg.Go(func() {
						if _, err := r.rooms.Step(r.ctx, "s"); err != nil {
							t.Error(err)
						}
					})
				case Lapsed:
					r.join("s", u)
				}
			}
			wg.Wait()
			r.adv5Counts("s", fmt.Sprint("round ", round))
			// time passes: sometimes past the admissions' until and grace
			if round%3 == 2 {
				r.clock.Add(config().AdmitTTL + time.Second)
			} else {
				r.clock.Add(300 * time.Millisecond)
			}
		}
		r.clock.Add(config().AdmitTTL + time.Second)
		r.step("s")
		st := r.adv5Counts("s", "the end")
		used := int64(0)
		for nonce, orders := range byNonce {
			if len(orders) != 1 {
				t.Errorf("admission %s bought %d orders: %v", nonce, len(orders), orders)
			}
			used++
		}
		if st.Used != used {
			t.Errorf("used %d, %d admissions bought", st.Used, used)
		}
		if left := r.remaining("s"); left != 40-used {
			t.Errorf("%d units left after %d orders", left, used)
		}
		for _, u := range us {
			if p := r.place("s", u); p.Status == Used {
				o, err := r.eng.Order(r.ctx, p.OrderID)
				if err != nil || o.UserID != u {
					t.Errorf("%s's used place names order %s: %+v %v", u, p.OrderID, o, err)
				}
			}
		}
		t.Logf("admitted %d, used %d, lapsed %d", st.Admitted, st.Used, st.Lapsed)
	})
}

// TestAdv5RoomRemovedAndMadeAgain: a room removed (Redis lost it, an
// operator) while its admissions are out, then made again: the old
// admission never buys (before or after the room is made again), changes
// nothing, and the buyer's new admission buys once; the counts of the
// room made again hold. The clock stepping back after the buy does not
// make the used admission live again.
func TestAdv5RoomRemovedAndMadeAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0.Add(time.Millisecond))
		r.join("s", "u1")
		r.join("s", "u2")
		r.step("s")
		p1, p2 := r.place("s", "u1"), r.place("s", "u2")
		if p1.Status != Admitted || p2.Status != Admitted {
			t.Fatalf("places %+v %+v", p1, p2)
		}
		o1, err := r.buyGated("s", "u1", "A", p1)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.rooms.Remove(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		// no room: neither admission buys
		for _, x := range []struct {
			u string
			p Place
		}{{"u1", p1}, {"u2", p2}} {
			if _, err := r.buyGated("s", x.u, "A", x.p); !errors.Is(err, inventory.ErrTokenSpent) {
				t.Errorf("%s's admission with no room: %v", x.u, err)
			}
		}
		if keys := r.roomKeys("s"); len(keys) != 0 {
			t.Errorf("a refused buy with no room wrote %v", keys)
		}
		r.create("s", config())
		for _, x := range []struct {
			u string
			p Place
		}{{"u1", p1}, {"u2", p2}} {
			if _, err := r.buyGated("s", x.u, "A", x.p); !errors.Is(err, inventory.ErrTokenSpent) {
				t.Errorf("%s's admission of the room before: %v", x.u, err)
			}
		}
		// both join again (u1 bought before: the limit still counts it)
		r.join("s", "u1")
		r.join("s", "u2")
		r.clock.Add(20 * time.Millisecond)
		r.step("s")
		q1, q2 := r.place("s", "u1"), r.place("s", "u2")
		if q1.Status != Admitted || q2.Status != Admitted || q1.Nonce == p1.Nonce || q2.Nonce == p2.Nonce {
			t.Fatalf("new places %+v %+v", q1, q2)
		}
		if _, err := r.buyGated("s", "u2", "A", p2); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("u2's old admission on its new one: %v", err)
		}
		o2, err := r.buyGated("s", "u2", "A", q2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.buyGated("s", "u2", "A", q2); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("u2's new admission twice: %v", err)
		}
		// the clock steps back a minute: the used admission stays used
		r.clock.Add(-time.Minute)
		if _, err := r.buyGated("s", "u2", "A", q2); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("u2's used admission after the clock stepped back: %v", err)
		}
		r.step("s")
		r.clock.Add(time.Minute)
		st := r.adv5Counts("s", "the room made again")
		if st.Admitted != 2 || st.Used != 1 || st.Live != 1 {
			t.Errorf("stats %+v, want admitted 2, used 1, live 1", st)
		}
		if left := r.remaining("s"); left != 3 {
			t.Errorf("%d left after orders %s and %s, want 3", left, o1.ID, o2.ID)
		}
	})
}
