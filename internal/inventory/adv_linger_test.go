package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// Adversarial tests of the coalescer's linger (Coalesce.Linger): a buy of
// a sale with a crowd that finds nothing in flight waits for others on a
// timer. Each test attacks one way a timer-driven send can go wrong: a buy
// never sent (a lost tick), sent twice, sent after its caller gave up, or
// a bound (InFlight, Overlap 1, a negative Linger) broken.

// TestAdvLingerShapesKeepTheBooks: the crowd of
// TestCoalescerUnderCrowdsAndGiveUps (many sales, a hot one, a quarter of
// the buyers giving up at random points, NOSCRIPT now and then) under
// lingers of every length against the shapes of Coalesce: a linger much
// shorter than a call, about one, longer than the waves' gaps; with
// InFlight 1, MaxBatch below Overlap's default, Overlap 1, one pipeline.
// Every buy returns and the books balance.
func TestAdvLingerShapesKeepTheBooks(t *testing.T) {
	shapes := []inventory.Coalesce{
		{Linger: 50 * time.Microsecond},
		{Linger: 3 * time.Millisecond, Overlap: 2, MaxBatch: 3, InFlight: 1},
		{Linger: 20 * time.Millisecond, Overlap: 500, MaxBatch: 4, Pipelines: 1},
		{Linger: 60 * time.Millisecond, Overlap: 1},
		{Linger: 2 * time.Millisecond, Overlap: 3, InFlight: 4, Pipelines: 1},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for i, co := range shapes {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				coalescerCrowd(t, b, co)
			})
		}
	})
}

// lingerOutcome is one buy of lingerHammer and what its caller was told.
type lingerOutcome struct {
	user, order string
	err         error
}

// lingerHammer runs buyers of r's sale "s1" (created by the caller, qty 1 of
// A each) in bursts and pauses around the linger's length, a share of them
// giving up after about a linger, so that ticks fall on every step of the
// coalescer: a call completing, a buy arriving, a take at Overlap, a
// caller giving up. Every buy must return (a lingering buy that no tick
// sends waits forever): the test fails, saying what the sale's coalescer
// holds, if they have not within a generous deadline.
func lingerHammer(t *testing.T, r *rig, linger time.Duration, buyers, each int) []lingerOutcome {
	t.Helper()
	var (
		mu       sync.Mutex
		outs     []lingerOutcome
		wg       sync.WaitGroup
		returned atomic.Int64
	)
	for g := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for range each {
				switch rng.IntN(6) {
				case 0, 1: // straight on: a burst
				case 2:
					time.Sleep(linger / 2)
				case 3:
					time.Sleep(linger)
				case 4:
					time.Sleep(linger + time.Duration(rng.Int64N(int64(linger)+1)))
				case 5:
					time.Sleep(5 * linger)
				}
				ctx, cancel := r.ctx, context.CancelFunc(func() {})
				if rng.IntN(5) == 0 {
					ctx, cancel = context.WithTimeout(r.ctx, time.Duration(rng.Int64N(int64(2*linger)+1)))
				}
				order := inventory.NewOrderID("s1")
				user := fmt.Sprint("u", rng.IntN(60))
				rc, err := r.eng.BuyWith(ctx, inventory.BuyRequest{SaleID: "s1", UserID: user, OrderID: order,
					Lines: lines("A", 1)})
				cancel()
				if err == nil && rc.Order.ID != order {
					err = fmt.Errorf("receipt names order %s, sent %s", rc.Order.ID, order)
				}
				returned.Add(1)
				mu.Lock()
				outs = append(outs, lingerOutcome{user, order, err})
				mu.Unlock()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * waitfor.Patience):
		q, f := r.eng.SaleQueue("s1")
		t.Fatalf("%d of %d buys returned; the rest hang: s1 has %d queued, %d calls in flight",
			returned.Load(), buyers*each, q, f)
	}
	return outs
}

// checkLingerBooks checks s1's books against outs: stock balances, nobody
// over limit, each accepted buy exactly one bought event, each refused
// none, each unknown (its ctx ended) at most one, and no event for an
// order nobody sent.
func checkLingerBooks(t *testing.T, r *rig, outs []lingerOutcome, stock, limit int64) {
	t.Helper()
	byOrder := map[string]lingerOutcome{}
	for _, o := range outs {
		byOrder[o.order] = o
		if o.err != nil && !unknownOutcome(o.err) && !errors.Is(o.err, inventory.ErrSoldOut) &&
			!errors.Is(o.err, inventory.ErrLimitExceeded) {
			t.Errorf("%s %s: %v", o.user, o.order, o.err)
		}
	}
	st, err := r.eng.Stock(r.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	it := st.Items[0]
	if it.Remaining+it.Sold != stock || it.Remaining < 0 {
		t.Errorf("remaining %d + sold %d != %d", it.Remaining, it.Sold, stock)
	}
	seen := map[string]bool{}
	perUser := map[string]int64{}
	var evSold int64
	for _, ev := range r.events("s1") {
		if ev.Type != inventory.EventBought {
			continue
		}
		id := ev.Order.ID
		if seen[id] {
			t.Errorf("order %s has two bought events", id)
		}
		seen[id] = true
		o, ok := byOrder[id]
		switch {
		case !ok:
			t.Errorf("event for order %s nobody sent", id)
		case o.err != nil && !unknownOutcome(o.err):
			t.Errorf("order %s was answered %v, yet sold", id, o.err)
		}
		evSold += ev.Order.Items[0].Qty
		perUser[ev.Order.UserID] += ev.Order.Items[0].Qty
	}
	accepted := 0
	for id, o := range byOrder {
		if o.err == nil {
			accepted++
			if !seen[id] {
				t.Errorf("accepted order %s has no event", id)
			}
		}
	}
	if evSold != it.Sold {
		t.Errorf("events sold %d, Redis says %d", evSold, it.Sold)
	}
	for u, n := range perUser {
		if n > limit {
			t.Errorf("%s holds %d, limit %d", u, n, limit)
		}
	}
	if accepted == 0 {
		t.Errorf("no buy was accepted: the hammer tested nothing")
	}
}

// TestAdvLingerEveryBuyReturns: lingers of a fraction of a call, about a
// call, and longer, hammered by bursts and pauses around their length,
// Redis answering after up to two lingers, and callers giving up
// mid-linger: no buy is left lingering with no tick to
// send it, none is sent twice, the books balance.
func TestAdvLingerEveryBuyReturns(t *testing.T) {
	for _, linger := range []time.Duration{200 * time.Microsecond, time.Millisecond, 4 * time.Millisecond} {
		t.Run(linger.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				r := newRig(t, b, inventory.Options{Coalesce: inventory.Coalesce{Linger: linger, Overlap: 6},
					SoldOut: inventory.SoldOut{Off: true}})
				const stock, limit = 500, 10
				r.create(inventory.Sale{ID: "s1", PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
				r.rdb.AddHook(inventory.Jitter{Max: 2 * linger})
				outs := lingerHammer(t, r, linger, 24, 30)
				checkLingerBooks(t, r, outs, stock, limit)
			})
		})
	}
}

// TestAdvLingerersWhoAllGiveUpAreNeverSent: every buy of a linger gives
// up before it ends. None reaches Redis (the call is never made), each
// caller gets ctx's error, and the sale is not left counting a call in
// flight that never was: the next buy goes through.
func TestAdvLingerersWhoAllGiveUpAreNeverSent(t *testing.T) {
	const linger = 2 * time.Second // long enough for the three to join it on a loaded machine
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: linger}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d calls after the warm-up, want 2", n)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	gaveUp := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := r.eng.Buy(ctx, "s1", fmt.Sprint("g", i), lines("A", 1), "")
			gaveUp <- err
		}()
	}
	r.waitQueue("the three buys linger", 3, 0)
	cancel()
	for range 3 {
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("a given-up buy: %v, want context.Canceled", err)
		}
	}
	r.waitQueue("the linger ends, its buys dropped", 0, 0)
	if n := calls.n.Load(); n != 2 {
		t.Errorf("%d calls, want still 2: a given-up linger was sent", n)
	}
	ctx2, cancel2 := context.WithTimeout(r.ctx, time.Minute)
	defer cancel2()
	if _, err := r.eng.Buy(ctx2, "s1", "late", lines("A", 1), ""); err != nil {
		t.Fatalf("the buy after: %v", err)
	}
	held := r.held("s1")
	for i := range 3 {
		if n := held[fmt.Sprintf("g%d|A", i)]; n != 0 {
			t.Errorf("g%d holds %d: a given-up buy was sold", i, n)
		}
	}
	if held["late|A"] != 1 {
		t.Errorf("late holds %d, want 1", held["late|A"])
	}
}

// TestAdvLingerOverlapOneNeverLingers: Overlap 1 sends a buy that finds a
// free slot at once, alone: even a sale with a crowd and a linger of an
// hour never holds a buy (one that lingered would end at its ctx's
// deadline, a minute).
func TestAdvLingerOverlapOneNeverLingers(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: time.Hour, Overlap: 1, InFlight: 1}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1000, Items: []inventory.Item{{SKU: "A", Stock: 10000}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d calls after the warm-up, want 2 (w1 and w2 as one)", n)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				if _, err := r.eng.Buy(ctx, "s1", fmt.Sprint("u", g), lines("A", 1), fmt.Sprint(i)); err != nil {
					t.Errorf("u%d buy %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// concurrentCalls counts the script calls of one sale (whose first key is
// key) under way at once, single or pipelined, and the most ever.
type concurrentCalls struct {
	key      string
	now, max atomic.Int64
}

func (c *concurrentCalls) match(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := fmt.Sprint(args[0])
	return (name == "evalsha" || name == "eval") && len(args) > 3 && fmt.Sprint(args[3]) == c.key
}

func (c *concurrentCalls) enter() func() {
	n := c.now.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(200 * time.Microsecond) // widen the window in which another overlaps
	return func() { c.now.Add(-1) }
}

func (c *concurrentCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *concurrentCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.match(cmd) {
			defer c.enter()()
		}
		return next(ctx, cmd)
	}
}

func (c *concurrentCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if c.match(cmd) {
				defer c.enter()()
			}
		}
		return next(ctx, cmds)
	}
}

// TestAdvLingerNeverOverInFlight: ticks that end lingers race calls that
// complete and buys that fill the queue to Overlap; never are more than
// InFlight calls of the sale under way at once. (The linger is long
// enough that the sale's coalescer, kept 4 lingers once idle, is never
// dropped mid-crowd.)
func TestAdvLingerNeverOverInFlight(t *testing.T) {
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprint(inFlight), func(t *testing.T) {
			r := newRig(t, backends[0], inventory.Options{SoldOut: inventory.SoldOut{Off: true},
				Coalesce: inventory.Coalesce{Linger: 20 * time.Millisecond, Overlap: 4, InFlight: inFlight}})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 100000, Items: []inventory.Item{{SKU: "A", Stock: 100000}}})
			cc := &concurrentCalls{key: r.key("s1", "sale")}
			r.rdb.AddHook(cc)
			var wg sync.WaitGroup
			for g := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 15 {
						time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
						if _, err := r.eng.Buy(r.ctx, "s1", fmt.Sprint("u", g), lines("A", 1), ""); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if m := cc.max.Load(); m > int64(inFlight) {
				t.Errorf("%d calls of the sale under way at once, InFlight %d", m, inFlight)
			}
			if m := cc.max.Load(); m == 0 {
				t.Errorf("no call seen: the hook tested nothing")
			}
		})
	}
}

// TestAdvLingerThroughAFaultyWire: the crowd of
// TestCoalescerThroughAFaultyWire (replies held, dropped, connections cut,
// the script cache emptied) with lingers a call long and longer than the
// faults' turns: a buy whose linger ends while Redis is unreachable is
// sent, fails, and is finished alone with its order id; none is sold
// twice, none sold that was refused, every accepted one once.
func TestAdvLingerThroughAFaultyWire(t *testing.T) {
	for i, co := range []inventory.Coalesce{{Linger: time.Millisecond}, {Linger: 30 * time.Millisecond, Overlap: 8},
		{Linger: 5 * time.Millisecond, Overlap: 2, MaxBatch: 3, Pipelines: 1, InFlight: 1}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) { faultyWireCrowd(t, co, -1) })
	}
}

// TestAdvLingerIgnoresTheEnginesClock: the linger runs on the process's
// monotonic clock, not on Options.Clock: the engine's clock jumping back
// an hour (or on a day) while a buy lingers does not hold it for the jump
// (it would end at its ctx's deadline, a minute).
func TestAdvLingerIgnoresTheEnginesClock(t *testing.T) {
	for _, jump := range []time.Duration{-time.Hour, 24 * time.Hour} {
		t.Run(jump.String(), func(t *testing.T) {
			r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: 2 * time.Second}})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
			calls := countScripts(r.rdb, r.key("s1", "sale"))
			warmCrowd(t, r, calls)
			ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := r.eng.Buy(ctx, "s1", "u1", lines("A", 1), "")
				done <- err
			}()
			r.waitQueue("u1's buy lingers", 1, 0)
			r.clock.Set(r.clock.Now().Add(jump))
			if err := <-done; err != nil {
				t.Fatalf("the lingering buy: %v", err)
			}
		})
	}
}

// TestAdvLingerEndsForATrickle: a linger is timed from its oldest buy, not
// from its newest: a trickle of buyers that each join it before it ends
// does not keep it open for as long as the trickle lasts (its first buyer
// would wait for them all).
func TestAdvLingerEndsForATrickle(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: 200 * time.Millisecond, Overlap: 1000}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1000, Items: []inventory.Item{{SKU: "A", Stock: 10000}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	before := calls.n.Load()
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	first := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		_, err := r.eng.Buy(ctx, "s1", "first", lines("A", 1), "")
		first <- err
	}()
	go func() { // a buy every 20 ms, until the first buyer has their answer
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := r.eng.Buy(ctx, "s1", fmt.Sprint("t", i%50), lines("A", 1), ""); err != nil {
					t.Error(err)
				}
			}()
		}
	}()
	err := <-first
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the first buyer, with a trickle joining their linger: %v", err)
	}
	if n := calls.n.Load() - before; n < 1 {
		t.Errorf("%d calls: the trickle was never sent", n)
	}
}

// TestAdvLingerWhenTheClientCloses: the engine's Redis client is closed
// (a shutdown) while buys linger: when the linger ends they are sent,
// fail, and their callers get the error, not a wait without end.
func TestAdvLingerWhenTheClientCloses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: redistest.Prefix(t, rdb), clock: newTestClock()}
	r.eng = inventory.New(rdb, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock,
		Coalesce: inventory.Coalesce{Linger: 2 * time.Second}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := r.eng.Buy(ctx, "s1", fmt.Sprint("u", i), lines("A", 1), "")
			done <- err
		}()
	}
	r.waitQueue("the buys linger", 3, 0)
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err == nil {
			t.Errorf("a buy sent over a closed client succeeded")
		} else if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a lingering buy waited out its ctx: %v", err)
		}
	}
}
