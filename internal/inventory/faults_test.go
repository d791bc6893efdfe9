package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// TestConcurrentSellOut: 1,000 goroutines (250 buyers, four goroutines each)
// buy random quantities of an item with 100 units and a limit of 3. Exactly
// 100 units sell, nobody holds more than 3, and the stream holds exactly one
// "bought" event per accepted buy.
func TestConcurrentSellOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "hot", PerUserLimit: 3, Items: []inventory.Item{{SKU: "A", Stock: 100}}})

		var (
			mu       sync.Mutex
			accepted = map[string]inventory.Receipt{}
			perUser  = map[string]int64{}
			failures []error
			wg       sync.WaitGroup
		)
		for g := range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := fmt.Sprintf("u%d", g%250)
				qty := 1 + rand.Int64N(3)
				for {
					rc, err := r.eng.Buy(r.ctx, "hot", user, []inventory.Line{{SKU: "A", Qty: qty}}, "")
					mu.Lock()
					switch {
					case err == nil:
						accepted[rc.Order.ID] = rc
						perUser[user] += qty
					case errors.Is(err, inventory.ErrSoldOut) && qty > 1:
						qty = 1 // take what is left, one unit at a time
						mu.Unlock()
						continue
					case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
					default:
						failures = append(failures, err)
					}
					mu.Unlock()
					return
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d buys failed, first: %v", len(failures), failures[0])
		}

		var sold int64
		for _, rc := range accepted {
			sold += rc.Order.Items[0].Qty
		}
		st, err := r.eng.Stock(r.ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if it := st.Items[0]; sold != 100 || it.Remaining != 0 || it.Sold != 100 {
			t.Errorf("receipts sold %d; Redis says remaining %d, sold %d; want 100 sold, 0 left", sold, it.Remaining, it.Sold)
		}
		for user, n := range perUser {
			if n > 3 {
				t.Errorf("%s was sold %d units, limit 3", user, n)
			}
		}
		for f, n := range r.held("hot") {
			if n > 3 {
				t.Errorf("Redis says %s holds %d, limit 3", f, n)
			}
		}
		seen := map[string]bool{}
		for _, ev := range r.events("hot") {
			if ev.Type != inventory.EventBought {
				continue
			}
			if _, ok := accepted[ev.Order.ID]; !ok || seen[ev.Order.ID] {
				t.Errorf("event for order %s: accepted %v, seen before %v", ev.Order.ID, ok, seen[ev.Order.ID])
			}
			seen[ev.Order.ID] = true
		}
		if len(seen) != len(accepted) {
			t.Errorf("%d bought events for %d accepted buys", len(seen), len(accepted))
		}
	})
}

// TestWrongTypedKeyWritesNothing: a script must not fail half way. Every
// value a buy reads or writes is made unusable in turn; the buy fails with
// ErrCorrupt and leaves stock, quotas, orders and events as they were.
func TestWrongTypedKeyWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, spoil := range []struct {
			name string
			do   func(r *rig) error
		}{
			{"events key is a string", func(r *rig) error {
				// XADD is the last write: the deductions before it must not stay.
				if err := r.rdb.Del(r.ctx, r.key("s1", "events")).Err(); err != nil {
					return err
				}
				return r.rdb.Set(r.ctx, r.key("s1", "events"), "x", 0).Err()
			}},
			{"orders key is a list", func(r *rig) error {
				return r.rdb.RPush(r.ctx, r.key("s1", "orders"), "x").Err()
			}},
			{"B's remaining is not a number", func(r *rig) error {
				return r.rdb.HSet(r.ctx, r.key("s1", "sale"), "r:B", "lots").Err()
			}},
			{"the user's count of B is not a number", func(r *rig) error {
				return r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u1|B", "many").Err()
			}},
		} {
			t.Run(spoil.name, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
					Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "B", Stock: 5}}})
				if err := spoil.do(r); err != nil {
					t.Fatal(err)
				}
				sale0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
				bought0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "bought")).Result()

				_, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1, "B", 1), "k")
				if !errors.Is(err, inventory.ErrCorrupt) {
					t.Fatalf("Buy err = %v, want ErrCorrupt", err)
				}
				sale1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
				bought1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "bought")).Result()
				if fmt.Sprint(sale0) != fmt.Sprint(sale1) || fmt.Sprint(bought0) != fmt.Sprint(bought1) {
					t.Errorf("half-written buy:\n sale   %v -> %v\n bought %v -> %v", sale0, sale1, bought0, bought1)
				}
				if n, _ := r.rdb.Exists(r.ctx, r.key("s1", "idem")).Result(); n != 0 {
					t.Error("idempotency key written by a failed buy")
				}
				if n, _ := r.rdb.HLen(r.ctx, r.key("s1", "orders")).Result(); n != 0 {
					t.Error("order written by a failed buy")
				}
				if n, _ := r.rdb.XLen(r.ctx, r.key("s1", "events")).Result(); n > 1 { // "created" only
					t.Errorf("%d events after a failed buy", n)
				}
			})
		}
	})
}

// flaky fails the calls of one script on purpose, through a go-redis hook:
// "before" drops the call unsent; "after" sends it, lets it run, and loses
// the reply, as a broken connection would.
type flaky struct {
	match   func(cmd redis.Cmder) bool
	after   bool
	failing atomic.Int32 // how many more matching calls to fail
	seen    atomic.Int32
}

func (f *flaky) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *flaky) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !f.match(cmd) {
			return next(ctx, cmd)
		}
		f.seen.Add(1)
		if f.failing.Add(-1) < 0 {
			return next(ctx, cmd)
		}
		if f.after {
			_ = next(ctx, cmd)
		}
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

func (f *flaky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// scriptWithKey matches EVAL/EVALSHA calls whose first key is key.
func scriptWithKey(key string) func(redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == key
	}
}

// TestLostReplyIsNotABuyTwice: the connection fails after a buy script ran.
// The engine sends the same order again, the script finds its own order,
// and exactly one order exists; the caller sees a plain success.
func TestLostReplyIsNotABuyTwice(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("reply lost after running=%v", after), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			b := backend{client: func(testing.TB) redis.UniversalClient { return rdb }}
			r := newRig(t, b, inventory.Options{})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
			f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: after}
			f.failing.Store(2)
			rdb.AddHook(f)

			rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2), "")
			if err != nil {
				t.Fatalf("Buy: %v", err)
			}
			if rc.Replayed {
				t.Error("the caller's own first success is reported as a replay")
			}
			if f.seen.Load() != 3 {
				t.Errorf("script sent %d times, want 3 (two failures, one success)", f.seen.Load())
			}
			if rem := r.remaining("s1")["A"]; rem != 3 {
				t.Errorf("remaining %d, want 3: the retry bought again", rem)
			}
			var bought int
			for _, ev := range r.events("s1") {
				if ev.Type == inventory.EventBought {
					bought++
				}
			}
			if bought != 1 {
				t.Errorf("%d bought events, want 1", bought)
			}

			// A restock retried the same way adds once.
			f.failing.Store(1)
			if n, err := r.eng.Restock(r.ctx, "s1", "A", 10); err != nil || n != 13 {
				t.Errorf("Restock = %d, %v; want 13", n, err)
			}
			// Three failures in a row exhaust the retries and surface the error.
			f.failing.Store(3)
			if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 1), ""); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Buy err = %v, want the transport error", err)
			}
		})
	}
}

// TestLostReplyIsNotACreateConflict: the connection fails after the create
// script ran. The engine sends it again; the script finds the sale this very
// call made and answers created, not "exists" (which made the service undo
// the sale in its database). Another create of the id still conflicts.
func TestLostReplyIsNotACreateConflict(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: true}
	f.failing.Store(1)
	rdb.AddHook(f)
	sale := inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}}
	if err := r.eng.CreateSale(r.ctx, sale); err != nil {
		t.Fatalf("CreateSale whose first reply was lost: %v", err)
	}
	if f.seen.Load() != 2 {
		t.Errorf("script sent %d times, want 2 (a lost reply, then the resend)", f.seen.Load())
	}
	if err := r.eng.CreateSale(r.ctx, sale); !errors.Is(err, inventory.ErrExists) {
		t.Errorf("a second create of the same id: %v", err)
	}
	created := 0
	for _, ev := range r.events("s1") {
		if ev.Type == inventory.EventCreated {
			created++
		}
	}
	if created != 1 || r.remaining("s1")["A"] != 5 {
		t.Errorf("%d created events, remaining %v", created, r.remaining("s1"))
	}
}

// TestScriptCacheFlushedMidRun: while buyers buy, the script cache of every
// node is flushed over and over. Not one buy fails; the engine reloads.
func TestScriptCacheFlushedMidRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 1_000, Items: []inventory.Item{{SKU: "A", Stock: -1}}})
		ctx, stop := context.WithCancel(r.ctx)
		var flushes atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				if err := b.flushScripts(ctx, r.rdb); err == nil {
					flushes.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 150 {
					if _, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("u%d-%d", g, i), lines("A", 1), ""); err != nil {
						failed.Add(1)
						t.Errorf("buy failed: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		stop()
		<-done
		if failed.Load() > 0 || r.eng.ScriptReloads() == 0 || flushes.Load() == 0 {
			t.Errorf("failed %d, reloads %d, flushes %d", failed.Load(), r.eng.ScriptReloads(), flushes.Load())
		}
		if st, _ := r.eng.Stock(r.ctx, "s1"); st.Items[0].Sold != 1200 {
			t.Errorf("sold %d, want 1200", st.Items[0].Sold)
		}
	})
}
