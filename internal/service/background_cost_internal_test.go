package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	mu    sync.Mutex
	n     int
	calls map[string]int // by name, as INFO commandstats names them ("xinfo|stream")
}

type commandCountKey struct{}

func (c *commandCount) see(ctx context.Context, cmds ...redis.Cmder) {
	if ctx.Value(commandCountKey{}) != c {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	for _, cmd := range cmds {
		if counted(cmd) {
			c.n++
			c.calls[commandName(cmd)]++
		}
	}
}

// take returns the commands counted since the last take.
func (c *commandCount) take() int {
	n, _ := c.takeCalls()
	return n
}

// takeCalls returns the commands counted since the last take, and their
// calls by name.
func (c *commandCount) takeCalls() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, calls := c.n, c.calls
	c.n, c.calls = 0, nil
	return n, calls
}

// commandName is cmd's name as INFO commandstats says it: "hgetall",
// "xinfo|stream".
func commandName(cmd redis.Cmder) string {
	if args := cmd.Args(); cmd.Name() == "xinfo" && len(args) > 1 {
		return "xinfo|" + strings.ToLower(fmt.Sprint(args[1]))
	}
	return cmd.Name()
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
		c.see(ctx, cmd)
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.see(ctx, cmds...)
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
	cmds, calls := count.takeCalls()
	visits := 0
	s.live.drift.Range(func(_, _ any) bool { visits++; return true })
	budget := (n*10 + 59) / 60
	t.Logf("a reconcile pass over %d idle live sales: %d Redis commands, %d sales reconciled (%v)", n, cmds, visits, calls)
	if visits > budget || cmds > n+budget*12 {
		t.Errorf("a reconcile pass over %d idle live sales reconciled %d (want at most %d) with %d Redis commands (want at most %d): %v",
			n, visits, budget, cmds, n+budget*12, calls)
	}
}

// TestReconcileVisitsEverySaleWithinTheSweep: passes every 10s over many
// live sales, on a simulated clock: each pass takes a share of them, every
// sale is reconciled at least once per reconcileSweep, and a sale bought
// through this instance is taken first.
func TestReconcileVisitsEverySaleWithinTheSweep(t *testing.T) {
	const n, every = 50, 10 * time.Second
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	ids := createLiveSales(t, s, n)
	live := map[string]bool{}
	for _, id := range ids {
		live[id] = true
	}
	waitfor.Until(t, waitfor.Patience, "no sale moved lately", func() error {
		if active := s.orders.Active(); len(active) != 0 {
			return fmt.Errorf("%d moved lately", len(active))
		}
		return nil
	})
	s.cfg.ReconcileEvery = every
	rc := newReconciler(s)
	start := time.Unix(1_000_000, 0)
	last := map[string]time.Time{}
	budget := (n*int(every/time.Second) + 59) / 60
	for k := range 20 {
		now := start.Add(time.Duration(k) * every)
		if k == 7 {
			if _, err := s.Buy(ctx, BuyRequest{SaleID: "s033", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		visit := rc.choose(ctx, ids, live, now)
		if len(visit) > budget+1 {
			t.Errorf("pass %d visits %d sales, budget %d", k, len(visit), budget)
		}
		if k == 7 {
			if _, ok := visit["s033"]; !ok {
				t.Errorf("pass %d: the sale bought through this instance is not visited", k)
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

// TestSampleReadsTheMarksOfMovedSalesAndAShareOfTheRest: with more live
// sales than a sample reads the marks of besides the ones that moved
// (quietMarksPerSample, 15 of 90 here), a sample reads the marks of the
// sales that moved lately and of 15 others, not of all 90; a buy through
// this instance shows in the next sample, and a change the instance did
// not hear of (a buy through the engine, stored, its sale quiet again: as
// through another instance) within ⌈90 / 15⌉ samples. Before, every sample
// read 90 marks.
func TestSampleReadsTheMarksOfMovedSalesAndAShareOfTheRest(t *testing.T) {
	const n, budget = 90, 15
	defer func(was int) { quietMarksPerSample = was }(quietMarksPerSample)
	quietMarksPerSample = budget
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	createLiveSales(t, s, n)
	count := &commandCount{}
	s.rdb.AddHook(count)
	cctx := context.WithValue(ctx, commandCountKey{}, count)
	st := newSamplerState()
	waitfor.Until(t, waitfor.Patience, "every sale sampled without a backlog, none moved lately", func() error {
		v := s.sample(cctx, st, time.Second)
		backlog := int64(0)
		for _, ls := range v.Sales {
			backlog += ls.Backlog
		}
		if active := s.orders.Active(); len(v.Sales) != n || backlog != 0 || len(active) != 0 {
			return fmt.Errorf("%d sales sampled, backlog %d, %d moved lately", len(v.Sales), backlog, len(active))
		}
		return nil
	})
	// sampled takes a sample and checks the marks it read: its
	// XINFO STREAM calls but the one of each sale read in full (its
	// stream's lag), at most one per sale that moved lately, per sale read
	// in full (due by recountEvery, here), and budget more.
	sampled := func(what string) liveView {
		t.Helper()
		moving := len(s.orders.Active())
		count.take()
		before := time.Now()
		v := s.sample(cctx, st, time.Second)
		_, calls := count.takeCalls()
		moving = max(moving, len(s.orders.Active()))
		full := 0
		for _, r := range st.read {
			if !r.at.Before(before) {
				full++
			}
		}
		marks := calls["xinfo|stream"] - full
		t.Logf("%s: %d marks read, %d sales moved lately, %d read in full", what, marks, moving, full)
		if len(v.Sales) != n || marks > moving+full+budget {
			t.Errorf("%s: %d sales listed (want %d), %d marks read (want at most %d moved lately + %d read in full + %d)",
				what, len(v.Sales), n, marks, moving, full, budget)
		}
		return v
	}
	remaining := func(v liveView, id string) int64 {
		for _, ls := range v.Sales {
			if ls.ID == id && len(ls.Items) == 1 {
				return ls.Items[0].Remaining
			}
		}
		return -2
	}
	// newest is a sale whose mark the last sample read: the last one
	// the rotation reads again.
	newest := func(not string) string {
		var id string
		for sale, at := range st.marked {
			if sale != not && (id == "" || at.After(st.marked[id]) || at.Equal(st.marked[id]) && sale < id) {
				id = sale
			}
		}
		return id
	}

	sampled("a sample of idle sales")

	bought := newest("")
	if _, err := s.Buy(ctx, BuyRequest{SaleID: bought, UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 2}}}); err != nil {
		t.Fatal(err)
	}
	v := sampled("the sample after a buy through this instance")
	if got := remaining(v, bought); got != 8 {
		t.Errorf("the sample after a buy of 2 of 10 in %s through this instance shows %d remaining", bought, got)
	}

	behind := newest(bought)
	rc, err := s.eng.Buy(ctx, behind, "u1", []inventory.Line{{SKU: "A", Qty: 2}}, "")
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the order stored, its sale quiet again", func() error {
		if o, err := s.db.Order(ctx, rc.Order.ID); err != nil || o.Status != inventory.OrderConfirmed {
			return fmt.Errorf("order %+v (%v)", o, err)
		}
		if slices.Contains(s.orders.Active(), behind) {
			return fmt.Errorf("%s moved lately", behind)
		}
		return nil
	})
	rounds := (n + budget - 1) / budget
	for k := 1; ; k++ {
		v = sampled(fmt.Sprintf("sample %d after a buy the instance did not hear of", k))
		got := remaining(v, behind)
		if got == 8 {
			break
		}
		if k == rounds {
			t.Fatalf("%d samples after a buy of 2 of 10 in %s the instance did not hear of, it shows %d remaining", k, behind, got)
		}
	}
}

// TestReconcileCapsTheVisitsOfUnmovedSales: passes every 10 s over 120
// live sales with idleVisitsPerSecond lowered to 1, on a simulated clock:
// a pass visits at most 10 sales that did not move, and reads the marks
// of none but the ones it visits and the ones that moved lately; the
// sales bought through this instance are visited at the next pass all the
// same, besides; every sale is visited within sweepOf(120), 2 minutes.
// Before, a pass visited 20 sales that did not move (120 × 10 s / 1 min)
// and read 120 marks.
func TestReconcileCapsTheVisitsOfUnmovedSales(t *testing.T) {
	const n, every = 120, 10 * time.Second
	defer func(was int) { idleVisitsPerSecond = was }(idleVisitsPerSecond)
	idleVisitsPerSecond = 1
	most := idleVisitsPerSecond * int(every/time.Second)
	ctx := context.Background()
	s := startSampledByHand(t, quietPipe)
	ids := createLiveSales(t, s, n)
	waitfor.Until(t, waitfor.Patience, "no sale moved lately", func() error {
		if active := s.orders.Active(); len(active) != 0 {
			return fmt.Errorf("%d moved lately", len(active))
		}
		return nil
	})
	count := &commandCount{}
	s.rdb.AddHook(count)
	cctx := context.WithValue(ctx, commandCountKey{}, count)
	s.cfg.ReconcileEvery = every
	rc := newReconciler(s)
	live := map[string]bool{}
	for _, id := range ids {
		live[id] = true
	}
	start := time.Unix(1_000_000, 0)
	last := map[string]time.Time{}
	for k := range 30 {
		now := start.Add(time.Duration(k) * every)
		var bought []string
		if k%5 == 3 {
			for j := range 4 {
				id := ids[(k*7+j*31)%n]
				if _, err := s.Buy(ctx, BuyRequest{SaleID: id, UserID: fmt.Sprintf("u%d-%d", k, j), Lines: []inventory.Line{{SKU: "A", Qty: 1}}}); err != nil {
					t.Fatal(err)
				}
				bought = append(bought, id)
			}
		}
		moving := len(s.orders.Active())
		count.take()
		visit := rc.choose(cctx, ids, live, now)
		_, calls := count.takeCalls()
		moving = max(moving, len(s.orders.Active()))
		unmoved := 0
		for id := range visit {
			if !slices.Contains(bought, id) {
				unmoved++
			}
		}
		for _, id := range bought {
			if _, ok := visit[id]; !ok {
				t.Errorf("pass %d: %s, bought through this instance, is not visited", k, id)
			}
		}
		if unmoved > most || calls["xinfo|stream"] > moving+len(visit) {
			t.Errorf("pass %d visits %d sales that did not move (want at most %d) and reads %d marks (want at most %d moved lately + %d visited)",
				k, unmoved, most, calls["xinfo|stream"], moving, len(visit))
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
			if now.Sub(from) > sweepOf(n) {
				t.Fatalf("pass %d: sale %s last reconciled %v ago, more than %v", k, id, now.Sub(from), sweepOf(n))
			}
		}
	}
}

// quietPipe tunes the consumer of a test whose sales fall quiet soon
// (pipeline.Options.QuietAfter).
var quietPipe = pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, QuietAfter: time.Second}

// startWithLiveSales starts a service whose sampler and reconcile loop run
// only by hand, on a redis-server of the test's own, with n live sales
// s000, s001... (item A, stock 10, limit 2), and waits until it lists them
// all as live.
func startWithLiveSales(t *testing.T, n int) *Service {
	t.Helper()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	createLiveSales(t, s, n)
	return s
}

// createLiveSales creates n live sales s000, s001... (item A, stock 10,
// limit 2), waits until s lists them all as live, and returns their ids.
func createLiveSales(t *testing.T, s *Service, n int) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%03d", i)
		sale := inventory.Sale{ID: ids[i], PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
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
	return ids
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

// TestRecountSpreadsWithManySales: a sale whose stream stands still is
// recounted every 30 s up to 600 live sales, and past that every live
// sales ÷ 20 s, so that the recounts a second stay at 20.
func TestRecountSpreadsWithManySales(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, 30 * time.Second}, {600, 30 * time.Second}, {601, 30050 * time.Millisecond}, {10_000, 500 * time.Second}} {
		if got := recountOf(c.n); got != c.want {
			t.Errorf("recountOf(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}
