package inventory_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial tests of the closed-loop rule across idle gaps
// (Coalesce.Linger): a sale whose callers looked like a closed loop stops
// lingering for the next 16 calls, doubling up to 1024 while they stay so,
// even when its coalescer goes idle between two calls (every caller between
// two buys at once).

// TestAdvKeepClosedLoopLingersRarely: 1, 2 or 3 callers, each doing many
// buys one after the other with a short pause (so that the sale often goes
// idle: nothing queued, nothing in flight), after a crowd (the first wave
// lingers). With the skip and its doubling kept, lingers come at about the
// calls 1, 18, 51, 116, 245, 502, ...: a handful in the few hundred calls
// here, each holding at most one wave (3 buys). A coalescer forgotten
// while idle forgot the skip (before 5dd8069) or its doubling (a skip run
// out on a call of one buy), and lingered every 17 calls or so, or more.
// Counted, not timed: buys slower than 0.9 Linger.
func TestAdvKeepClosedLoopLingersRarely(t *testing.T) {
	const (
		linger = 200 * time.Millisecond
		buys   = 360 // over all callers
	)
	for _, callers := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(callers, "callers"), func(t *testing.T) {
			r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: linger}})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 100000, Items: []inventory.Item{{SKU: "A", Stock: 100000}}})
			calls := countScripts(r.rdb, r.key("s1", "sale"))
			warmCrowd(t, r, calls) // its last call carried 2: the next buy lingers
			calls.n.Store(0)
			var slow atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range buys / callers {
						t0 := time.Now()
						if _, err := r.eng.Buy(r.ctx, "s1", fmt.Sprint("c", g), lines("A", 1), fmt.Sprint(g, "-", i)); err != nil {
							t.Error(err)
							return
						}
						if time.Since(t0) > linger*9/10 {
							slow.Add(1)
						}
						time.Sleep(rand.N(2 * time.Millisecond))
					}
				}()
			}
			wg.Wait()
			n, c := slow.Load(), calls.n.Load()
			t.Logf("%d callers: %d of %d buys waited out a linger, %d calls, %s", callers, n, buys, c, time.Since(start))
			// The lingers due in c calls with the doubling, and two more
			// for good measure (a stall of the machine, a linger that
			// caught the loop's callers in two waves); each holds at most
			// a wave of the callers' buys.
			lingers, next, backoff := 0, int64(1), int64(16)
			for next <= c {
				lingers++
				next += backoff + 1
				backoff = min(2*backoff, 1024)
			}
			if want := int64(callers * (lingers + 2)); n > want {
				t.Errorf("%d callers: %d buys waited out a linger in %d calls, want at most %d (%d lingers due)", callers, n, c, want, lingers)
			}
			if held := r.held("s1"); len(held) < callers {
				t.Errorf("held %v", held)
			}
		})
	}
}
