package inventory_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/inventory"
)

// BenchmarkBuy measures one-item buys on the local Redis, each by a
// different buyer, from GOMAXPROCS x 1 and GOMAXPROCS x 25 parallel callers
// (2 and 50 on a 2-core machine: 50 is what redis-benchmark -c 50 uses).
// Run: go test -run '^$' -bench BenchmarkBuy -benchtime 200000x ./inventory/
func BenchmarkBuy(b *testing.B) {
	for _, par := range []int{1, 25} {
		b.Run("callers=GOMAXPROCSx"+strconv.Itoa(par), func(b *testing.B) {
			rdb := redistest.Standalone(b)
			prefix := redistest.Prefix(b, rdb)
			eng := inventory.New(rdb, inventory.Options{Prefix: prefix})
			if err := eng.CreateSale(b.Context(), inventory.Sale{ID: "bench", PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
				b.Fatal(err)
			}
			if err := eng.Preload(b.Context()); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				line := []inventory.Line{{SKU: "A", Qty: 1}}
				for pb.Next() {
					user := "u" + strconv.FormatInt(next.Add(1), 36)
					if _, err := eng.Buy(b.Context(), "bench", user, line, ""); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
		})
	}
}
