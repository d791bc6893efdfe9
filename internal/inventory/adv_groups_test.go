package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial tests of the orders hash by group (order ids of one buy.lua
// call share a field). Each fails if an order is lost or duplicated, a
// resend buys twice, or an unsure buy is named under an id it was not sent
// under.

// advOrdersOf returns, per user, the ids of their orders in Redis.
func advOrdersOf(r *rig, sale string) map[string][]string {
	r.t.Helper()
	out := map[string][]string{}
	for id, rec := range r.orders(sale) {
		if strings.HasSuffix(id, "?bad") {
			r.t.Errorf("the orders hash holds a bad group: %s = %q", id, rec)
			continue
		}
		parts := strings.SplitN(rec, "|", 5)
		if len(parts) != 5 {
			r.t.Errorf("order %s: record %q", id, rec)
			continue
		}
		out[parts[1]] = append(out[parts[1]], id)
	}
	return out
}

// advCheckUnsure checks one buyer's outcome against Redis: an acknowledged
// buy's order is the buyer's and their only one; a buy whose outcome is
// unknown made no order, or made exactly the one its receipt names; a
// refused buy made none.
func advCheckUnsure(t *testing.T, user string, rc inventory.Receipt, err error, have []string) {
	t.Helper()
	switch {
	case err == nil:
		if len(have) != 1 || have[0] != rc.Order.ID {
			t.Errorf("%s: acknowledged order %s, Redis holds %v", user, rc.Order.ID, have)
		}
	case inventory.OutcomeUnknown(err):
		if len(have) > 1 || len(have) == 1 && have[0] != rc.Order.ID {
			t.Errorf("%s: unsure (%v) under %q, but Redis holds %v: handed over under the wrong id", user, err, rc.Order.ID, have)
		}
	default:
		if len(have) != 0 {
			t.Errorf("%s: refused (%v), but Redis holds %v", user, err, have)
		}
	}
}

// advSingle is a client on the local standalone Redis without go-redis's
// own retries, for hooks that lose replies.
func advSingle(t *testing.T) (*redis.Client, backend) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}
}

// TestAdvGroupsCoalescedLostReplies: concurrent (coalesced) buys, with
// the replies of several buy.lua calls lost after they ran, resends'
// included. Every buyer (limit 1) ends with at most one order; an
// acknowledged one is theirs; an unsure one is named by its receipt; the
// stock matches the orders; no group is malformed.
func TestAdvGroupsCoalescedLostReplies(t *testing.T) {
	for _, lost := range []int32{1, 3, 6} {
		t.Run(fmt.Sprintf("lost=%d", lost), func(t *testing.T) {
			rdb, b := advSingle(t)
			r := newRig(t, b, inventory.Options{})
			const n, stock = 60, 1000
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
			if _, err := r.eng.Buy(r.ctx, "s1", "w0", lines("A", 1), ""); err != nil {
				t.Fatal(err)
			}
			f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: true}
			f.failing.Store(lost)
			rdb.AddHook(f)
			rcs, errs := make([]inventory.Receipt, n), make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
					if err != nil {
						errs[i] = err
						return
					}
					if i%2 == 0 {
						c = c.WithNewOrderID("s1") // the failover seller's way
					}
					rcs[i], errs[i] = r.eng.BuyChecked(r.ctx, c)
				}()
			}
			close(start)
			wg.Wait()
			have := advOrdersOf(r, "s1")
			total := 0
			for i := range n {
				u := fmt.Sprintf("u%d", i)
				advCheckUnsure(t, u, rcs[i], errs[i], have[u])
				total += len(have[u])
			}
			if rem := r.remaining("s1")["A"]; rem != int64(stock-1-total) {
				t.Errorf("remaining %d with %d orders: want %d", rem, total+1, stock-1-total)
			}
			for id, k := range r.boughtEvents("s1") {
				if k != 1 {
					t.Errorf("order %s: %d bought events", id, k)
				}
			}
		})
	}
}

// cancelAfterRun runs a matching script, then cancels cancel and loses the
// reply: the callers' ctx ends while the call is in flight, after it ran.
type cancelAfterRun struct {
	match  func(redis.Cmder) bool
	armed  atomic.Int32
	cancel context.CancelFunc
	hold   chan struct{} // if set, the call waits for it before running
	held   chan struct{} // if set, closed once a call waits for hold
}

func (h *cancelAfterRun) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelAfterRun) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.match(cmd) || h.armed.Add(-1) < 0 {
			return next(ctx, cmd)
		}
		if h.hold != nil {
			if h.held != nil {
				close(h.held)
			}
			<-h.hold
		}
		_ = next(ctx, cmd)
		h.cancel()
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}
func (h *cancelAfterRun) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAdvGroupsCtxEndsInFlight: a crowd's ctx ends while their call is in
// flight, after it ran (reply lost). Each receipt names the order the buy
// made: never another id, for engine-chosen and WithNewOrderID ids alike.
func TestAdvGroupsCtxEndsInFlight(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			rdb, b := advSingle(t)
			r := newRig(t, b, inventory.Options{})
			const n = 40
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
			if _, err := r.eng.Buy(r.ctx, "s1", "w0", lines("A", 1), ""); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			h := &cancelAfterRun{match: scriptWithKey(r.key("s1", "sale")), cancel: cancel}
			h.armed.Store(int32(1 + round))
			rdb.AddHook(h)
			rcs, errs := make([]inventory.Receipt, n), make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rcs[i], errs[i] = advBuyOne(ctx, r, i, i%2 == 1)
				}()
			}
			wg.Wait()
			cancel()
			have := advOrdersOf(r, "s1")
			for i := range n {
				u := fmt.Sprintf("u%d", i)
				advCheckUnsure(t, u, rcs[i], errs[i], have[u])
			}
		})
	}
}

// TestAdvGroupsCtxEndsWhileQueued: the sale's first call is held in
// flight; buyers queue behind it and their ctx ends while they wait (some
// before, some after the next call takes them). Whatever each buy did, the
// order it made, if any, is the one its receipt names.
func TestAdvGroupsCtxEndsWhileQueued(t *testing.T) {
	rdb, b := advSingle(t)
	// One call of the sale in flight at a time: while the held call is,
	// every other buy waits in the queue (a second call in flight would
	// send buys whose callers then give up: their outcome is unknown).
	r := newRig(t, b, inventory.Options{Coalesce: inventory.Coalesce{InFlight: 1}})
	const n = 50
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
	if _, err := r.eng.Buy(r.ctx, "s1", "w0", lines("A", 1), ""); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	first, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	held := make(chan struct{})
	h := &cancelAfterRun{match: scriptWithKey(r.key("s1", "sale")), cancel: func() {}, hold: hold, held: held}
	h.armed.Store(1)
	rdb.AddHook(h)
	done := make(chan struct{})
	go func() { // the held call
		defer close(done)
		_, _ = r.eng.Buy(first, "s1", "held", lines("A", 1), "")
	}()
	<-held // the held call is in flight: the crowd below queues behind it
	rcs, errs := make([]inventory.Receipt, n), make([]error, n)
	ctxs := make([]context.CancelFunc, n)
	var wg sync.WaitGroup
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			rcs[i], errs[i] = advBuyOne(ctx, r, i, i%3 == 0)
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them queue (the checks below hold either way)
	for i := 0; i < n; i += 2 {
		ctxs[i]() // given up while queued
	}
	close(hold)
	for i := 1; i < n; i += 2 {
		ctxs[i]() // given up queued, taken or in flight
	}
	wg.Wait()
	<-done
	have := advOrdersOf(r, "s1")
	for i := range n {
		u := fmt.Sprintf("u%d", i)
		advCheckUnsure(t, u, rcs[i], errs[i], have[u])
		if errs[i] != nil && i%2 == 0 && len(have[u]) != 0 {
			t.Errorf("%s gave up while queued, yet bought %v", u, have[u])
		}
	}
}

// TestAdvGroupsReplaysAcrossGroups: idempotency-key repeats whose orders
// are in other calls' groups, batched with new buys and a repeat of a
// repeat, in a call whose reply is lost: each repeat finds its first
// order, the new buys find their own on the resend.
func TestAdvGroupsReplaysAcrossGroups(t *testing.T) {
	rdb, b := advSingle(t)
	r := newRig(t, b, inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	first := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
		{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k1"},
		{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), IdempotencyKey: "k2"},
		{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},
	})
	second, err := r.eng.Buy(r.ctx, "s1", "u4", lines("A", 2), "k4")
	if err != nil {
		t.Fatal(err)
	}
	for _, br := range first {
		if br.Err != nil {
			t.Fatal(br.Err)
		}
	}
	h := &lostPipeline{}
	h.armed.Store(true)
	rdb.AddHook(h)
	res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
		{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), IdempotencyKey: "k2"},
		{SaleID: "s1", UserID: "u5", Lines: lines("A", 1), IdempotencyKey: "k5"},
		{SaleID: "s1", UserID: "u4", Lines: lines("A", 2), IdempotencyKey: "k4"},
		{SaleID: "s1", UserID: "u5", Lines: lines("A", 1), IdempotencyKey: "k5"},
		{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k1"},
		{SaleID: "s1", UserID: "u6", Lines: lines("A", 1)},
	})
	if h.armed.Load() {
		t.Fatal("the batch was not lost")
	}
	want := []string{first[1].Receipt.Order.ID, "", second.Order.ID, "", first[0].Receipt.Order.ID, ""}
	for i, br := range res {
		if br.Err != nil {
			t.Fatalf("buy %d: %v", i, br.Err)
		}
		if want[i] != "" && br.Receipt.Order.ID != want[i] {
			t.Errorf("repeat %d: order %s, want %s", i, br.Receipt.Order.ID, want[i])
		}
	}
	if res[1].Receipt.Order.ID != res[3].Receipt.Order.ID {
		t.Errorf("u5's key k5 made two orders: %s, %s", res[1].Receipt.Order.ID, res[3].Receipt.Order.ID)
	}
	have := advOrdersOf(r, "s1")
	for u, ids := range have {
		if len(ids) != 1 {
			t.Errorf("%s has orders %v, want one", u, ids)
		}
	}
	if rem := r.remaining("s1")["A"]; rem != 100-7 {
		t.Errorf("remaining %d, want 93", rem)
	}
}

// TestAdvGroupsKeysThatLookLikeRecords: idempotency keys holding '|' and
// text that looks like an order id or a record line, in one group with
// plain orders: every order is found, cancelled and repeated on its own,
// and UnitsInOrders counts each once. On every backend.
func TestAdvGroupsKeysThatLookLikeRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		probe, err := r.eng.Buy(r.ctx, "s1", "p0", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		g := inventory.OrderGroup(probe.Order.ID)
		keys := []string{
			"|" + probe.Order.ID + "|p|u9|1|A=9|",
			g + "0001|p|u2|1|A=1|",
			"a|b|c|d|e",
			"||||",
		}
		reqs := []inventory.BuyRequest{}
		for i, k := range keys {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1), IdempotencyKey: k})
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("v%d", i), Lines: lines("A", 2)})
		}
		res := r.eng.BuyMany(r.ctx, reqs)
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
			o, err := r.eng.Order(r.ctx, br.Receipt.Order.ID)
			if err != nil || o.UserID != reqs[i].UserID || o.IdempotencyKey != reqs[i].IdempotencyKey || o.Items[0].Qty != reqs[i].Lines[0].Qty {
				t.Errorf("Order(%s) = %+v, %v; want %+v", br.Receipt.Order.ID, o, err, reqs[i])
			}
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err != nil || units["A"] != 1+4+8 {
			t.Errorf("UnitsInOrders = %v, %v; want A 13", units, err)
		}
		// Cancel the plain orders; the keyed ones stay pending and repeat.
		for i := 1; i < len(res); i += 2 {
			if _, err := r.eng.Cancel(r.ctx, res[i].Receipt.Order.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < len(res); i += 2 {
			rc, err := r.eng.BuyWith(r.ctx, reqs[i])
			if err != nil || !rc.Replayed || rc.Order.ID != res[i].Receipt.Order.ID || rc.Order.Status != inventory.OrderPending {
				t.Errorf("repeat of %q: %+v, %v; want order %s pending", reqs[i].IdempotencyKey, rc, err, res[i].Receipt.Order.ID)
			}
		}
		if units, err := r.eng.UnitsInOrders(r.ctx, "s1"); err != nil || units["A"] != 1+4 {
			t.Errorf("UnitsInOrders after the cancels = %v, %v; want A 5", units, err)
		}
		if rem := r.remaining("s1")["A"]; rem != 95 {
			t.Errorf("remaining %d, want 95", rem)
		}
	})
}

// TestAdvGroupsBigGroupPayCancelExpire: one call of 128 orders (one
// group); a third paid, a third cancelled, the rest expired: each record
// changes on its own, every unit not paid comes back, exactly.
func TestAdvGroupsBigGroupPayCancelExpire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 3, PaymentTimeout: time.Minute,
			Items: []inventory.Item{{SKU: "A", Stock: 1000}, {SKU: "B", Stock: -1}}})
		var reqs []inventory.BuyRequest
		for i := range 128 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1+i%3, "B", 1)})
		}
		res := r.eng.BuyMany(r.ctx, reqs)
		groups := map[string]bool{}
		paidUnits := int64(0)
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
			groups[inventory.OrderGroup(br.Receipt.Order.ID)] = true
		}
		if len(groups) != 1 {
			t.Errorf("%d groups for one call", len(groups))
		}
		for i, br := range res {
			id := br.Receipt.Order.ID
			switch i % 3 {
			case 0:
				if _, _, err := r.eng.Pay(r.ctx, id, reqs[i].UserID, "ref"); err != nil {
					t.Fatalf("Pay %d: %v", i, err)
				}
				paidUnits += reqs[i].Lines[0].Qty
			case 1:
				if _, err := r.eng.Cancel(r.ctx, id, reqs[i].UserID); err != nil {
					t.Fatalf("Cancel %d: %v", i, err)
				}
			}
		}
		r.clock.Set(r.clock.Now().Add(2 * time.Minute))
		var expired []string
		for {
			got, more, err := r.eng.ExpireDue(r.ctx, "s1", 7)
			if err != nil {
				t.Fatal(err)
			}
			expired = append(expired, got...)
			if !more {
				break
			}
		}
		if len(expired) != 42 {
			t.Errorf("expired %d orders, want 42", len(expired))
		}
		for i, br := range res {
			o, err := r.eng.Payment(r.ctx, br.Receipt.Order.ID)
			if err != nil {
				t.Fatalf("Payment %d: %v", i, err)
			}
			wantCancelled := i%3 != 0
			if (o.Status == inventory.OrderCancelled) != wantCancelled || o.UserID != reqs[i].UserID {
				t.Errorf("order %d: %+v; cancelled want %v", i, o, wantCancelled)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != 1000-paidUnits {
			t.Errorf("remaining A %d, want %d", rem, 1000-paidUnits)
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err != nil || units["A"] != paidUnits || units["B"] != 43 {
			t.Errorf("UnitsInOrders = %v, %v; want A %d, B 43", units, err, paidUnits)
		}
		if n := len(r.orders("s1")); n != 128 {
			t.Errorf("%d records, want 128", n)
		}
	})
}

// TestAdvGroupsRebuildThenResend: a sale bought in coalesced calls is lost
// and rebuilt from the system of record; then each buy is sent again under
// its id (a resend whose first reply was lost) and each keyed buy
// repeated: all find their orders, nothing is bought twice.
func TestAdvGroupsRebuildThenResend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 500}}})
		var reqs []inventory.BuyRequest
		for i := range 90 {
			k := ""
			if i%2 == 0 {
				k = fmt.Sprintf("k%d", i)
			}
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1+i%2), IdempotencyKey: k})
		}
		res := r.eng.BuyMany(r.ctx, reqs[:50])
		res = append(res, r.eng.BuyMany(r.ctx, reqs[50:])...)
		if _, err := r.eng.Cancel(r.ctx, res[3].Receipt.Order.ID, ""); err != nil {
			t.Fatal(err)
		}
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
		}
		before := r.remaining("s1")["A"]
		db.catchUp(r, "s1")
		r.lose("s1", false)
		for i, br := range res {
			resend := reqs[i]
			resend.OrderID = br.Receipt.Order.ID
			rc, err := r.eng.BuyWith(r.ctx, resend)
			if err != nil || rc.Order.ID != br.Receipt.Order.ID {
				t.Errorf("resend %d after the rebuild: %+v, %v; want order %s", i, rc, err, br.Receipt.Order.ID)
			}
			if reqs[i].IdempotencyKey != "" {
				rc, err := r.eng.BuyWith(r.ctx, reqs[i])
				if err != nil || !rc.Replayed || rc.Order.ID != br.Receipt.Order.ID {
					t.Errorf("repeat %d after the rebuild: %+v, %v", i, rc, err)
				}
			}
		}
		if rem := r.remaining("s1")["A"]; rem != before {
			t.Errorf("remaining %d after the resends, want %d: a resend bought again", rem, before)
		}
		if o, err := r.eng.Order(r.ctx, res[3].Receipt.Order.ID); err != nil || o.Status != inventory.OrderCancelled {
			t.Errorf("the cancelled order after the rebuild: %+v, %v", o, err)
		}
		for id, rec := range r.orders("s1") {
			if strings.HasSuffix(id, "?bad") {
				t.Errorf("bad group after the rebuild: %s %q", id, rec)
			}
		}
	})
}

// TestAdvGroupsRepairCorruptGroups: groups Redis got wrong — an order
// dropped from a big group, a line of another group, a duplicated id with
// another record, garbage appended — are rewritten from the system of
// record; afterwards every order is found, resends find their own, and a
// second repair changes nothing.
func TestAdvGroupsRepairCorruptGroups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 500}}})
		var reqs []inventory.BuyRequest
		for i := range 40 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
		}
		res := append(r.eng.BuyMany(r.ctx, reqs[:20]), r.eng.BuyMany(r.ctx, reqs[20:])...)
		for i, br := range res {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
		}
		db.consume(r, "s1")
		good := r.orders("s1")
		key := r.key("s1", "orders")
		g1, g2 := inventory.OrderGroup(res[0].Receipt.Order.ID), inventory.OrderGroup(res[20].Receipt.Order.ID)
		if g1 == g2 {
			t.Fatal("two calls, one group")
		}
		r.dropOrder("s1", res[7].Receipt.Order.ID)
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 1).Err())
		v1, _ := r.rdb.HGet(r.ctx, key, g1).Result()
		mustDo(t, r.rdb.HSet(r.ctx, key, g1, v1+"\n"+res[25].Receipt.Order.ID+"|p|u25|1|A=1|").Err()) // a line of g2 in g1
		v2, _ := r.rdb.HGet(r.ctx, key, g2).Result()
		dup := res[22].Receipt.Order.ID + "|c|u22|1|A=1|"
		mustDo(t, r.rdb.HSet(r.ctx, key, g2, dup+"\n"+v2+"\ngarbage").Err()) // a duplicated id first, garbage last
		// The duplicated id: the scripts and Order read the same (first) record.
		o, err := r.eng.Order(r.ctx, res[22].Receipt.Order.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, res[22].Receipt.Order.ID, ""); err != nil {
			t.Fatal(err)
		}
		if o.Status != inventory.OrderCancelled {
			t.Errorf("Order read the second of a duplicated id: %+v", o)
		}
		units, err := r.eng.UnitsInOrders(r.ctx, "s1")
		if err == nil && units["A"] == 39 {
			t.Errorf("UnitsInOrders = %v over corrupt groups, as if nothing were wrong", units)
		}

		// The cancel found the duplicated line (cancelled already) and
		// changed nothing; the database holds order 22 pending.
		db.consume(r, "s1")
		if _, err := r.eng.Repair(r.ctx, "s1", db); err != nil {
			t.Fatalf("Repair: %v", err)
		}
		after := r.orders("s1")
		if len(after) != len(good) {
			t.Errorf("%d records after the repair, want %d", len(after), len(good))
		}
		for id, rec := range good {
			if after[id] != rec {
				t.Errorf("order %s after the repair: %q, want %q", id, after[id], rec)
			}
		}
		got, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil || len(got.Changes) != 0 {
			t.Errorf("a second repair: %+v, %v; want no change", got, err)
		}
		remBefore := r.remaining("s1")["A"]
		for i, br := range res {
			resend := reqs[i]
			resend.OrderID = br.Receipt.Order.ID
			rc, err := r.eng.BuyWith(r.ctx, resend)
			if err != nil || rc.Order.ID != br.Receipt.Order.ID || !rc.Retried {
				t.Errorf("resend %d after the repair: %+v, %v", i, rc, err)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != remBefore || rem != 460 {
			t.Errorf("remaining %d (before the resends %d), want 460", rem, remBefore)
		}
	})
}

// TestAdvGroupsGarbageGroupIsNoOrder: a field of the orders hash whose
// value is no group's orders, but reads as one record ("p|user|ms|lines|"
// with no id), is corrupt: UnitsInOrders must not count it as sold.
func TestAdvGroupsGarbageGroupIsNoOrder(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), "")
	if err != nil {
		t.Fatal(err)
	}
	// A field no engine wrote, whose whole value reads as a record.
	mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup(rc.Order.ID)+"Z", "p|u7|1|A=3|").Err())
	units, err := r.eng.UnitsInOrders(r.ctx, "s1")
	if err == nil && units["A"] != 1 {
		t.Errorf("UnitsInOrders = %v: a corrupt group's value counted as an order (want ErrCorrupt or A 1)", units)
	}
	if err != nil && !errors.Is(err, inventory.ErrCorrupt) {
		t.Errorf("UnitsInOrders: %v", err)
	}
}

// advBuyOne buys one unit of s1's A as user u<i>, under an id the engine
// chooses, or (withNew) one chosen first with WithNewOrderID.
func advBuyOne(ctx context.Context, r *rig, i int, withNew bool) (inventory.Receipt, error) {
	c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
	if err != nil {
		return inventory.Receipt{}, err
	}
	if withNew {
		c = c.WithNewOrderID("s1")
	}
	return r.eng.BuyChecked(ctx, c)
}
