package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/waitfor"
)

// roundTrips counts the script calls of a test's sales (their first key
// under prefix) sent alone, by the sale in their first key, and the
// pipelines that carried the others, and records each pipeline's sales; it
// can hold the calls of some sales, sent alone, until released.
type roundTrips struct {
	prefix    string
	mu        sync.Mutex
	alone     map[string]int  // sale -> calls sent alone
	sent      [][]string      // the sales of each pipeline's calls, in order
	pipelines atomic.Int64    // pipelines with at least one call
	pipelined atomic.Int64    // calls in them
	hold      map[string]bool // the sales whose lone calls are held
	holdAfter bool            // held calls are held once they ran, not before
	gate      chan struct{}   // closed: held calls go on
	enter     chan struct{}   // one signal per held call
}

func countRoundTrips(rdb redis.UniversalClient, prefix string, hold ...string) *roundTrips {
	c := &roundTrips{prefix: prefix, alone: map[string]int{}, hold: map[string]bool{},
		gate: make(chan struct{}), enter: make(chan struct{}, 16)}
	for _, h := range hold {
		c.hold[h] = true
	}
	rdb.AddHook(c)
	return c
}

// saleOf is the sale of a script call of the test, or "".
func (c *roundTrips) saleOf(cmd redis.Cmder) string {
	args := cmd.Args()
	name := fmt.Sprint(args[0])
	if (name != "evalsha" && name != "eval") || len(args) < 4 {
		return ""
	}
	tag := strings.TrimPrefix(fmt.Sprint(args[3]), "{"+c.prefix+":")
	sale, ok := strings.CutSuffix(tag, "}:sale")
	if !ok || tag == fmt.Sprint(args[3]) {
		return ""
	}
	return sale
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if sale := c.saleOf(cmd); sale != "" {
			c.mu.Lock()
			c.alone[sale]++
			c.mu.Unlock()
			if c.hold[sale] {
				if c.holdAfter {
					err := next(ctx, cmd)
					c.enter <- struct{}{}
					<-c.gate
					return err
				}
				select {
				case c.enter <- struct{}{}:
				default:
				}
				<-c.gate
			}
		}
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sales []string
		for _, cmd := range cmds {
			if sale := c.saleOf(cmd); sale != "" {
				sales = append(sales, sale)
			}
		}
		if n := len(sales); n > 0 {
			c.mu.Lock()
			c.sent = append(c.sent, sales)
			c.mu.Unlock()
			c.pipelines.Add(1)
			c.pipelined.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

func (c *roundTrips) aloneOf(sale string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alone[sale]
}

// entered waits for a held call to reach the hook.
func (c *roundTrips) entered(t *testing.T) {
	t.Helper()
	select {
	case <-c.enter:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		t.Fatal("a held call was never sent")
	}
}

// pipelinesSent returns the sales of each pipeline sent so far.
func (c *roundTrips) pipelinesSent() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string(nil), c.sent...)
}

// masterOf names the cluster master that owns sale's slot, or "" on a
// backend that is not a cluster.
func (r *rig) masterOf(sale string) string {
	r.t.Helper()
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(r.ctx, r.key(sale, "sale"))
	if err != nil {
		r.t.Fatal(err)
	}
	return node.Options().Addr
}

// firstPerMaster creates a sale on each master (one on a backend that is not
// a cluster), named "first...": a test holds their calls to take the one
// pipeline of every node.
func (r *rig) firstPerMaster(stock int64) []string {
	r.t.Helper()
	masters := 1
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		slots, err := cc.ClusterSlots(r.ctx).Result()
		if err != nil {
			r.t.Fatal(err)
		}
		addrs := map[string]bool{}
		for _, s := range slots {
			addrs[s.Nodes[0].Addr] = true
		}
		masters = len(addrs)
	}
	var firsts []string
	seen := map[string]bool{}
	for i := 0; len(firsts) < masters; i++ {
		id := fmt.Sprintf("first%d", i)
		if m := r.masterOf(id); !seen[m] {
			seen[m] = true
			firsts = append(firsts, id)
			r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
		}
	}
	return firsts
}

// onOneNodeEach checks that every pipeline sent carried the calls of one
// node only, and returns how many each node got.
func (r *rig) onOneNodeEach(t *testing.T, sent [][]string) map[string]int {
	t.Helper()
	per := map[string]int{}
	for _, sales := range sent {
		nodes := map[string]bool{}
		for _, s := range sales {
			nodes[r.masterOf(s)] = true
		}
		if len(nodes) != 1 {
			t.Errorf("a pipeline of sales %v spans nodes %v, want one node", sales, nodes)
		}
		for n := range nodes {
			per[n]++
		}
	}
	return per
}

// TestSalesReadyTogetherShareAPipeline: buys of many sales that become
// ready while a call is in flight (one pipeline at a time per node here)
// go to Redis together, in one pipeline per node (and one more, for the
// script cache flushed meanwhile: every node answers NOSCRIPT), not as a
// call each; on a cluster, a pipeline carries the calls of one node. Each
// buy gets its own outcome: a sale whose key holds the wrong type fails
// with ErrCorrupt, a sale missing from Redis (no Loader) with ErrNotFound,
// the second buyer of a sale's last unit with ErrSoldOut, while the other
// sales' buys succeed. (Overlap 1: the second buy of "last" takes its
// sale's free call slot at once, so that both of its calls queue for the
// pipeline.)
func TestSalesReadyTogetherShareAPipeline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1, Overlap: 1}, SoldOut: inventory.SoldOut{Off: true}})
		oks := []string{"ok1", "ok2", "ok3", "ok4"}
		for _, id := range append(oks, "last", "bad") {
			stock := int64(10)
			if id == "last" {
				stock = 1
			}
			r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
		}
		if err := r.rdb.Set(r.ctx, r.key("bad", "bought"), "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		firsts := r.firstPerMaster(10)
		trips := countRoundTrips(r.rdb, r.prefix, firsts...)

		type outcome struct {
			sale, user string
			rc         inventory.Receipt
			err        error
		}
		outcomes := make(chan outcome, 16)
		buy := func(sale, user string) {
			go func() {
				rc, err := r.eng.Buy(r.ctx, sale, user, lines("A", 1), "")
				outcomes <- outcome{sale, user, rc, err}
			}()
		}
		for _, id := range firsts {
			buy(id, "u1")
			trips.entered(t) // its call is in flight, held: its node's pipeline is taken
		}
		queued := 0
		for _, s := range [][2]string{{"ok1", "u1"}, {"last", "u1"}, {"ok2", "u1"}, {"bad", "u1"},
			{"last", "u2"}, {"ok3", "u1"}, {"gone", "u1"}, {"ok4", "u1"}} {
			buy(s[0], s[1])
			queued++
			waitfor.Until(t, waitfor.Patience, "the buy queued for the next pipeline", func() error {
				if n := r.eng.QueuedBuys(); n != queued {
					return fmt.Errorf("%d queued, want %d", n, queued)
				}
				return nil
			})
		}
		if err := b.flushScripts(r.ctx, r.rdb); err != nil {
			t.Fatal(err)
		}
		close(trips.gate)

		got := map[string]outcome{}
		for range queued + len(firsts) {
			o := <-outcomes
			got[o.sale+"/"+o.user] = o
		}
		for _, id := range append(append([]string{}, firsts...), "ok1", "ok2", "ok3", "ok4", "last") {
			k := id + "/u1"
			if o := got[k]; o.err != nil || len(o.rc.Remaining) != 1 || o.rc.Order.SaleID != o.sale || o.rc.Order.UserID != o.user {
				t.Errorf("%s: %+v, %v; want its own order", k, o.rc, o.err)
			}
		}
		if rem := got["last/u1"].rc.Remaining; len(rem) != 1 || rem[0] != 0 {
			t.Errorf("the last unit: remaining %v, want [0]", rem)
		}
		for k, want := range map[string]error{"last/u2": inventory.ErrSoldOut, "bad/u1": inventory.ErrCorrupt, "gone/u1": inventory.ErrNotFound} {
			if err := got[k].err; !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", k, err, want)
			}
		}
		for _, id := range append(append(oks, firsts...), "last") {
			if held := r.held(id); held["u1|A"] != 1 || len(held) != 1 {
				t.Errorf("sale %s: held %v, want u1 1", id, held)
			}
		}

		// The queued sales' calls: none alone (the missing sale's second
		// try, after its failed rebuild, aside: none here, it has no
		// Loader), all in one pipeline per node and its NOSCRIPT reload.
		// On a cluster, a node that got only one of the 8 calls sends it
		// alone (a pipeline of one).
		queuedOn := map[string]int{}
		for _, id := range append(oks, "last", "last", "bad", "gone") {
			queuedOn[r.masterOf(id)]++
		}
		shared, wantPipelined := 0, 0
		for _, n := range queuedOn {
			if n > 1 {
				shared++
				wantPipelined += n
			}
		}
		for _, id := range append(oks, "last", "bad") {
			if n, q := trips.aloneOf(id), queuedOn[r.masterOf(id)]; n != 0 && (q > 1 || n > 1) {
				t.Errorf("sale %s: %d calls sent alone, want 0 (pipelined with the %d of its node)", id, n, q)
			}
		}
		per := r.onOneNodeEach(t, trips.pipelinesSent())
		for node, q := range queuedOn {
			if p := per[node]; q > 1 && (p < 1 || p > 2) {
				t.Errorf("node %q: %d pipelines, want 1 and its reload", node, p)
			}
		}
		if p, n := trips.pipelines.Load(), trips.pipelined.Load(); len(per) != shared || n < int64(wantPipelined) {
			t.Errorf("%d pipelines to %d nodes carrying %d calls, want to the %d nodes of the %d calls, with them", p, len(per), n, shared, wantPipelined)
		}
	})
}

// TestPipelinedBuyWhoseContextEndsIsNeverSent: a buy whose call waits for
// the next pipeline, and whose caller gives up, is dropped before it.
func TestPipelinedBuyWhoseContextEndsIsNeverSent(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1}})
	for _, id := range []string{"s0", "s1"} {
		r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	}
	trips := countRoundTrips(r.rdb, r.prefix, "s0")
	first := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(r.ctx, "s0", "u1", lines("A", 1), "")
		first <- err
	}()
	<-trips.enter // s0's call is in flight, held
	ctx, cancel := context.WithCancel(r.ctx)
	second := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(ctx, "s1", "u2", lines("A", 1), "")
		second <- err
	}()
	waitfor.Until(t, waitfor.Patience, "s1's buy queued for the next pipeline", func() error {
		if n := r.eng.QueuedBuys(); n != 1 {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the given-up buy: %v, want context.Canceled", err)
		}
	case <-time.After(waitfor.Patience):
		t.Fatal("the given-up buy still waits for the pipeline")
	}
	close(trips.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// u3's buy of s1 goes after the pipeline that would have carried u2's.
	if _, err := r.eng.Buy(r.ctx, "s1", "u3", lines("A", 1), ""); err != nil {
		t.Fatal(err)
	}
	if held := r.held("s1"); held["u2|A"] != 0 || held["u3|A"] != 1 {
		t.Errorf("held %v: the given-up buy was sent", held)
	}
	if n, p := trips.aloneOf("s1"), trips.pipelined.Load(); n != 1 || p != 0 {
		t.Errorf("s1: %d calls alone and %d pipelined, want 1 (u3's) and 0", n, p)
	}
}

// TestPipelineLostRepliesFinishEachBuyAlone: a pipeline of several sales'
// calls runs, and its replies are lost. Each buy is then sent again alone,
// under the same order id: its script finds the order it made, so every
// caller gets its order and each sale sold exactly once.
func TestPipelineLostRepliesFinishEachBuyAlone(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1}})
	sales := []string{"s1", "s2", "s3"}
	for _, id := range append([]string{"s0"}, sales...) {
		r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	}
	trips := countRoundTrips(r.rdb, r.prefix, "s0")
	lost := &lostPipeline{}
	r.rdb.AddHook(lost)
	lost.armed.Store(true)

	type outcome struct {
		sale string
		rc   inventory.Receipt
		err  error
	}
	outcomes := make(chan outcome, 4)
	buy := func(sale string) {
		go func() {
			rc, err := r.eng.Buy(r.ctx, sale, "u1", lines("A", 1), "")
			outcomes <- outcome{sale, rc, err}
		}()
	}
	buy("s0")
	<-trips.enter
	for i, id := range sales {
		buy(id)
		waitfor.Until(t, waitfor.Patience, "the buy queued for the next pipeline", func() error {
			if n := r.eng.QueuedBuys(); n != i+1 {
				return fmt.Errorf("%d queued", n)
			}
			return nil
		})
	}
	close(trips.gate)
	for range len(sales) + 1 {
		o := <-outcomes
		if o.err != nil || o.rc.Order.SaleID != o.sale || o.rc.Replayed {
			t.Errorf("%s: %+v, %v; want its order", o.sale, o.rc, o.err)
		}
	}
	if lost.armed.Load() {
		t.Fatal("no pipeline was sent")
	}
	for _, id := range sales {
		bought := 0
		for _, ev := range r.events(id) {
			if ev.Type == inventory.EventBought {
				bought++
			}
		}
		if rem := r.remaining(id)["A"]; rem != 9 || bought != 1 {
			t.Errorf("sale %s: %d remain and %d bought events, want 9 and 1", id, rem, bought)
		}
		if n := trips.aloneOf(id); n != 1 {
			t.Errorf("sale %s: %d calls alone after the lost pipeline, want 1", id, n)
		}
	}
}

// TestClusterPipelineReloadsOnlyWhereMissing: on a Redis Cluster the calls
// of sales on every master go in one pipeline per master; with the script
// cache of one master flushed, only that master's calls answer NOSCRIPT and
// are sent again by their source, and every buy succeeds.
func TestClusterPipelineReloadsOnlyWhereMissing(t *testing.T) {
	b := backends[2]
	r := newRig(t, b, inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1}})
	if err := r.eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	var sales []string
	byNode := map[string]int{}
	flushed := ""
	for i := 0; len(byNode) < 3 || len(sales) < 12; i++ {
		id := fmt.Sprintf("s%d", i)
		r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		node := r.masterOf(id)
		if flushed == "" {
			flushed = node
		}
		sales = append(sales, id)
		byNode[node]++
	}
	// A held call on every master takes its one pipeline. It is held once
	// it ran, so that it reloads nothing into the flushed master's cache.
	firsts := r.firstPerMaster(10)
	trips := countRoundTrips(r.rdb, r.prefix, firsts...)
	trips.holdAfter = true

	errs := make(chan error, len(sales)+len(firsts))
	for _, id := range firsts {
		go func() { _, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), ""); errs <- err }()
		trips.entered(t)
	}
	for i, id := range sales {
		go func() { _, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), ""); errs <- err }()
		waitfor.Until(t, waitfor.Patience, "the buy queued for the next pipeline", func() error {
			if n := r.eng.QueuedBuys(); n != i+1 {
				return fmt.Errorf("%d queued", n)
			}
			return nil
		})
	}
	err := r.rdb.(*redis.ClusterClient).ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error {
		if n.Options().Addr != flushed {
			return nil
		}
		return n.ScriptFlush(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	reloads := r.eng.ScriptReloads()
	close(trips.gate)
	for range len(sales) + len(firsts) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, id := range sales {
		if held := r.held(id); held["u1|A"] != 1 {
			t.Errorf("sale %s: held %v", id, held)
		}
		if n := trips.aloneOf(id); n != 0 {
			t.Errorf("sale %s: %d calls alone, want 0", id, n)
		}
	}
	want := int64(byNode[flushed])
	if got := r.eng.ScriptReloads() - reloads; got != want {
		t.Errorf("%d calls reloaded, want the %d of the flushed master (%v)", got, want, byNode)
	}
	sent := trips.pipelinesSent()
	per := r.onOneNodeEach(t, sent)
	if p := trips.pipelines.Load(); p != 4 || len(per) != 3 || per[flushed] != 2 {
		t.Errorf("%d pipelines, per node %v: want 4, one per master, then the flushed master's again", p, per)
	}
	// The masters' pipelines run side by side: another master's may be
	// recorded after the flushed master's second one, so look at the
	// flushed master's own, in the order they went.
	var ofFlushed [][]string
	for _, p := range sent {
		if len(p) > 0 && r.masterOf(p[0]) == flushed {
			ofFlushed = append(ofFlushed, p)
		}
	}
	if len(ofFlushed) != 2 || len(ofFlushed[1]) != byNode[flushed] {
		t.Errorf("the flushed master's pipelines carried %v, want its %d calls twice (the second after the reload)", ofFlushed, byNode[flushed])
	}
}
