package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// commandCount counts the Redis commands sent with a context that carries
// it, so that the order consumer's reads beside do not count. The node
// check's INFO (failover.Seller.NodeHook, once a Recheck per node, under
// whichever command comes first) is not counted: it is a cost per node and
// tick, not per sale, and how many fall in a pass depends on how long the
// pass takes (under -race here, 5 in a pass: 613 commands for 608 allowed).
type commandCount struct {
	mu sync.Mutex
	n  int
}

type commandCountKey struct{}

func (c *commandCount) see(ctx context.Context, n int) {
	if ctx.Value(commandCountKey{}) == c {
		c.mu.Lock()
		c.n += n
		c.mu.Unlock()
	}
}

func (c *commandCount) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// counted is whether cmd counts: not the node check's, and not a new
// connection's handshake (HELLO, CLIENT SETINFO, ...: sent under the
// context of the command that needed the connection, a cost per connection;
// under load a pass may open one, 610 commands for 608 allowed).
func counted(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "info", "hello", "auth", "select":
		return false
	case "cluster", "client":
		return len(cmd.Args()) < 2 || (cmd.Args()[1] != "myid" && cmd.Args()[1] != "setinfo")
	}
	return true
}

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if counted(cmd) {
			c.see(ctx, 1)
		}
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if counted(cmd) {
				n++
			}
		}
		c.see(ctx, n)
		return next(ctx, cmds)
	}
}

// TestBackgroundCostOfIdleLiveSales: with many live sales and no buys, a
// sample after the first reads about one command per sale (its stream's
// position) and counts no sale in the database; a reconcile pass visits a
// share of them (ReconcileEvery / reconcileSweep), not every one. Before,
// each sample sent six commands per sale and each pass reconciled all.
func TestBackgroundCostOfIdleLiveSales(t *testing.T) {
	const n = 200
	ctx := context.Background()
	s := startWithLiveSales(t, n)
	count := &commandCount{}
	s.rdb.AddHook(count)
	cctx := context.WithValue(ctx, commandCountKey{}, count)

	// The live sampler. The first sample reads every sale in full; wait
	// until the streams are drained so that none shows a backlog.
	st := newSamplerState()
	for deadline := time.Now().Add(waitfor.Patience); ; time.Sleep(20 * time.Millisecond) {
		v := s.sample(cctx, st, time.Second)
		backlog := int64(0)
		for _, ls := range v.Sales {
			backlog += ls.Backlog
		}
		if len(v.Sales) == n && backlog == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not catch up: %d sales sampled, backlog %d", len(v.Sales), backlog)
		}
	}
	count.take()
	before := time.Now()
	v := s.sample(cctx, st, time.Second)
	cmds := count.take()
	recounted := 0 // a sale read in full has its orders counted in the database
	for _, r := range st.read {
		if !r.at.Before(before) {
			recounted++
		}
	}
	t.Logf("a sample of %d idle live sales: %d Redis commands, %d sales counted in the database", n, cmds, recounted)
	if len(v.Sales) != n {
		t.Fatalf("%d sales in the live view, want %d", len(v.Sales), n)
	}
	// One per sale, plus the pings and the few sales due for a full read
	// (spread over recountEvery).
	if cmds > n*3/2 || recounted > n/10 {
		t.Errorf("a sample of %d idle live sales sent %d Redis commands (want at most %d) and counted %d sales in the database (want at most %d)",
			n, cmds, n*3/2, recounted, n/10)
	}

	// What moved is read again: a buy (it moves the stream), and a repair
	// by this process (it does not).
	remaining := func(v liveView) int64 {
		for _, ls := range v.Sales {
			if ls.ID == "s007" && len(ls.Items) == 1 {
				return ls.Items[0].Remaining
			}
		}
		return -2
	}
	if _, err := s.eng.Buy(ctx, "s007", "u1", []inventory.Line{{SKU: "A", Qty: 2}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := remaining(s.sample(cctx, st, time.Second)); got != 8 {
		t.Errorf("after a buy of 2 of 10, the live view shows %d remaining", got)
	}
	if err := s.rdb.HIncrBy(ctx, s.eng.Key("s007", "sale"), "r:A", 3).Err(); err != nil {
		t.Fatal(err)
	}
	s.live.dirty.Store("s007", struct{}{})
	if got := remaining(s.sample(cctx, st, time.Second)); got != 11 {
		t.Errorf("after a repair, the live view shows %d remaining, want 11", got)
	}
	if err := s.rdb.HIncrBy(ctx, s.eng.Key("s007", "sale"), "r:A", -3).Err(); err != nil {
		t.Fatal(err)
	}
	s.live.dirty.Store("s007", struct{}{})
	s.sample(cctx, st, time.Second)
	count.take()

	// The reconcile loop, as it runs every 10s.
	s.cfg.ReconcileEvery = 10 * time.Second
	rc := newReconciler(s)
	s.live.drift.Clear() // each sale reconciled publishes its drift again
	rc.pass(cctx)
	cmds = count.take()
	visits := 0
	s.live.drift.Range(func(_, _ any) bool { visits++; return true })
	budget := (n*10 + 59) / 60
	t.Logf("a reconcile pass over %d idle live sales: %d Redis commands, %d sales reconciled", n, cmds, visits)
	if visits > budget || cmds > n+budget*12 {
		t.Errorf("a reconcile pass over %d idle live sales reconciled %d (want at most %d) with %d Redis commands (want at most %d)",
			n, visits, budget, cmds, n+budget*12)
	}
}

// TestReconcileVisitsEverySaleWithinTheSweep: passes every 10s over many
// live sales, on a simulated clock: each pass takes a share of them, every
// sale is reconciled at least once per reconcileSweep, and a sale whose
// stream moved is taken first.
func TestReconcileVisitsEverySaleWithinTheSweep(t *testing.T) {
	const n, every = 50, 10 * time.Second
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	s, err := Start(ctx, Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), Addr: "127.0.0.1:0", ReconcileEvery: -1, SampleEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
	})
	ids := make([]string, n)
	live := map[string]bool{}
	for i := range ids {
		ids[i] = fmt.Sprintf("r%02d", i)
		live[ids[i]] = true
		if err := s.eng.CreateSale(ctx, inventory.Sale{ID: ids[i], PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	s.cfg.ReconcileEvery = every
	rc := newReconciler(s)
	start := time.Unix(1_000_000, 0)
	last := map[string]time.Time{}
	budget := (n*int(every/time.Second) + 59) / 60
	for k := range 20 {
		now := start.Add(time.Duration(k) * every)
		if k == 7 {
			if _, err := s.eng.Buy(ctx, "r33", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
				t.Fatal(err)
			}
		}
		visit := rc.choose(ctx, ids, live, now)
		if len(visit) > budget+1 {
			t.Errorf("pass %d visits %d sales, budget %d", k, len(visit), budget)
		}
		if k == 7 {
			if _, ok := visit["r33"]; !ok {
				t.Errorf("pass %d: the sale whose stream moved is not visited", k)
			}
		}
		for id, mark := range visit {
			rc.visited[id] = visited{at: now, seen: rc.visited[id].seen, mark: mark}
			last[id] = now
		}
		for _, id := range ids {
			from, ok := last[id]
			if !ok {
				from = start
			}
			if now.Sub(from) > reconcileSweep {
				t.Fatalf("pass %d: sale %s last reconciled %v ago, more than %v", k, id, now.Sub(from), reconcileSweep)
			}
		}
	}
}

// TestSampleReadsABoundedShareOfChangedSales: when more sales changed than
// a sample reads in full (fullReadsPerSample, 20 here), a sample reads
// only that many, the ones read longest ago first, and the others keep
// their last sample; the next samples read the rest, so every change is
// shown within a few samples. Without the bound, the first sample after a
// buy in each of 60 sales reads all 60.
func TestSampleReadsABoundedShareOfChangedSales(t *testing.T) {
	const n, budget = 60, 20
	defer func(was int) { fullReadsPerSample = was }(fullReadsPerSample)
	fullReadsPerSample = budget
	ctx := context.Background()
	s := startWithLiveSales(t, n)
	// Every sale sampled once (the first reads are not bounded).
	st := newSamplerState()
	if v := s.sample(ctx, st, time.Second); len(v.Sales) != n {
		t.Fatalf("%d sales in the first sample, want %d", len(v.Sales), n)
	}
	// A buy in each, stored by the consumer: each sale's stream moved.
	var orders []string
	for i := range n {
		rc, err := s.eng.Buy(ctx, fmt.Sprintf("s%03d", i), "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, rc.Order.ID)
	}
	waitfor.Until(t, waitfor.Patience, "every order stored", func() error {
		for _, id := range orders {
			if o, err := s.db.Order(ctx, id); err != nil || o.Status != inventory.OrderConfirmed {
				return fmt.Errorf("order %s: %+v, %v", id, o, err)
			}
		}
		return nil
	})
	for round := 1; ; round++ {
		before := time.Now()
		v := s.sample(ctx, st, time.Second)
		read, shown := 0, 0
		for _, id := range slices.Collect(maps.Keys(st.read)) {
			if !st.read[id].at.Before(before) {
				read++
			}
		}
		for _, ls := range v.Sales {
			if len(ls.Items) == 1 && ls.Items[0].Remaining == 9 {
				shown++
			}
		}
		if len(v.Sales) != n || read > budget {
			t.Fatalf("sample %d after the buys: %d sales listed (want %d), %d read in full (want at most %d)", round, len(v.Sales), n, read, budget)
		}
		if shown == n {
			break
		}
		if round == 10 {
			t.Fatalf("after %d samples, %d of %d sales show their buy", round, shown, n)
		}
	}
}

// startWithLiveSales starts a service whose sampler and reconcile loop run
// only by hand, on a redis-server of the test's own, with n live sales
// s000, s001... (item A, stock 10, limit 2), and waits until it lists them
// all as live.
func startWithLiveSales(t *testing.T, n int) *Service {
	t.Helper()
	ctx := context.Background()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	for i := range n {
		sale := inventory.Sale{ID: fmt.Sprintf("s%03d", i), PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := s.eng.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, waitfor.Patience, "every sale live", func() error {
		if ids, err := s.liveSaleIDs(ctx); err != nil || len(ids) != n {
			return fmt.Errorf("%d live sales, want %d (%v)", len(ids), n, err)
		}
		return nil
	})
	return s
}

// startForTest starts a service with cfg and shuts it down when the test
// ends.
func startForTest(t *testing.T, cfg Config) *Service {
	t.Helper()
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
	})
	return s
}

// startSampledByHand starts a service on a redis-server of the test's own
// and PostgreSQL, its consumer tuned by pipe, its sampler and reconcile
// loop run only by hand.
func startSampledByHand(t *testing.T, pipe pipeline.Options) *Service {
	t.Helper()
	rdb := redistest.Standalone(t)
	return startForTest(t, Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbtest.PostgresURL(t),
		Addr: "127.0.0.1:0", ReconcileEvery: -1, SampleEvery: -1, Pipeline: pipe})
}
