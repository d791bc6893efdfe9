package bench

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/inventory"
)

// BenchmarkBuyMany measures the engine's pipelined buys (redis-batched's
// path) on the local Redis: one-item buys by distinct buyers, sent in
// BuyMany calls of 1, 16 and 64 buys by GOMAXPROCS x 32 callers (64 on a
// 2-core machine, as `seckill bench` uses).
// Run: go test -run '^$' -bench BenchmarkBuyMany -benchtime 200000x ./bench/
func BenchmarkBuyMany(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			rdb := redistest.Standalone(b)
			eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(b, rdb)})
			if err := eng.CreateSale(b.Context(), inventory.Sale{ID: "bench", PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
				b.Fatal(err)
			}
			if err := eng.Preload(b.Context()); err != nil {
				b.Fatal(err)
			}
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

// BenchmarkApproach runs each approach's buy as a Go benchmark on the
// machine's Redis and PostgreSQL, 64 callers on 2 cores: the same paths
// as `seckill bench`, without its calibration and sell-out, one buy per
// call (BenchmarkBuyMany measures batches).
// Run: go test -run '^$' -bench BenchmarkApproach -benchtime 3s ./bench/
func BenchmarkApproach(b *testing.B) {
	s, err := Open(b.Context(), Target{RedisURL: redistest.URL(), DatabaseURL: dbtest.ServerURL(),
		NeedRedis: true, NeedDB: true, Concurrency: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	for _, a := range approaches {
		b.Run(a.name, func(b *testing.B) {
			cfg := Config{}
			cfg.defaults()
			item, err := a.prepare(b.Context(), s, cfg, calibrationStock)
			if err != nil {
				b.Fatal(err)
			}
			defer item.drop(b.Context())
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buyer, out := make([]string, 1), make([]outcome, 1)
				for pb.Next() {
					buyer[0] = "u" + strconv.FormatInt(next.Add(1), 36)
					if item.buy(b.Context(), buyer, out); !out[0].sold {
						b.Errorf("buy: %+v", out[0])
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
		})
	}
}
