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
			eng := benchEngine(b)
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

// BuyMany calls of 1, 16 and 64 buys by GOMAXPROCS x 32 callers (64 on a
// 2-core machine, as `seckill bench` uses).
// Run: go test -run '^$' -bench BenchmarkBuyMany -benchtime 200000x ./inventory/
func BenchmarkBuyMany(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			eng := benchEngine(b)
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				line := []inventory.Line{{SKU: "A", Qty: 1}}
				reqs := make([]inventory.BuyRequest, 0, batch)
				send := func() {
					for _, r := range eng.BuyMany(b.Context(), reqs) {
						if r.Err != nil {
							b.Error(r.Err)
						}
					}
					reqs = reqs[:0]
				}
				for pb.Next() {
					user := "u" + strconv.FormatInt(next.Add(1), 36)
					if reqs = append(reqs, inventory.BuyRequest{SaleID: "bench", UserID: user, Lines: line}); len(reqs) == batch {
						send()
					}
				}
				if len(reqs) > 0 {
					send()
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
		})
	}
}

// benchEngine is an engine on the local Redis with a sale "bench" whose
// item A holds a billion units, one per buyer.
func benchEngine(b *testing.B) *inventory.Engine {
	rdb := redistest.Standalone(b)
	eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(b, rdb)})
	if err := eng.CreateSale(b.Context(), inventory.Sale{ID: "bench", PerUserLimit: 1,
		Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
		b.Fatal(err)
	}
	if err := eng.Preload(b.Context()); err != nil {
		b.Fatal(err)
	}
	return eng
}
