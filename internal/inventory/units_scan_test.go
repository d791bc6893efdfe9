package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// scanHook wraps a client: every HSCAN reply of a key in dup comes back
// with each of its elements twice (as a hash rehashing during the scan
// may return them), and atEnd runs inside the call that returns the last
// page, while the caller still holds what it kept of the scan.
type scanHook struct {
	redis.UniversalClient
	dup   map[string]bool
	atEnd func()
}

func (c *scanHook) HScan(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd {
	cmd := c.UniversalClient.HScan(ctx, key, cursor, match, count)
	kv, next, err := cmd.Result()
	if err != nil {
		return cmd
	}
	if c.dup[key] {
		cmd.SetVal(append(kv, kv...), next)
	}
	if next == 0 && c.atEnd != nil {
		c.atEnd()
	}
	return cmd
}

// TestUnitsFieldScannedTwiceCountsOnce: HSCAN returns every field of the
// orders and per-user counts twice (on the same page). UnitsInOrders and
// UnitsHeld count each field once and report no corruption, legacy own
// fields included; a true duplicate order (in its group and its own
// field) is still ErrCorrupt.
func TestUnitsFieldScannedTwiceCountsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}, {SKU: "B", Stock: 100}}})
		var reqs []inventory.BuyRequest
		for i := range 40 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: "u" + strconv.Itoa(i), Lines: lines("A", 1, "B", 2)})
		}
		for _, br := range r.eng.BuyMany(r.ctx, reqs) {
			mustDo(t, br.Err)
		}
		hook := &scanHook{UniversalClient: r.rdb, dup: map[string]bool{r.key("s1", "orders"): true, r.key("s1", "bought"): true}}
		eng := inventory.New(hook, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock})
		check := func(what string) {
			t.Helper()
			units, err := eng.UnitsInOrders(r.ctx, "s1")
			if err != nil || units["A"] != 40 || units["B"] != 80 {
				t.Errorf("%s: UnitsInOrders = %v, %v; want A 40, B 80", what, units, err)
			}
			held, err := eng.UnitsHeld(r.ctx, "s1")
			if err != nil || held["A"] != 40 || held["B"] != 80 {
				t.Errorf("%s: UnitsHeld = %v, %v; want A 40, B 80", what, held, err)
			}
		}
		check("groups")
		r.toOwnFields("s1")
		check("own fields")

		// One order in its own field and in its group: corrupt, still.
		var id, rec string
		for id, rec = range r.orders("s1") {
			break
		}
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "orders"), inventory.OrderGroup(id), id+"|"+rec).Err())
		if units, err := eng.UnitsInOrders(r.ctx, "s1"); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("an order in its group and its own field: UnitsInOrders = %v, %v; want ErrCorrupt", units, err)
		}
	})
}

// BenchmarkUnitsInOrders scans a sale of n orders, 4 to a group (one
// buy call's), from the local Redis. Besides B/op it reports live-B/order: the heap still live (after a GC) when the scan's last page
// arrives, less the heap before the call; what the caller keeps of the
// whole scan.
// Run: go test -run '^$' -bench BenchmarkUnitsInOrders -benchtime 5x ./internal/inventory/
func BenchmarkUnitsInOrders(b *testing.B) {
	for _, n := range []int{20_000, 200_000} {
		b.Run(fmt.Sprintf("orders=%d", n), func(b *testing.B) {
			rdb := redistest.Standalone(b)
			prefix := redistest.Prefix(b, rdb)
			var before runtime.MemStats
			var live uint64
			hook := &scanHook{UniversalClient: rdb, atEnd: func() {
				var m runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m)
				live = max(live, m.HeapAlloc-min(m.HeapAlloc, before.HeapAlloc))
			}}
			eng := inventory.New(hook, inventory.Options{Prefix: prefix})
			ctx := b.Context()
			if err := eng.CreateSale(ctx, inventory.Sale{ID: "bench", PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}, {SKU: "B", Stock: inventory.MaxQty}}}); err != nil {
				b.Fatal(err)
			}
			key := "{" + prefix + ":bench}:orders"
			groups := map[string]bool{}
			pipe := rdb.Pipeline()
			for len(groups)*4 < n {
				g := inventory.OrderGroup(inventory.NewOrderID("bench"))
				if groups[g] {
					continue
				}
				groups[g] = true
				var v []string
				for k := range 4 {
					v = append(v, fmt.Sprintf("%s%04d|p|u%d-%d|1700000000000|A=1,B=2|", g, k, len(groups), k))
				}
				pipe.HSet(ctx, key, g, strings.Join(v, "\n"))
				if pipe.Len() == 1000 {
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				units, err := eng.UnitsInOrders(ctx, "bench")
				if err != nil || units["A"] != int64(n) || units["B"] != int64(2*n) {
					b.Fatalf("UnitsInOrders = %v, %v; want A %d, B %d", units, err, n, 2*n)
				}
			}
			b.ReportMetric(float64(live)/float64(n), "live-B/order")
		})
	}
}
