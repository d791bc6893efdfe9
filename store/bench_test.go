package store

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/inventory"
)

// BenchmarkApplyBought applies b.N one-line bought events in batches of 500,
// as the order consumer does on the hot path. events/s is orders stored per
// second; rows/s counts every row written (a journal row, an order and an
// order line per event).
//
//	go test -run '^$' -bench BenchmarkApplyBought -benchtime 100000x ./store/
func BenchmarkApplyBought(b *testing.B) {
	for _, d := range []struct {
		name string
		url  func(testing.TB) string
	}{{"postgres", dbtest.PostgresURL}, {"sqlite", dbtest.SQLiteURL}} {
		b.Run(d.name, func(b *testing.B) {
			// A fresh database each time: the function runs once per b.N tried.
			ctx := context.Background()
			s := openStore(b, d.url(b))
			must(b, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "bench", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
			evs := boughtEvents("bench", b.N)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < len(evs); i += 500 {
				if err := s.Apply(ctx, "bench", evs[i:min(i+500, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/elapsed, "events/s")
			b.ReportMetric(3*float64(b.N)/elapsed, "rows/s")
		})
	}
}
