package bench

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkBuyMany measures the engine's pipelined buys (redis-batched's
// path) on the local Redis: one-item buys by distinct buyers, sent in
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
