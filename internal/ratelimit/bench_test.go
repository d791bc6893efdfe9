package ratelimit_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkAllow measures Allow on the local Redis from GOMAXPROCS × 25
// parallel callers (50 on a 2-core machine), over 1,000 keys, with the
// system clock: most hits are allowed, some refused.
// Run: go test -run '^$' -bench BenchmarkAllow -benchtime 100000x ./ratelimit/
func BenchmarkAllow(b *testing.B) {
	for _, lim := range []ratelimit.Limit{
		ratelimit.PerSecond(100, 99),
		ratelimit.Fixed(100, time.Second),
		ratelimit.Sliding(100, time.Second),
	} {
		b.Run(lim.Algorithm.String(), func(b *testing.B) {
			rdb := redistest.Standalone(b)
			l := ratelimit.New(rdb, ratelimit.Options{Prefix: redistest.Prefix(b, rdb)})
			var next atomic.Int64
			b.SetParallelism(25)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "user:" + strconv.FormatInt(next.Add(1)%1000, 10)
					if _, err := l.Allow(b.Context(), key, lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
