package inventory_test

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

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestRebuildOfALoneCallHoldsNoPipeline: a sale missing from Redis is
// rebuilt through the Loader, which may take long (the database is slow,
// another instance holds the rebuild lock, orders are in flight: up to
// InitTimeout). A buy of it that went to Redis as a lone call must not hold
// a pipeline while it waits, or every other sale's buys queue behind the
// rebuild: here both pipelines (the default) are taken by lone calls of two
// missing sales whose Loader is stuck, and a buy of a live sale must still
// be answered.
func TestRebuildOfALoneCallHoldsNoPipeline(t *testing.T) {
	entered := make(chan string, 2)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	loader := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
		entered <- id
		<-release
		return inventory.Snapshot{}, &inventory.NotFoundError{Kind: "sale", IDs: []string{id}}
	})
	r := newRig(t, backends[0], inventory.Options{Loader: loader})
	r.create(inventory.Sale{ID: "live", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})

	gone := make(chan error, 2)
	for i, id := range []string{"gone1", "gone2"} {
		go func() {
			_, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), "")
			gone <- err
		}()
		// One at a time: each finds a pipeline free and goes alone.
		if got := <-entered; got != id {
			t.Fatalf("loader entered for %s, want %s (%d)", got, id, i)
		}
	}
	live := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(r.ctx, "live", "u1", lines("A", 1), "")
		live <- err
	}()
	var err error
	answered := true
	select {
	case err = <-live:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		answered = false
	}
	unblock()
	if !answered {
		<-live
		t.Fatal("the live sale's buy waited for two other sales' rebuilds (both pipelines held by their Loader)")
	}
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-gone; !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("missing sale: %v, want ErrNotFound", err)
		}
	}
	if held := r.held("live"); held["u1|A"] != 1 {
		t.Errorf("live: held %v", held)
	}
}

// TestSlowClusterNodeStallsNoOtherNode: on a Redis Cluster, the sales of
// one master do not wait for another master. Before cross-sale pipelines,
// each sale's calls went on their own; now every sale of the engine shares
// Coalesce.Pipelines pipelines, and a pipeline (or a lone call) to a master
// that does not answer (paused here with CLIENT PAUSE WRITE: a fork, a long
// script, a saturated link) holds one until it times out. Two calls to the
// stuck master take both pipelines (the default), and a buy of a sale on a
// healthy master must still be answered while they wait.
func TestSlowClusterNodeStallsNoOtherNode(t *testing.T) {
	r := newRig(t, backends[2], inventory.Options{})
	cc := r.rdb.(*redis.ClusterClient)
	// A client that waits for a reply as long as the node takes: the stall
	// is the node's, not cut short by the test's short read timeout.
	rdb := clusterclient.New(&redis.ClusterOptions{Addrs: cluster.Addrs(), ReadTimeout: 2 * time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	eng := inventory.New(rdb, inventory.Options{Prefix: r.prefix})
	if err := eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	var stuck *redis.Client
	var onStuck []string
	var healthy string
	for i := 0; len(onStuck) < 2 || healthy == ""; i++ {
		id := fmt.Sprintf("s%d", i)
		node, err := cc.MasterForKey(r.ctx, r.key(id, "sale"))
		if err != nil {
			t.Fatal(err)
		}
		if stuck == nil {
			stuck = node
		}
		switch {
		case node.Options().Addr == stuck.Options().Addr && len(onStuck) < 2:
			onStuck = append(onStuck, id)
		case node.Options().Addr != stuck.Options().Addr && healthy == "":
			healthy = id
		default:
			continue
		}
		r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	}
	trips := countRoundTrips(rdb, r.prefix, "")
	if err := stuck.Do(r.ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause := func() {
		once.Do(func() {
			if err := stuck.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)

	stalled := make(chan error, 2)
	for _, id := range onStuck {
		go func() {
			_, err := eng.Buy(r.ctx, id, "u1", lines("A", 1), "")
			stalled <- err
		}()
		waitfor.Until(t, waitfor.Patience, "the buy sent to the paused master", func() error {
			if n := trips.aloneOf(id) + int(trips.pipelined.Load()); n < 1 {
				return fmt.Errorf("not sent yet")
			}
			return nil
		})
	}
	answered := make(chan error, 1)
	go func() {
		_, err := eng.Buy(r.ctx, healthy, "u1", lines("A", 1), "")
		answered <- err
	}()
	var err error
	ok := true
	select {
	case err = <-answered:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		ok = false
	}
	unpause()
	if !ok {
		err = <-answered
		t.Errorf("a buy of a sale on a healthy master waited for a paused master (both pipelines held by its calls)")
	}
	if err != nil {
		t.Error(err)
	}
	for range 2 {
		if err := <-stalled; err != nil {
			t.Errorf("a buy of the paused master, once unpaused: %v", err)
		}
	}
}

// TestPipelinedCancellationsLeakNothing: many buyers over many sales, a
// third of whom give up at random moments (queued in their sale, queued for
// a pipeline, in flight, after the reply), under -race: every call returns,
// no goroutine is left behind once all have, nothing stays queued, and each
// sale's books add up: every unit held by a buyer is one bought event, the
// remaining stock is the stock less what is held, and no buyer exceeds the
// limit. (A buyer that gave up has an unknown outcome: its buy may or may
// not have run, but exactly once if it did.)
func TestPipelinedCancellationsLeakNothing(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{MaxBatch: 4}})
	const sales, buyers, stock = 20, 40, 25
	for i := range sales {
		r.create(inventory.Sale{ID: fmt.Sprintf("s%d", i), PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
	}
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var accepted [sales]atomic.Int64
	for b := range buyers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(b), 7))
			for range 30 {
				s := rng.IntN(sales)
				ctx, cancel := context.WithCancel(r.ctx)
				if rng.IntN(3) == 0 {
					d := time.Duration(rng.IntN(400)) * time.Microsecond
					time.AfterFunc(d, cancel)
				}
				rc, err := r.eng.Buy(ctx, fmt.Sprintf("s%d", s), fmt.Sprintf("u%d", rng.IntN(10)), lines("A", 1), "")
				cancel()
				if err == nil && !rc.Replayed {
					accepted[s].Add(1)
				}
				if err != nil && ctx.Err() == nil && !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Errorf("buy: %v", err)
				}
			}
		})
	}
	wg.Wait()
	waitfor.Until(t, waitfor.Patience, "the engine's goroutines gone", func() error {
		if n := runtime.NumGoroutine(); n > base {
			return fmt.Errorf("%d goroutines, %d before the buys", n, base)
		}
		if n := r.eng.QueuedBuys(); n != 0 {
			return fmt.Errorf("%d buys still queued", n)
		}
		return nil
	})
	for i := range sales {
		id := fmt.Sprintf("s%d", i)
		held, total := r.held(id), int64(0)
		for u, n := range held {
			if n > 2 {
				t.Errorf("sale %s: %s holds %d, limit 2", id, u, n)
			}
			total += n
		}
		bought := int64(0)
		for _, ev := range r.events(id) {
			if ev.Type == inventory.EventBought {
				bought++
			}
		}
		if rem := r.remaining(id)["A"]; rem != stock-total || bought != total || total < accepted[i].Load() {
			t.Errorf("sale %s: %d remain, %d held, %d bought events, %d accepted answers; want remain %d-held, events = held >= accepted",
				id, rem, total, bought, accepted[i].Load(), stock)
		}
	}
}

// TestClientClosedUnderPipelines: the Redis client is closed (the service
// shutting down) while buys of many sales are queued and in pipelines:
// every caller returns, with its order or an error, and every buy that
// returned an order holds its unit (no accepted buy lost).
func TestClientClosedUnderPipelines(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1, MaxBatch: 3}})
	rdb := redistest.Standalone(t)
	eng := inventory.New(rdb, inventory.Options{Prefix: r.prefix, Coalesce: inventory.Coalesce{Pipelines: 1, MaxBatch: 3}})
	const sales = 10
	for i := range sales {
		r.create(inventory.Sale{ID: fmt.Sprintf("s%d", i), PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
	}
	type got struct {
		sale string
		rc   inventory.Receipt
		err  error
	}
	out := make(chan got, 400)
	var wg sync.WaitGroup
	started := make(chan struct{})
	for b := range 400 {
		wg.Go(func() {
			if b == 200 {
				close(started)
			}
			id := fmt.Sprintf("s%d", b%sales)
			rc, err := eng.Buy(r.ctx, id, fmt.Sprintf("u%d", b%7), lines("A", 1), "")
			out <- got{id, rc, err}
		})
	}
	<-started
	_ = rdb.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		t.Fatal("callers still wait after the client was closed")
	}
	close(out)
	ok := map[string]int64{}
	for g := range out {
		if g.err == nil {
			ok[g.sale]++
		}
	}
	for i := range sales {
		id := fmt.Sprintf("s%d", i)
		total := int64(0)
		for _, n := range r.held(id) {
			total += n
		}
		if total < ok[id] || r.remaining(id)["A"] != 1000-total {
			t.Errorf("sale %s: %d held, %d orders returned, %d remain", id, total, ok[id], r.remaining(id)["A"])
		}
	}
}

// TestPipelineRepliesLostOnTheWire: a real network failure, not a hook: a
// pipeline of several sales' calls reaches Redis and runs, and its replies
// are lost on the wire (faultnet drops them); go-redis reads a timeout,
// may send the pipeline again (it retries pipelines on a broken
// connection), and the engine then finishes each buy alone. Once replies
// flow again, every buyer has its own order (not a replay of another's),
// and each sale sold exactly one unit, with one bought event.
func TestPipelineRepliesLostOnTheWire(t *testing.T) {
	for _, v := range []struct {
		name    string
		retries int
	}{{"go-redis resends the pipeline", 0}, {"the engine finishes each buy alone", -1}} {
		t.Run(v.name, func(t *testing.T) { pipelineRepliesLostOnTheWire(t, v.retries) })
	}
}

func pipelineRepliesLostOnTheWire(t *testing.T, retries int) {
	srv := redistest.StartServer(t)
	proxy := faultnet.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, DialTimeout: 100 * time.Millisecond, MaxRetries: retries})
	t.Cleanup(func() { _ = rdb.Close() })
	journal := srv.Client(t)
	prefix := redistest.Prefix(t, journal)
	eng := inventory.New(rdb, inventory.Options{Prefix: prefix, Coalesce: inventory.Coalesce{Pipelines: 1}})
	ctx := context.Background()
	sales := []string{"s1", "s2", "s3", "s4", "s5"}
	for _, id := range append([]string{"s0"}, sales...) {
		if err := eng.CreateSale(ctx, inventory.Sale{ID: id, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	trips := countRoundTrips(rdb, prefix, "s0")
	type outcome struct {
		sale string
		rc   inventory.Receipt
		err  error
	}
	outcomes := make(chan outcome, len(sales)+1)
	buy := func(sale string) {
		go func() {
			rc, err := eng.Buy(ctx, sale, "u1", lines("A", 1), "")
			outcomes <- outcome{sale, rc, err}
		}()
	}
	buy("s0")
	<-trips.enter
	for i, id := range sales {
		buy(id)
		waitfor.Until(t, waitfor.Patience, "the buy queued for the next pipeline", func() error {
			if n := eng.QueuedBuys(); n != i+1 {
				return fmt.Errorf("%d queued", n)
			}
			return nil
		})
	}
	// Replies are dropped from the moment the pipeline is written, on its
	// connection (warm from s0's call) and on any new one.
	rdb.AddHook(&dropFromPipeline{proxy: proxy})
	close(trips.gate)
	// Every sale's buy ran (its event is there), its replies lost.
	waitfor.Until(t, waitfor.Patience, "every buy ran", func() error {
		for _, id := range append([]string{"s0"}, sales...) {
			n, err := journal.XLen(ctx, eng.EventsKey(id)).Result()
			if err != nil {
				return err
			}
			if n < 2 { // created, bought
				return fmt.Errorf("sale %s: %d events", id, n)
			}
		}
		return nil
	})
	proxy.DropReplies(false)
	for range len(sales) + 1 {
		o := <-outcomes
		if o.err != nil && (errors.Is(o.err, inventory.ErrLimitExceeded) || errors.Is(o.err, inventory.ErrSoldOut)) {
			t.Errorf("%s: %v; want its order (it ran once)", o.sale, o.err)
			continue
		}
		if o.err != nil {
			// The buy's retries may run out while replies are dropped: its
			// outcome is unknown to the caller, and the books below still
			// must show it exactly once.
			t.Logf("%s: %v (unknown outcome)", o.sale, o.err)
			continue
		}
		if o.rc.Order.SaleID != o.sale || o.rc.Replayed || o.sale != "s0" && !o.rc.Retried {
			t.Errorf("%s: %+v; want its own order", o.sale, o.rc)
		}
	}
	for _, id := range append([]string{"s0"}, sales...) {
		msgs, err := journal.XRange(ctx, eng.EventsKey(id), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		bought := 0
		// Through ParseEntries: a bought event is one packed field, an
		// entry of several orders one per order.
		evs, err := inventory.ParseEntries(id, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == inventory.EventBought {
				bought++
			}
		}
		st, err := eng.Stock(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if bought != 1 || st.Items[0].Remaining != 9 {
			t.Errorf("sale %s: %d bought events, %d remain; want 1 and 9", id, bought, st.Items[0].Remaining)
		}
	}
}

// dropFromPipeline makes proxy drop every reply from the first pipeline on.
type dropFromPipeline struct {
	proxy *faultnet.Proxy
	once  sync.Once
}

func (d *dropFromPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (d *dropFromPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dropFromPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		d.once.Do(func() { d.proxy.DropReplies(true) })
		return next(ctx, cmds)
	}
}
