package inventory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// Adversarial tests of keeping an idle coalescer whose callers looked like
// a closed loop (5dd8069): what it must remember, and that it is still
// forgotten in the end, whatever its timer went through.

// TestAdvKeepBackoffIsKept: a closed loop's skip ran out on a call of one
// buy (skip 0, lastBatch 1) that left the sale idle. Its backoff is still
// due to double at the next linger that hears no buy in its second half
// ("doubling up to 1024 while they stay so"); a new coalescer would start
// it again at 16, and the loop would linger every 17 calls. So it is kept
// (then forgotten by its keep timer); one with nothing to remember is
// forgotten at once.
func TestAdvKeepBackoffIsKept(t *testing.T) {
	e := advLingerEngine(t, Coalesce{Linger: 20 * time.Millisecond}, 0)
	for _, tc := range []struct {
		skip, backoff, lastBatch int
		kept                     bool
	}{
		{skip: 0, backoff: 32, lastBatch: 1, kept: true},
		{skip: 0, backoff: 1024, lastBatch: 1, kept: true},
		{skip: 3, backoff: 16, lastBatch: 1, kept: true},
		{skip: 0, backoff: 0, lastBatch: 1, kept: false},
	} {
		sale := fmt.Sprint("k", tc.skip, "-", tc.backoff)
		c := e.coalescerOf(sale)
		c.mu.Lock()
		c.inFlight, c.lastBatch, c.skip, c.backoff = 1, tc.lastBatch, tc.skip, tc.backoff
		c.mu.Unlock()
		if next := c.next(); next != nil {
			t.Fatalf("%+v: next sent %d buys, none were queued", tc, len(next))
		}
		got, ok := e.coalescers.Load(sale)
		if kept := ok && got == c; kept != tc.kept {
			t.Errorf("%+v: coalescer kept = %v, want %v", tc, kept, tc.kept)
		}
	}
	waitfor.Until(t, waitfor.Patience, "the kept coalescers forgotten after their keep", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
}

// TestAdvKeepStaleTickThenForgotten: a kept closed loop's keep timer
// fires while a call of its sale is in flight (a buy came just before):
// that tick finds it busy and leaves it; the call completing arms the
// keep again, and that one forgets it. A coalescer kept for its skip is
// never left in the engine without a timer to forget it.
func TestAdvKeepStaleTickThenForgotten(t *testing.T) {
	const linger = 5 * time.Millisecond
	e := advLingerEngine(t, Coalesce{Linger: linger}, 1)
	c := e.coalescerOf("s0")
	c.mu.Lock()
	c.lastBatch, c.skip, c.backoff = 1, 20, 16
	c.inFlight = 1
	c.mu.Unlock()
	c.next() // idle: kept, keep timer armed (4 lingers)
	if v, ok := e.coalescers.Load("s0"); !ok || v != c {
		t.Fatal("the closed loop's coalescer was not kept")
	}
	// A call in flight when the keep ends: the tick must leave c.
	c.mu.Lock()
	c.inFlight = 1
	c.mu.Unlock()
	time.Sleep(8 * 4 * linger) // well past the keep
	if v, ok := e.coalescers.Load("s0"); !ok || v != c {
		t.Fatal("a tick forgot a coalescer with a call in flight")
	}
	c.next() // the call completes: idle again, kept, armed again
	waitfor.Until(t, waitfor.Patience, "the idle coalescer forgotten", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
	// Its skip was not spent: a buy now makes a new coalescer, which does
	// not know it; a buy through the forgotten one works alone.
	if nc := e.coalescerOf("s0"); nc == c {
		t.Fatal("the forgotten coalescer came back")
	}
}

// TestAdvKeepClosedLoopsThroughForgets: closed loops on a few sales with a
// tiny Linger (a keep of 4 lingers, 200µs), so that their coalescers are
// kept and forgotten all the time while buys come: some buys find a
// coalescer just as its timer forgets it, some callers give up while
// queued. Every buy returns; each accepted buy is held, no other; every
// coalescer is forgotten at the end and no goroutine is left behind.
func TestAdvKeepClosedLoopsThroughForgets(t *testing.T) {
	const sales, callers, each = 3, 3, 80
	rdb := redistest.Standalone(t)
	rdb.AddHook(Jitter{Max: 300 * time.Microsecond})
	e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb), Coalesce: Coalesce{Linger: 50 * time.Microsecond},
		SoldOut: SoldOut{Off: true}})
	for s := range sales {
		if err := e.CreateSale(context.Background(), Sale{ID: fmt.Sprint("s", s), PerUserLimit: 1000,
			Items: []Item{{SKU: "A", Stock: 100000}}}); err != nil {
			t.Fatal(err)
		}
	}
	base := runtime.NumGoroutine()
	var accepted [sales]atomic.Int64
	var wg sync.WaitGroup
	for s := range sales {
		sale := fmt.Sprint("s", s)
		crowded(e, sale, 2)
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(s), uint64(g)))
				for i := range each {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if rng.IntN(5) == 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(400*time.Microsecond))))
					}
					_, err := e.Buy(ctx, sale, fmt.Sprint("u", g), []Line{{SKU: "A", Qty: 1}}, fmt.Sprint(i))
					cancel()
					switch {
					case err == nil:
						accepted[s].Add(1)
					case ctx.Err() != nil && errors.Is(err, ctx.Err()):
						// gave up: sent or not (unsure), counted below
					default:
						t.Errorf("%s u%d buy %d: %v", sale, g, i, err)
					}
					time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Microsecond))))
				}
			}()
		}
	}
	wg.Wait()
	for s := range sales {
		st, err := e.Stock(context.Background(), fmt.Sprint("s", s))
		if err != nil {
			t.Fatal(err)
		}
		// A buy whose caller gave up after it was sent may have been sold.
		if sold, acc := st.Items[0].Sold, accepted[s].Load(); sold < acc || sold > callers*each {
			t.Errorf("s%d: sold %d, %d buys accepted", s, sold, acc)
		}
	}
	advAllForgotten(t, e, base)
}

// TestAdvKeepACrowdLingersAgain: a sale kept idle for its closed loop's
// backoff (its skip run out) whose crowd comes back lingers as any crowd:
// the backoff only doubles the next skip, it stops no linger itself. Its
// first buy lingers (an hour), the crowd joins, the linger ends at Overlap
// as one call.
func TestAdvKeepACrowdLingersAgain(t *testing.T) {
	e := advLingerEngine(t, Coalesce{Linger: time.Hour, Overlap: 3}, 1)
	c := e.coalescerOf("s0")
	c.mu.Lock()
	c.inFlight, c.lastBatch, c.skip, c.backoff = 1, 2, 0, 1024
	c.mu.Unlock()
	c.next()
	if v, ok := e.coalescers.Load("s0"); !ok || v != c {
		t.Fatal("the idle coalescer was not kept")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Patience)
	defer cancel()
	done := make(chan error, 3)
	for u := range 3 {
		go func() {
			_, err := e.Buy(ctx, "s0", fmt.Sprint("u", u), []Line{{SKU: "A", Qty: 1}}, "")
			done <- err
		}()
		if u == 0 {
			waitfor.Until(t, waitfor.Patience, "the first buy lingers", func() error {
				c.mu.Lock()
				defer c.mu.Unlock()
				if !c.lingering || len(c.queue) != 1 {
					return fmt.Errorf("lingering %v, %d queued", c.lingering, len(c.queue))
				}
				return nil
			})
		}
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	last := c.lastBatch
	c.mu.Unlock()
	if last != 3 {
		t.Errorf("the crowd's call carried %d buys, want 3", last)
	}
}
