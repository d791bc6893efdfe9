package inventory_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"errors"
	"fmt"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
)

// TestCounterPastExactIntegersIsCorrupt: a stored counter holds digits only,
// so int.lua's pattern takes it, but it is past 2^53 (Lua's doubles are no
// longer exact) or past int64 (HINCRBY refuses it). A buy reading it fails
// with ErrCorrupt before its first write; the other buys of its batch run,
// and no "bought" event goes out without its order record. On the old int
// (digits only) the batch's last write, HINCRBY on the unlimited sku's sold
// count, failed after the first buy's XADD: an event with no order, no
// deduction, and a retry that bought again.
func TestCounterPastExactIntegersIsCorrupt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, v := range []string{"9223372036854775807", "99999999999999999999", "-9223372036854775808", "9007199254740993"} {
			t.Run(v, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
					Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
				if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "s:U", v).Err(); err != nil {
					t.Fatal(err)
				}
				res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
					{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)},
					{SaleID: "s1", UserID: "u2", Lines: lines("U", 1)},
					{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},
				})
				if res[0].Err != nil || res[2].Err != nil {
					t.Errorf("the sound buys: %v, %v", res[0].Err, res[2].Err)
				}
				if !errors.Is(res[1].Err, inventory.ErrCorrupt) {
					t.Errorf("the buy of U: %+v, %v; want ErrCorrupt", res[1].Receipt, res[1].Err)
				}
				ev := r.boughtEvents("s1")
				want := map[string]int{res[0].Receipt.Order.ID: 1, res[2].Receipt.Order.ID: 1}
				if fmt.Sprint(ev) != fmt.Sprint(want) {
					t.Errorf("bought events %v, want one each for %v", ev, want)
				}
				if rem, err := r.rdb.HGet(r.ctx, r.key("s1", "sale"), "r:A").Result(); err != nil || rem != "3" {
					t.Errorf("remaining A %q, %v; want 3", rem, err)
				}
				if n := len(r.orders("s1")); n != 2 {
					t.Errorf("%d order records, want 2", n)
				}
			})
		}
	})
}

// TestRestockAndCancelCheckCountersPastExactIntegers: restock.lua and
// cancel.lua add to counters with HINCRBY after their XADD. A counter of
// digits at the edge of int64 passed the old int (digits only) and made
// the HINCRBY fail after the event and part of the counters were written.
// Now both fail with ErrCorrupt before their first write.
func TestRestockAndCancelCheckCountersPastExactIntegers(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
		Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
	rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("U", 1), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "r:A", "9223372036854775807", "s:U", "-9223372036854775808").Err(); err != nil {
		t.Fatal(err)
	}
	sale0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
	events0 := len(r.events("s1"))
	if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); !errors.Is(err, inventory.ErrCorrupt) {
		t.Errorf("Restock: %v, want ErrCorrupt", err)
	}
	if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, ""); !errors.Is(err, inventory.ErrCorrupt) {
		t.Errorf("Cancel: %v, want ErrCorrupt", err)
	}
	sale1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
	if fmt.Sprint(sale0) != fmt.Sprint(sale1) {
		t.Errorf("half-written:\n %v\n -> %v", sale0, sale1)
	}
	if n := len(r.events("s1")); n != events0 {
		t.Errorf("%d events after the failed calls, want %d", n, events0)
	}
}

// lostPipeline runs a pipeline of scripts, then loses every reply of it (once).
type lostPipeline struct{ armed atomic.Bool }

func (h *lostPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *lostPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lostPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// TestTokenAndRepeatsInALostBatch: one BuyMany batch mixes a repeat of an
// earlier order, a refused buy with a token, an accepted buy with the same
// token, a third buy with that token and a plain buy; the batch runs and
// its reply is lost, so every buy is sent again alone. The repeat replays,
// the accepted buys find their own orders (Retried, not bought twice), the
// token is spent once, by the accepted buy, and the other buys with it are
// refused. One bought event per order, the stock down by exactly the
// accepted units.
func TestTokenAndRepeatsInALostBatch(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 20, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
	first, err := r.eng.Buy(r.ctx, "s1", "u0", lines("A", 1), "k0")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	h := &lostPipeline{}
	h.armed.Store(true)
	rdb.AddHook(h)
	tok := func(b inventory.BuyRequest) inventory.BuyRequest {
		b.Token, b.TokenTTL = "T", time.Minute
		return b
	}
	res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
		tok(inventory.BuyRequest{SaleID: "s1", UserID: "u0", Lines: lines("A", 1), IdempotencyKey: "k0"}),
		tok(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 10)}),
		tok(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)}),
		tok(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k3"}),
		{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},
	})
	if h.armed.Load() {
		t.Fatal("the batch was not sent as a pipeline")
	}
	if rc := res[0]; rc.Err != nil || !rc.Receipt.Replayed || rc.Receipt.Order.ID != first.Order.ID {
		t.Errorf("the repeat: %+v, %v; want order %s replayed", rc.Receipt, rc.Err, first.Order.ID)
	}
	if rc := res[1]; !errors.Is(rc.Err, inventory.ErrSoldOut) && !errors.Is(rc.Err, inventory.ErrTokenSpent) {
		t.Errorf("the buy of 10: %v, want a refusal", rc.Err)
	}
	for _, i := range []int{2, 4} {
		if rc := res[i]; rc.Err != nil || !rc.Receipt.Retried || rc.Receipt.Replayed {
			t.Errorf("buy %d: %+v, %v; want its own order, Retried", i, rc.Receipt, rc.Err)
		}
	}
	if !errors.Is(res[3].Err, inventory.ErrTokenSpent) {
		t.Errorf("the second buy with the token: %+v, %v; want ErrTokenSpent", res[3].Receipt, res[3].Err)
	}
	ev := r.boughtEvents("s1")
	want := map[string]int{first.Order.ID: 1, res[2].Receipt.Order.ID: 1, res[4].Receipt.Order.ID: 1}
	if fmt.Sprint(ev) != fmt.Sprint(want) {
		t.Errorf("bought events %v, want %v", ev, want)
	}
	if rem := r.remaining("s1")["A"]; rem != 2 {
		t.Errorf("remaining %d, want 2", rem)
	}
	if who, err := r.rdb.Get(r.ctx, r.key("s1", "ptoken:T")).Result(); err != nil || who != "u1" {
		t.Errorf("token T spent by %q, %v; want u1", who, err)
	}
}

// TestWindowEdgesOnTheScriptClock: the script's clock at a sale's edges,
// to the µs. A sale sells from its start exactly, not a µs before (the ms
// is floored, never rounded up into the window); at its end exactly it has
// ended. Stock's status, on the process clock, agrees at each instant.
func TestWindowEdgesOnTheScriptClock(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	start := r.clock.Now().Add(time.Hour)
	end := start.Add(time.Hour)
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, StartsAt: start, EndsAt: end,
		Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	for i, c := range []struct {
		at   time.Time
		want inventory.Status
	}{
		{start.Add(-time.Microsecond), inventory.StatusUpcoming},
		{start, inventory.StatusActive},
		{end.Add(-time.Microsecond), inventory.StatusActive},
		{end, inventory.StatusEnded},
	} {
		r.clock.Set(c.at)
		_, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("u%d", i), lines("A", 1), "")
		var na *inventory.NotActiveError
		switch {
		case c.want == inventory.StatusActive && err != nil:
			t.Errorf("at %v: %v, want a sale", c.at, err)
		case c.want != inventory.StatusActive && (!errors.As(err, &na) || na.Status != c.want):
			t.Errorf("at %v: %v, want %s", c.at, err, c.want)
		}
		st, err := r.eng.Stock(r.ctx, "s1")
		if err != nil || st.Status != c.want {
			t.Errorf("Stock at %v: %s, %v; want %s", c.at, st.Status, err, c.want)
		}
	}
}

// TestOneTokenManyConcurrentBuys: twenty buys race with one purchase token
// (coalesced into batches as they come): exactly one is accepted and the
// others are ErrTokenSpent; the stock is down by one unit. Then three buys
// with one token in one batch: the first is accepted, the others see the
// token it spent earlier in the same script.
func TestOneTokenManyConcurrentBuys(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1),
				IdempotencyKey: fmt.Sprintf("k%d", i), Token: "T", TokenTTL: time.Minute})
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, inventory.ErrTokenSpent):
			t.Errorf("a buy: %v, want ErrTokenSpent", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d buys accepted with one token, want 1", ok)
	}
	if rem := r.remaining("s1")["A"]; rem != 99 {
		t.Errorf("remaining %d, want 99", rem)
	}

	// In one batch for certain: one BuyMany call of the sale.
	var reqs []inventory.BuyRequest
	for i := range 3 {
		reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: "u2", Lines: lines("A", 1),
			IdempotencyKey: fmt.Sprintf("k%d", i), Token: "T2", TokenTTL: time.Minute})
	}
	res := r.eng.BuyMany(r.ctx, reqs)
	if res[0].Err != nil || !errors.Is(res[1].Err, inventory.ErrTokenSpent) || !errors.Is(res[2].Err, inventory.ErrTokenSpent) {
		t.Errorf("one batch with one token: %v, %v, %v; want the first accepted, the others ErrTokenSpent", res[0].Err, res[1].Err, res[2].Err)
	}
}

// TestCorruptThrottleAndSaleFields: a buyer's throttle state and the
// sale's own fields hold values the engine did not write. A buy reading
// the bad throttle fails with ErrCorrupt and leaves that state as it was,
// while the other buys of its batch run; with the sale's limit garbled,
// every new buy fails with ErrCorrupt before any write, but a repeat of an
// earlier order is still answered with that order (repeats come first).
func TestCorruptThrottleAndSaleFields(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
	bucket, err := throttleOf(ratelimit.PerSecond(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	tats := r.eng.ThrottleKeys("s1", bucket, r.clock.Now())
	if err := r.rdb.HSet(r.ctx, tats[1], "u2", "12:x").Err(); err != nil {
		t.Fatal(err)
	}
	res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
		{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k1", Throttle: &bucket},
		{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), Throttle: &bucket},
		{SaleID: "s1", UserID: "u3", Lines: lines("A", 1), Throttle: &bucket},
	})
	if res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, inventory.ErrCorrupt) {
		t.Errorf("batch with a bad throttle state: %v, %v, %v; want ok, ErrCorrupt, ok", res[0].Err, res[1].Err, res[2].Err)
	}
	if v, _ := r.rdb.HGet(r.ctx, tats[1], "u2").Result(); v != "12:x" {
		t.Errorf("u2's throttle state %q, want it untouched", v)
	}
	if ev := r.boughtEvents("s1"); len(ev) != 2 {
		t.Errorf("bought events %v, want 2", ev)
	}

	if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "limit", "5.0").Err(); err != nil {
		t.Fatal(err)
	}
	res = r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
		{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k1"},
		{SaleID: "s1", UserID: "u4", Lines: lines("A", 1)},
	})
	if res[0].Err != nil || !res[0].Receipt.Replayed || !errors.Is(res[1].Err, inventory.ErrCorrupt) {
		t.Errorf("garbled limit: %+v, %v; %v; want the repeat replayed and the new buy ErrCorrupt", res[0].Receipt, res[0].Err, res[1].Err)
	}
	if ev := r.boughtEvents("s1"); len(ev) != 2 {
		t.Errorf("bought events %v, want still 2", ev)
	}
	if rem, _ := r.rdb.HGet(r.ctx, r.key("s1", "sale"), "r:A").Result(); rem != "3" {
		t.Errorf("remaining %q, want 3", rem)
	}
}
