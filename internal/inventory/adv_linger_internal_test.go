package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// Adversarial tests of the linger (Coalesce.Linger) that need the
// coalescer's insides: its timer, its engine's map of coalescers.

// advLingerEngine is an engine on the shared Redis with sales s0..s<n-1>,
// one item A each, and plenty of stock.
func advLingerEngine(t *testing.T, co Coalesce, n int) *Engine {
	t.Helper()
	rdb := redistest.Standalone(t)
	e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb), Coalesce: co, SoldOut: SoldOut{Off: true}})
	for i := range n {
		if err := e.CreateSale(context.Background(), Sale{ID: fmt.Sprint("s", i), PerUserLimit: 1000,
			Items: []Item{{SKU: "A", Stock: 100000}}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// crowded makes sale's coalescer (a new one if it has none) look as if
// its last call carried n buys: its next buy that finds nothing in flight
// lingers.
func crowded(e *Engine, sale string, n int) *coalescer {
	c := e.coalescerOf(sale)
	c.mu.Lock()
	c.lastBatch = n
	c.mu.Unlock()
	return c
}

func coalescerCount(e *Engine) int {
	n := 0
	e.coalescers.Range(func(any, any) bool { n++; return true })
	return n
}

// TestAdvLingerIdleCrowdsAreForgotten: many sales, each with a crowd whose
// buys linger and share a call, then nothing: each coalescer is kept a
// while for its crowd's next buy, then forgotten; no coalescer, timer
// goroutine or sender is left behind once they all went idle.
func TestAdvLingerIdleCrowdsAreForgotten(t *testing.T) {
	const sales, each = 40, 4
	e := advLingerEngine(t, Coalesce{Linger: 20 * time.Millisecond}, sales)
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for s := range sales {
		sale := fmt.Sprint("s", s)
		crowded(e, sale, 2)
		for u := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.Buy(context.Background(), sale, fmt.Sprint("u", u), []Line{{SKU: "A", Qty: 1}}, ""); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	advAllForgotten(t, e, base)
}

// TestAdvLingerNegativeIsTheOldRule: a negative Linger sends each call as
// soon as it may, as before lingers: a sale whose last call carried many
// buys arms no timer, neither for a linger nor to keep its idle
// coalescer, which is forgotten once idle.
func TestAdvLingerNegativeIsTheOldRule(t *testing.T) {
	e := advLingerEngine(t, Coalesce{Linger: -1, Overlap: 4}, 1)
	if l := e.coalesce.Linger; l >= 0 {
		t.Fatalf("Linger -1 became %v", l)
	}
	c := crowded(e, "s0", 50)
	for wave := range 3 {
		var wg sync.WaitGroup
		for u := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.Buy(context.Background(), "s0", fmt.Sprint("u", u), []Line{{SKU: "A", Qty: 1}}, fmt.Sprint(wave)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	c.mu.Lock()
	armed, lingering := c.timer != nil, c.lingering
	c.mu.Unlock()
	if armed || lingering {
		t.Errorf("Linger -1: timer armed %v, lingering %v; want neither", armed, lingering)
	}
	waitfor.Until(t, waitfor.Patience, "the idle coalescer forgotten", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
}

// TestAdvLingerInAForgottenCoalescer: buys that found their sale's
// coalescer just before it was forgotten (kept idle 4 lingers, then
// dropped by its timer) work through it while the sale's next buys make
// and use a new one, both at once: every buy returns, each sold once, and
// the forgotten one never comes back.
func TestAdvLingerInAForgottenCoalescer(t *testing.T) {
	e := advLingerEngine(t, Coalesce{Linger: 30 * time.Millisecond}, 1)
	old := crowded(e, "s0", 3)
	old.mu.Lock()
	old.arm(4 * e.coalesce.Linger) // as next leaves an idle crowd's coalescer
	old.mu.Unlock()
	waitfor.Until(t, waitfor.Patience, "the idle coalescer forgotten", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	late := func(user string) (Receipt, error) {
		c, err := checkBuy(BuyRequest{SaleID: "s0", UserID: user, Lines: []Line{{SKU: "A", Qty: 1}}})
		if err != nil {
			return Receipt{}, err
		}
		bc, err := e.newBuyCall(c)
		if err != nil {
			return Receipt{}, err
		}
		return old.buy(ctx, bc)
	}
	var wg sync.WaitGroup
	ids := make(chan string, 16)
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rc, err := late(fmt.Sprint("late", i))
			if err != nil {
				t.Errorf("late%d through the forgotten coalescer: %v", i, err)
				return
			}
			ids <- rc.Order.ID
		}()
		go func() {
			defer wg.Done()
			rc, err := e.Buy(ctx, "s0", fmt.Sprint("new", i), []Line{{SKU: "A", Qty: 1}}, "")
			if err != nil {
				t.Errorf("new%d: %v", i, err)
				return
			}
			ids <- rc.Order.ID
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("order %s given to two buys", id)
		}
		seen[id] = true
	}
	st, err := e.Stock(context.Background(), "s0")
	if err != nil {
		t.Fatal(err)
	}
	if sold := st.Items[0].Sold; sold != int64(len(seen)) {
		t.Errorf("sold %d, %d buys accepted", sold, len(seen))
	}
	if v, ok := e.coalescers.Load("s0"); ok && v.(*coalescer) == old {
		t.Errorf("the forgotten coalescer came back")
	}
}

// Jitter, a go-redis hook, delays every command (single or pipelined) by
// up to Max: Redis answering slowly and unevenly, so that calls complete at
// every point of a linger. (Exported for the package's external tests.)
type Jitter struct{ Max time.Duration }

func (j Jitter) sleep() { time.Sleep(time.Duration(rand.Int64N(int64(j.Max) + 1))) }

func (j Jitter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (j Jitter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		j.sleep()
		return next(ctx, cmd)
	}
}

func (j Jitter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		j.sleep()
		return next(ctx, cmds)
	}
}

// TestAdvLingerInvariantsAtEveryUnlock: while buyers come in bursts and
// pauses around the linger, some giving up, and Redis answers unevenly, a
// sampler looks at the sale's coalescer between its critical sections and
// finds what every send relies on: queued buys always have a call in
// flight or a linger to carry them on (else they wait forever), a linger
// never waits with InFlight calls in flight (its tick could not send), and
// never more than InFlight calls.
func TestAdvLingerInvariantsAtEveryUnlock(t *testing.T) {
	for _, co := range []Coalesce{
		{Linger: time.Millisecond, Overlap: 5},
		{Linger: 3 * time.Millisecond, Overlap: 3, InFlight: 1, MaxBatch: 4},
		{Linger: 500 * time.Microsecond, Overlap: 2, MaxBatch: 2, InFlight: 3},
	} {
		t.Run(fmt.Sprintf("%v/%d/%d/%d", co.Linger, co.Overlap, co.InFlight, co.MaxBatch), func(t *testing.T) {
			rdb := redistest.Standalone(t)
			rdb.AddHook(Jitter{Max: 2 * co.Linger})
			e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb), Coalesce: co, SoldOut: SoldOut{Off: true}})
			if err := e.CreateSale(context.Background(), Sale{ID: "s0", PerUserLimit: 1 << 20,
				Items: []Item{{SKU: "A", Stock: 1 << 20}}}); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			sampled := make(chan int)
			go func() {
				n := 0
				defer func() { sampled <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					v, ok := e.coalescers.Load("s0")
					if !ok {
						runtime.Gosched()
						continue
					}
					c := v.(*coalescer)
					c.mu.Lock()
					q, f, l := len(c.queue), c.inFlight, c.lingering
					c.mu.Unlock()
					n++
					switch {
					case q > 0 && f == 0 && !l:
						t.Errorf("%d buys queued with no call in flight and no linger", q)
					case l && q == 0:
						t.Errorf("lingering with nothing queued")
					case l && f >= e.coalesce.InFlight:
						t.Errorf("lingering with %d calls in flight, InFlight %d", f, e.coalesce.InFlight)
					case f > e.coalesce.InFlight || f < 0:
						t.Errorf("%d calls in flight, InFlight %d", f, e.coalesce.InFlight)
					}
					if t.Failed() {
						return
					}
					time.Sleep(20 * time.Microsecond)
				}
			}()
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					for range 40 {
						time.Sleep(time.Duration(rng.Int64N(int64(3 * co.Linger))))
						ctx, cancel := context.Background(), context.CancelFunc(func() {})
						if rng.IntN(4) == 0 {
							ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(2*co.Linger))))
						}
						_, err := e.Buy(ctx, "s0", fmt.Sprint("u", g), []Line{{SKU: "A", Qty: 1}}, "")
						cancel()
						if err != nil && ctx.Err() == nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			if n := <-sampled; n == 0 {
				t.Errorf("the sampler saw nothing")
			}
		})
	}
}

// TestAdvLingerNotInAForgottenCoalescer: a buy that found its sale's
// coalescer just before its keep ended (its timer forgot it) has no crowd
// to wait for there: every later buy of the sale goes to a new
// coalescer. It is sent at once, alone, as before lingers, not held a
// whole Linger (here an hour: it would end at its ctx's deadline).
func TestAdvLingerNotInAForgottenCoalescer(t *testing.T) {
	e := advLingerEngine(t, Coalesce{Linger: time.Hour}, 1)
	old := crowded(e, "s0", 3)
	old.mu.Lock()
	old.arm(time.Millisecond) // its keep ends
	old.mu.Unlock()
	waitfor.Until(t, waitfor.Patience, "the idle coalescer forgotten", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
	c, err := checkBuy(BuyRequest{SaleID: "s0", UserID: "late", Lines: []Line{{SKU: "A", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := e.newBuyCall(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Patience)
	defer cancel()
	if _, err := old.buy(ctx, bc); err != nil {
		t.Fatalf("the late buy through the forgotten coalescer: %v", err)
	}
}

// advAllForgotten waits until e holds no coalescer and no more goroutines
// run than base (counted before the buys) and a few.
func advAllForgotten(t *testing.T, e *Engine, base int) {
	t.Helper()
	waitfor.Until(t, waitfor.Patience, "every idle coalescer forgotten", func() error {
		if n := coalescerCount(e); n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
	waitfor.Until(t, waitfor.Patience, "no goroutine left behind", func() error {
		if n := runtime.NumGoroutine(); n > base+5 {
			return fmt.Errorf("%d goroutines, %d before the buys", n, base)
		}
		return nil
	})
}
