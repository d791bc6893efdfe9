package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestCoalescerUnderCrowdsAndGiveUps: many sales at once, each with a crowd
// or a trickle, under every shape of Coalesce (Overlap 1, small, larger
// than MaxBatch; InFlight 1; MaxBatch 1), while a share of the buyers give
// up (their ctx ends) at random points, queued or in flight. Every buy
// returns; the books balance: stock + sold == stocked, nobody over the
// limit, every accepted buy is exactly one bought event, every buy refused
// by Redis none, and a buy whose ctx ended is at most one (its outcome is
// unknown once sent).
func TestCoalescerUnderCrowdsAndGiveUps(t *testing.T) {
	shapes := []inventory.Coalesce{
		{},
		{Overlap: 1},
		{Overlap: 2, MaxBatch: 3},
		{Overlap: 500, MaxBatch: 4},
		{Overlap: -1, InFlight: 1},
		{MaxBatch: 1},
		{Overlap: 3, InFlight: 4, Pipelines: 1},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for i, co := range shapes {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				coalescerCrowd(t, b, co)
			})
		}
	})
}

func coalescerCrowd(t *testing.T, b backend, co inventory.Coalesce) {
	r := newRig(t, b, inventory.Options{Coalesce: co, SoldOut: inventory.SoldOut{Off: true}})
	// Every node's script cache is emptied now and then: calls and
	// pipelines meet NOSCRIPT, several sales of a node at once.
	stop, flushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond):
				if err := b.flushScripts(r.ctx, r.rdb); err != nil {
					t.Errorf("flush scripts: %v", err)
				}
			}
		}
	}()
	crowd(t, r, r.eng, func() { close(stop); <-flushed })
}

// crowd creates sales through r and runs 1,200 buyers of them through eng
// (half of them on one hot sale, a quarter giving up after up to 3 ms),
// calls settle, and checks the books through r.
func crowd(t *testing.T, r *rig, eng *inventory.Engine, settle func()) {
	const sales, stock, limit = 24, 150, 2
	for s := range sales {
		r.create(inventory.Sale{ID: fmt.Sprint("s", s), PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
	}
	type outcome struct {
		sale, user, order string
		qty               int64
		err               error
	}
	var (
		mu   sync.Mutex
		outs []outcome
		wg   sync.WaitGroup
	)
	for g := range 1200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(g/100) * 50 * time.Millisecond) // 12 waves of 100 over 600 ms
			sale := fmt.Sprint("s", g%sales)
			if g%sales >= sales/2 {
				sale = "s0" // half the crowd on one hot sale
			}
			user := fmt.Sprint("u", rand.IntN(150))
			qty := 1 + rand.Int64N(2)
			order := inventory.NewOrderID(sale)
			ctx := r.ctx
			if rand.IntN(4) == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
				defer cancel()
			}
			rc, err := eng.BuyWith(ctx, inventory.BuyRequest{SaleID: sale, UserID: user, OrderID: order,
				Lines: []inventory.Line{{SKU: "A", Qty: qty}}})
			if err == nil && rc.Order.ID != order {
				err = fmt.Errorf("receipt names order %s, sent %s", rc.Order.ID, order)
			}
			mu.Lock()
			outs = append(outs, outcome{sale, user, order, qty, err})
			mu.Unlock()
		}()
	}
	wg.Wait()
	settle()
	kinds := map[string]int{}
	for _, o := range outs {
		kinds[fmt.Sprintf("%T", o.err)]++
	}
	t.Logf("outcomes by error type: %v", kinds)

	bySale := map[string]map[string]outcome{}
	for _, o := range outs {
		if bySale[o.sale] == nil {
			bySale[o.sale] = map[string]outcome{}
		}
		bySale[o.sale][o.order] = o
		if o.err != nil && !unknownOutcome(o.err) && !errors.Is(o.err, inventory.ErrSoldOut) && !errors.Is(o.err, inventory.ErrLimitExceeded) {
			t.Errorf("%s %s: %v", o.sale, o.user, o.err)
		}
	}
	for s := range sales {
		sale := fmt.Sprint("s", s)
		st, err := r.eng.Stock(r.ctx, sale)
		if err != nil {
			t.Fatal(err)
		}
		it := st.Items[0]
		if it.Remaining+it.Sold != stock || it.Remaining < 0 {
			t.Errorf("%s: remaining %d + sold %d != %d", sale, it.Remaining, it.Sold, stock)
		}
		evSold := int64(0)
		seen := map[string]bool{}
		perUser := map[string]int64{}
		for _, ev := range r.events(sale) {
			if ev.Type != inventory.EventBought {
				continue
			}
			id := ev.Order.ID
			if seen[id] {
				t.Errorf("%s: order %s has two bought events", sale, id)
			}
			seen[id] = true
			o, ok := bySale[sale][id]
			switch {
			case !ok:
				t.Errorf("%s: event for order %s nobody sent", sale, id)
			case o.err != nil && !unknownOutcome(o.err):
				t.Errorf("%s: order %s was answered %v, yet sold", sale, id, o.err)
			}
			evSold += ev.Order.Items[0].Qty
			perUser[ev.Order.UserID] += ev.Order.Items[0].Qty
		}
		for id, o := range bySale[sale] {
			if o.err == nil && !seen[id] {
				t.Errorf("%s: accepted order %s has no event", sale, id)
			}
		}
		if evSold != it.Sold {
			t.Errorf("%s: events sold %d, Redis says %d", sale, evSold, it.Sold)
		}
		for u, n := range perUser {
			if n > limit {
				t.Errorf("%s: %s holds %d, limit %d", sale, u, n, limit)
			}
		}
	}
}

// TestCoalescerThroughAFaultyWire: the crowd of
// TestCoalescerUnderCrowdsAndGiveUps through a proxy that, while it runs,
// holds replies, drops them, cuts every connection and empties Redis's
// script cache, in turns. Every buy
// returns, and the books balance: a buy refused by Redis sold nothing, an
// accepted one exactly once; one whose outcome the caller could not learn
// (a transport error, its ctx) at most once.
func TestCoalescerThroughAFaultyWire(t *testing.T) {
	for i, co := range []inventory.Coalesce{{}, {Overlap: 1}, {Overlap: 2, MaxBatch: 3, Pipelines: 1}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) { faultyWireCrowd(t, co, 0) })
	}
}

// faultyWireCrowd runs crowd with an engine of coalescing co through a
// proxy that, while it runs, holds replies, drops them, cuts every
// connection and empties Redis's script cache, in turns; maxRetries is
// go-redis's (0: its default; -1: none, so that a failed call reaches the
// coalescer, which finishes its buys alone).
func faultyWireCrowd(t *testing.T, co inventory.Coalesce, maxRetries int) {
	srv := redistest.StartServer(t)
	proxy := faultnet.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 150 * time.Millisecond,
		WriteTimeout: 150 * time.Millisecond, DialTimeout: 150 * time.Millisecond, MaxRetries: maxRetries})
	t.Cleanup(func() { _ = rdb.Close() })
	journal := srv.Client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: journal, prefix: redistest.Prefix(t, journal), clock: newTestClock()}
	r.eng = inventory.New(journal, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock})
	faulty := inventory.New(rdb, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock,
		Coalesce: co, SoldOut: inventory.SoldOut{Off: true}})
	stop := make(chan struct{})
	chaos := make(chan struct{})
	go func() {
		defer close(chaos)
		for k := 0; ; k++ {
			select {
			case <-stop:
				proxy.HoldReplies(false)
				proxy.DropReplies(false)
				proxy.Restore()
				return
			case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
			}
			switch k % 8 {
			case 0:
				proxy.HoldReplies(true)
			case 1:
				proxy.HoldReplies(false)
			case 2:
				proxy.DropReplies(true)
			case 3:
				proxy.DropReplies(false)
			case 4:
				proxy.Cut()
			case 5:
				proxy.Restore()
			case 6, 7:
				_ = journal.ScriptFlush(context.Background()).Err() // NOSCRIPT for the calls after
			}
		}
	}()
	crowd(t, r, faulty, func() { close(stop); <-chaos })
}

// unknownOutcome: a buy that failed so may or may not have run (its ctx
// ended, or the connection failed), not one Redis refused.
func unknownOutcome(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
