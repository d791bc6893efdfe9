package inventory_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// cluster is a real 3-master Redis Cluster on loopback ports, started once
// for the package's tests; every engine test runs on it too.
var cluster *redistest.Cluster

func TestMain(m *testing.M) {
	var err error
	cluster, err = redistest.StartCluster(3, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inventory tests: start redis cluster:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "inventory tests: stop redis cluster:", err)
	}
	os.Exit(code)
}

// backend is a Redis the engine tests run on.
type backend struct {
	name   string
	client func(t testing.TB) redis.UniversalClient
	// flushScripts empties the script cache of every node.
	flushScripts func(ctx context.Context, c redis.UniversalClient) error
}

var backends = []backend{
	{
		name:   "redis",
		client: func(t testing.TB) redis.UniversalClient { return redistest.Standalone(t) },
		flushScripts: func(ctx context.Context, c redis.UniversalClient) error {
			return c.ScriptFlush(ctx).Err()
		},
	},
	{
		name: "miniredis",
		client: func(t testing.TB) redis.UniversalClient {
			c, m := redistest.Mini(t)
			// miniredis expires keys only when told to: let its TTLs run in
			// real time, as the embedded default does.
			tick := time.NewTicker(5 * time.Millisecond)
			stop := make(chan struct{})
			t.Cleanup(func() { tick.Stop(); close(stop) })
			go func() {
				for {
					select {
					case <-tick.C:
						m.FastForward(5 * time.Millisecond)
					case <-stop:
						return
					}
				}
			}()
			return c
		},
		flushScripts: func(ctx context.Context, c redis.UniversalClient) error {
			return c.ScriptFlush(ctx).Err()
		},
	},
	{
		name: "cluster",
		client: func(t testing.TB) redis.UniversalClient {
			c := cluster.Client()
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		flushScripts: func(ctx context.Context, c redis.UniversalClient) error {
			return c.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
				return n.ScriptFlush(ctx).Err()
			})
		},
	},
}

// forEachBackend runs f as a subtest on every backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// rig is one test's engine on a backend, under a key prefix of its own.
type rig struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	eng    *inventory.Engine
	clock  *testClock
}

func newRig(t testing.TB, b backend, opts inventory.Options) *rig {
	t.Helper()
	rdb := b.client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: redistest.Prefix(t, rdb), clock: newTestClock()}
	opts.Prefix = r.prefix
	if opts.Clock == nil && opts.ScriptClock == nil {
		// The test's clock is this process's and stands in for Redis's.
		opts.Clock, opts.ScriptClock = r.clock, r.clock
	}
	r.eng = inventory.New(rdb, opts)
	return r
}

// key names a key of a sale the way the engine's key layout does.
func (r *rig) key(sale, name string) string {
	return "{" + r.prefix + ":" + sale + "}:" + name
}

// create defines a sale or fails the test.
func (r *rig) create(s inventory.Sale) {
	r.t.Helper()
	if err := r.eng.CreateSale(r.ctx, s); err != nil {
		r.t.Fatalf("CreateSale(%s): %v", s.ID, err)
	}
}

// remaining returns every item's remaining stock by sku.
func (r *rig) remaining(sale string) map[string]int64 {
	r.t.Helper()
	return r.counter(sale, func(it inventory.ItemState) int64 { return it.Remaining })
}

// counter returns one counter of every item by sku.
func (r *rig) counter(sale string, of func(inventory.ItemState) int64) map[string]int64 {
	r.t.Helper()
	st, err := r.eng.Stock(r.ctx, sale)
	if err != nil {
		r.t.Fatalf("Stock(%s): %v", sale, err)
	}
	out := map[string]int64{}
	for _, it := range st.Items {
		out[it.SKU] = of(it)
	}
	return out
}

// events returns the sale's decoded event stream.
func (r *rig) events(sale string) []inventory.Event {
	r.t.Helper()
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(sale), "-", "+").Result()
	if err != nil {
		r.t.Fatalf("XRANGE: %v", err)
	}
	out, err := inventory.ParseEntries(sale, msgs)
	if err != nil {
		r.t.Fatalf("ParseEntries(%v): %v", msgs, err)
	}
	return out
}

// held returns what each "user|sku" holds, read from Redis.
// orders returns the sale's order records in Redis, by order id.
func (r *rig) orders(sale string) map[string]string {
	r.t.Helper()
	h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
	if err != nil {
		r.t.Fatalf("HGETALL orders: %v", err)
	}
	return inventory.OrderRecords(h)
}

// dropOrder removes an order's record from Redis, as a lost write would.
func (r *rig) dropOrder(sale, orderID string) {
	r.t.Helper()
	redistest.DropOrder(r.ctx, r.t, r.rdb, r.key(sale, "orders"), inventory.OrderGroup(orderID), orderID)
}

func (r *rig) held(sale string) map[string]int64 {
	r.t.Helper()
	h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "bought")).Result()
	if err != nil {
		r.t.Fatalf("HGETALL bought: %v", err)
	}
	out := map[string]int64{}
	for f, v := range h {
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil {
			r.t.Fatalf("bought[%s] = %q", f, v)
		}
		out[f] = n
	}
	return out
}

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
