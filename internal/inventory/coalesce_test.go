package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/waitfor"
)

// scriptCalls counts the script calls (EVAL/EVALSHA) whose first key is
// key, single or pipelined, and can hold them until released.
type scriptCalls struct {
	key   string
	n     atomic.Int64
	gate  chan struct{} // when set, a matching call waits for it to close
	enter chan struct{} // signalled as a held call arrives
}

func countScripts(rdb redis.UniversalClient, key string) *scriptCalls {
	c := &scriptCalls{key: key}
	rdb.AddHook(c)
	return c
}

func (c *scriptCalls) match(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := fmt.Sprint(args[0])
	return (name == "evalsha" || name == "eval") && len(args) > 3 && fmt.Sprint(args[3]) == c.key
}

func (c *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.match(cmd) {
			c.n.Add(1)
			if c.gate != nil {
				c.enter <- struct{}{}
				<-c.gate
			}
		}
		return next(ctx, cmd)
	}
}

func (c *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if c.match(cmd) {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestCoalescedCrowd: 64 buyers at once, one- and two-line buys of 1 or 2
// units against little stock and a per-user limit of 2. Buys go out in
// fewer calls than there are buys, and the books balance exactly as with
// single buys: no oversell, nobody over the limit, one event per order.
func TestCoalescedCrowd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2,
			Items: []inventory.Item{{SKU: "A", Stock: 150}, {SKU: "B", Stock: 40}}})
		calls := countScripts(r.rdb, r.key("s1", "sale"))
		var (
			wg          sync.WaitGroup
			buys        atomic.Int64
			mu          sync.Mutex
			soldA, sold = int64(0), int64(0)
		)
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 12 {
					l := lines("A", 1+rng.IntN(2))
					if rng.IntN(3) == 0 {
						l = lines("A", 1, "B", 1+rng.IntN(2))
					}
					buys.Add(1)
					rc, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("u%d", rng.IntN(200)), l, "")
					switch {
					case err == nil:
						mu.Lock()
						soldA += rc.Order.Items[0].Qty
						for _, it := range rc.Order.Items {
							sold += it.Qty
						}
						mu.Unlock()
					case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
					default:
						t.Errorf("Buy: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		if calls.n.Load() >= buys.Load() {
			t.Errorf("%d buys took %d script calls: nothing was coalesced", buys.Load(), calls.n.Load())
		}
		rem := r.remaining("s1")
		if soldA+rem["A"] != 150 || rem["A"] < 0 || rem["B"] < 0 {
			t.Errorf("A: the buyers got %d, %d remain, of 150", soldA, rem["A"])
		}
		if got := 150 - rem["A"] + 40 - rem["B"]; got != sold {
			t.Errorf("stock went down by %d, buyers were told %d", got, sold)
		}
		for f, n := range r.held("s1") {
			if n > 2 {
				t.Errorf("%s holds %d, over the limit of 2", f, n)
			}
		}
		var units int64
		for _, ev := range r.events("s1") {
			if ev.Type != inventory.EventBought {
				continue
			}
			for _, l := range ev.Order.Items {
				units += l.Qty
			}
		}
		if units != sold {
			t.Errorf("events carry %d units, buyers were told %d", units, sold)
		}
	})
}

// TestLoneBuysAreSentAlone: with nothing in flight, each buy is its own
// call, sent at once: coalescing gathers only what arrives meanwhile, and
// a lone caller who waits for each buy never lingers (with a linger of an
// hour, a buy that lingered would end the test at its deadline).
func TestLoneBuysAreSentAlone(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: time.Hour}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	for i := range 20 {
		if _, err := r.eng.Buy(ctx, "s1", fmt.Sprintf("u%d", i), lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
	}
	if calls.n.Load() != 20 {
		t.Errorf("20 buys one after another took %d calls, want 20", calls.n.Load())
	}
}

// TestABuyBehindACallWaitsForACrowd: with a call of its sale in flight, a
// buy does not take the free slot alone: it waits for that call to
// complete, unless Overlap buys are queued, which then go at once as a
// second call alongside it. (Before, the first buy of each wave took the
// free slot alone: over HTTP more than half the calls carried one buy.)
func TestABuyBehindACallWaitsForACrowd(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Overlap: 3}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	calls.gate, calls.enter = make(chan struct{}), make(chan struct{}, 8)
	buy := func(u string) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := r.eng.Buy(r.ctx, "s1", u, lines("A", 1), "")
			done <- err
		}()
		return done
	}
	done := []chan error{buy("u0")}
	<-calls.enter // u0's call is in flight, held
	done = append(done, buy("u1"), buy("u2"))
	r.waitQueue("u1 and u2 queued behind u0's call, not sent", 2, 1)
	done = append(done, buy("u3")) // the third queued: Overlap
	<-calls.enter
	r.waitQueue("u1, u2 and u3 sent as a second call", 0, 2)
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d calls, want 2 (u0's; u1, u2 and u3's)", n)
	}
	close(calls.gate)
	for _, d := range done {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}

	// A lone buy behind a call goes when that call completes.
	calls.gate = make(chan struct{})
	done = []chan error{buy("u4")}
	<-calls.enter
	done = append(done, buy("u5"))
	r.waitQueue("u5 queued behind u4's call", 1, 1)
	close(calls.gate)
	for _, d := range done {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.n.Load(); n != 4 {
		t.Errorf("%d calls, want 4", n)
	}
	held := r.held("s1")
	for i := range 6 {
		if u := fmt.Sprintf("u%d|A", i); held[u] != 1 {
			t.Errorf("%s holds %d, want 1", u, held[u])
		}
	}
}

// TestBatchSemantics: one BuyMany call of one sale is one script run; each
// buy in it sees the ones before it, exactly as single buys in that order.
func TestBatchSemantics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{SoldOut: inventory.SoldOut{Off: true}})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2,
			Items: []inventory.Item{{SKU: "A", Stock: 3}, {SKU: "B", Stock: 1}, {SKU: "U", Stock: -1}}})
		calls := countScripts(r.rdb, r.key("s1", "sale"))
		reloads := r.eng.ScriptReloads()
		req := func(user, key string, l []inventory.Line) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: l, IdempotencyKey: key}
		}
		res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
			0: req("u1", "k1", lines("A", 1)),
			1: req("u1", "k1", lines("A", 1)),         // same key: the order above
			2: req("u1", "", lines("A", 1, "U", 2)),   // u1 now holds A 2, U 2
			3: req("u1", "", lines("A", 1)),           // over the limit
			4: req("u2", "", lines("A", 1, "B", 2)),   // B short: nothing of it happens
			5: req("u2", "", lines("A", 1, "B", 1)),   // the last A and the last B
			6: req("u3", "", lines("A", 1)),           // sold out
			7: req("u3", "", lines("Z", 1)),           // no such sku
			8: req("u3", "", lines("U", 2)),           // unlimited: fine
			9: req("u2", "k9", lines("U", 1, "A", 1)), // A sold out: nothing of it
		})
		if n := calls.n.Load() - (r.eng.ScriptReloads() - reloads); n != 1 {
			t.Errorf("BuyMany of one sale took %d calls (not counting script reloads), want 1", n)
		}
		wantErr := []error{nil, nil, nil, inventory.ErrLimitExceeded, inventory.ErrSoldOut, nil,
			inventory.ErrSoldOut, inventory.ErrNotFound, nil, inventory.ErrSoldOut}
		for i, w := range wantErr {
			if !errors.Is(res[i].Err, w) || (w == nil) != (res[i].Err == nil) {
				t.Errorf("buy %d: err %v, want %v", i, res[i].Err, w)
			}
		}
		if !res[1].Receipt.Replayed || res[1].Receipt.Order.ID != res[0].Receipt.Order.ID {
			t.Errorf("same key in one batch: %+v, want a replay of %s", res[1].Receipt, res[0].Receipt.Order.ID)
		}
		if rem := res[5].Receipt.Remaining; len(rem) != 2 || rem[0] != 0 || rem[1] != 0 {
			t.Errorf("last units: remaining %v, want [0 0]", rem)
		}
		if rem := r.remaining("s1"); rem["A"] != 0 || rem["B"] != 0 {
			t.Errorf("remaining %v, want A 0 B 0", rem)
		}
		held := r.held("s1")
		want := map[string]int64{"u1|A": 2, "u1|U": 2, "u2|A": 1, "u2|B": 1, "u3|U": 2}
		if fmt.Sprint(held) != fmt.Sprint(want) {
			t.Errorf("held %v, want %v", held, want)
		}
		bought := 0
		for _, ev := range r.events("s1") {
			if ev.Type == inventory.EventBought {
				bought++
			}
		}
		if bought != 4 { // buys 0, 2, 5 and 8
			t.Errorf("%d bought events, want 4 (one per order)", bought)
		}
	})
}

// TestQueuedBuyWhoseContextEndsIsNeverSent: a buy queued behind a call in
// flight, whose caller gives up, is dropped before the next call.
func TestQueuedBuyWhoseContextEndsIsNeverSent(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{InFlight: 1}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	calls.gate, calls.enter = make(chan struct{}), make(chan struct{}, 1)

	first := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), "")
		first <- err
	}()
	<-calls.enter // u1's call is in flight, held
	ctx, cancel := context.WithCancel(r.ctx)
	second := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(ctx, "s1", "u2", lines("A", 1), "")
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // u2 queues behind u1's call
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the given-up buy: %v, want context.Canceled", err)
	}
	close(calls.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	calls.gate = nil
	// u3's buy runs after whatever was queued: u2's, if it had been sent.
	if _, err := r.eng.Buy(r.ctx, "s1", "u3", lines("A", 1), ""); err != nil {
		t.Fatal(err)
	}
	if held := r.held("s1"); held["u2|A"] != 0 || held["u1|A"] != 1 || held["u3|A"] != 1 {
		t.Errorf("held %v: the given-up buy was sent", held)
	}
	if n := calls.n.Load(); n != 2 {
		t.Errorf("%d calls, want 2 (u1's, u3's)", n)
	}
}

// TestSoldOutFlag: after a sell-out the crowd is refused without a call to
// Redis; stock that comes back is sold again: at once on the instance that
// returned it, within the flag's TTL on any other, and at once on every
// instance watching the stock channel.
func TestSoldOutFlag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{SoldOut: inventory.SoldOut{TTL: time.Minute}})
		other := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock}) // a second instance
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 2}, {SKU: "B", Stock: 5}}})
		calls := countScripts(r.rdb, r.key("s1", "sale"))
		buy := func(user string, l []inventory.Line, key string) error {
			_, err := r.eng.Buy(r.ctx, "s1", user, l, key)
			return err
		}
		if err := buy("u1", lines("A", 2), "k1"); err != nil {
			t.Fatal(err)
		}
		before := calls.n.Load()
		for i := range 50 {
			if err := buy(fmt.Sprint("c", i), lines("B", 1, "A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("buy after the sell-out: %v", err)
			}
		}
		if n := calls.n.Load() - before; n != 0 || r.eng.SoldOutRefusals() != 50 {
			t.Errorf("the crowd after the sell-out made %d calls (refused %d in process), want 0 (50)", n, r.eng.SoldOutRefusals())
		}
		// A retry with its idempotency key still finds its order.
		if err := buy("u1", lines("A", 2), "k1"); err != nil {
			t.Errorf("a retry by key after the sell-out: %v", err)
		}
		if rem := r.remaining("s1"); rem["B"] != 5 {
			t.Errorf("B remaining %d: a refused buy sold", rem["B"])
		}

		// Another instance restocks; nobody watches: the flag holds until its TTL.
		if _, err := other.Restock(r.ctx, "s1", "A", 1); err != nil {
			t.Fatal(err)
		}
		if err := buy("v1", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("within the TTL: %v, want the flag's refusal", err)
		}
		r.clock.Set(r.clock.Now().Add(time.Minute + time.Millisecond))
		v1, err := r.eng.Buy(r.ctx, "s1", "v1", lines("A", 1), "")
		if err != nil {
			t.Fatalf("after the TTL: %v", err)
		}

		// v1 took the last unit: flagged again. This instance's own cancel
		// clears its flag at once.
		before = calls.n.Load()
		if err := buy("v2", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) || calls.n.Load() != before {
			t.Fatalf("after the last unit: %v, %d calls; want the flag's refusal", err, calls.n.Load()-before)
		}
		if _, err := r.eng.Cancel(r.ctx, v1.Order.ID, ""); err != nil {
			t.Fatal(err)
		}
		if err := buy("v2", lines("A", 1), ""); err != nil {
			t.Fatalf("after this instance's cancel: %v", err)
		}

		// With WatchStock, another instance's restock clears the flag at once.
		before = calls.n.Load()
		if err := buy("v5", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) || calls.n.Load() != before {
			t.Fatalf("v2 took the last unit: %v, %d calls; want the flag's refusal", err, calls.n.Load()-before)
		}
		ctx, stop := context.WithCancel(r.ctx)
		watched := make(chan error, 1)
		go func() { watched <- r.eng.WatchStock(ctx, r.rdb) }()
		defer func() {
			stop()
			if err := <-watched; err != nil {
				t.Errorf("WatchStock: %v", err)
			}
		}()
		// Subscribed: WatchStock clears every flag once its subscription is
		// confirmed, so a buy reaches Redis again, which refuses it (nothing
		// came back yet) and flags the item again.
		waitfor.Until(t, waitfor.Patience, "WatchStock subscribed", func() error {
			before := calls.n.Load()
			if err := buy("v5", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("sold out: %v", err)
			}
			if calls.n.Load() == before {
				return errors.New("buys are still refused by the flag alone")
			}
			return nil
		})
		before = calls.n.Load()
		if err := buy("v5", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) || calls.n.Load() != before {
			t.Fatalf("refused by Redis: %v, %d calls; want the flag's refusal again", err, calls.n.Load()-before)
		}
		if _, err := other.Restock(r.ctx, "s1", "A", 1); err != nil {
			t.Fatal(err)
		}
		waitfor.Until(t, waitfor.Patience, "the restock on another instance is heard", func() error {
			err := buy("v5", lines("A", 1), "")
			if err != nil && !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("buy after the restock: %v", err)
			}
			return err
		})
	})
}

// waitQueue waits until sale s1 has queued buys queued and inFlight
// calls in flight (SaleQueue), or fails the test saying what it waited for.
func (r *rig) waitQueue(what string, queued, inFlight int) {
	r.t.Helper()
	waitfor.Until(r.t, waitfor.Patience, what, func() error {
		if q, f := r.eng.SaleQueue("s1"); q != queued || f != inFlight {
			return fmt.Errorf("%d buys queued, %d calls in flight; want %d, %d", q, f, queued, inFlight)
		}
		return nil
	})
}

// warmCrowd makes s1's last call carry two buys (u0's call held while
// w1 and w2 queue behind it), so that its next buys linger; it returns
// when all three are bought.
func warmCrowd(t *testing.T, r *rig, calls *scriptCalls) {
	t.Helper()
	calls.gate, calls.enter = make(chan struct{}), make(chan struct{}, 8)
	done := make(chan error, 3)
	buy := func(u string) {
		go func() {
			_, err := r.eng.Buy(r.ctx, "s1", u, lines("A", 1), "")
			done <- err
		}()
	}
	buy("w0")
	<-calls.enter // w0's call is in flight, held
	buy("w1")
	buy("w2")
	waitfor.Until(t, waitfor.Patience, "w1 and w2 queued behind w0's call", func() error {
		if q, _ := r.eng.SaleQueue("s1"); q != 2 {
			return fmt.Errorf("%d queued", q)
		}
		return nil
	})
	close(calls.gate)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	calls.gate = nil
}

// TestACrowdLingers: once a sale's call carried two buys or more, a buy
// that finds nothing in flight waits (Linger) for others to join its call
// instead of going alone, and the wait ends at Overlap buys. A linger as
// long as a Duration goes works as any other (4 of them, the idle crowd's
// keep, once overflowed into the past: the crowd was forgotten at once and
// its next buy went alone).
func TestACrowdLingers(t *testing.T) {
	for _, l := range []time.Duration{time.Hour, math.MaxInt64} {
		t.Run(l.String(), func(t *testing.T) { crowdLingers(t, l) })
	}
}

func crowdLingers(t *testing.T, linger time.Duration) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: linger, Overlap: 4}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	if n := calls.n.Load(); n != 2 {
		t.Fatalf("%d calls, want 2 (w0's; w1 and w2's)", n)
	}
	done := make(chan error, 4)
	for i := range 4 {
		go func() {
			_, err := r.eng.Buy(r.ctx, "s1", fmt.Sprint("u", i), lines("A", 1), "")
			done <- err
		}()
		if i < 3 {
			want := i + 1
			r.waitQueue("the buys linger, none sent", want, 0)
		}
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.n.Load(); n != 3 {
		t.Errorf("%d calls, want 3: the four lingering buys as one", n)
	}
	held := r.held("s1")
	for i := range 4 {
		if u := fmt.Sprintf("u%d|A", i); held[u] != 1 {
			t.Errorf("%s holds %d, want 1", u, held[u])
		}
	}
}

// TestALingerEndsOnItsOwn: a lingering buy that nobody joins is sent once
// Linger has passed (it would wait forever if no timer sent it).
func TestALingerEndsOnItsOwn(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: 20 * time.Millisecond}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if _, err := r.eng.Buy(ctx, "s1", "u1", lines("A", 1), ""); err != nil {
		t.Fatalf("the lingering buy: %v", err)
	}
	if n := calls.n.Load(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
}

// TestALingeringBuyWhoseContextEndsIsNeverSent: a caller who gives up
// while their buy lingers gets ctx's error, and the buy is never sent
// (the linger lasts an hour; the next buy ends it at Overlap 2; InFlight 1
// keeps the set-up's two queued buys from going at Overlap).
func TestALingeringBuyWhoseContextEndsIsNeverSent(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: time.Hour, Overlap: 2, InFlight: 1}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	ctx, cancel := context.WithCancel(r.ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(ctx, "s1", "u1", lines("A", 1), "")
		gaveUp <- err
	}()
	r.waitQueue("u1's buy lingers", 1, 0)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the given-up buy: %v, want context.Canceled", err)
	}
	// u2 joins the linger: two queued, both go: u1's dropped.
	if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 1), ""); err != nil {
		t.Fatal(err)
	}
	if held := r.held("s1"); held["u1|A"] != 0 || held["u2|A"] != 1 {
		t.Errorf("held %v: the given-up buy was sent", held)
	}
}

// TestAClosedLoopStopsLingering: a few callers who each wait for their buy
// before the next (a closed loop) are all queued at once; a linger that
// hears no buy in its second half stops the sale's lingers for the next
// calls, so that their waves are not held Linger each.
func TestAClosedLoopStopsLingering(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Linger: time.Second}})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 100000, Items: []inventory.Item{{SKU: "A", Stock: 100000}}})
	calls := countScripts(r.rdb, r.key("s1", "sale"))
	warmCrowd(t, r, calls)
	// Three callers, five buys each, each buy after the caller's last: the
	// first wave lingers (a second), then the next 16 calls do not (the
	// 12 buys left take at most 12); with a linger held for every wave this
	// would take five seconds.
	var wg sync.WaitGroup
	start := time.Now()
	lingered := atomic.Int64{}
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				t0 := time.Now()
				if _, err := r.eng.Buy(r.ctx, "s1", fmt.Sprint("c", g), lines("A", 1), fmt.Sprint(g, "-", i)); err != nil {
					t.Error(err)
					return
				}
				if d := time.Since(t0); d > 900*time.Millisecond {
					t.Logf("c%d buy %d took %s", g, i, d)
					lingered.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Which buys lingered is the property, not how long the run took: only
	// those of the first wave may have waited out a whole linger.
	if n := lingered.Load(); n > 3 {
		t.Errorf("%d buys waited out a linger (%s in all), want at most the first wave's 3", n, time.Since(start))
	}
	if held := r.held("s1"); held["c0|A"]+held["c1|A"]+held["c2|A"] != 15 {
		t.Errorf("held %v, want 5 each", held)
	}
}
