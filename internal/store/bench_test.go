package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// benchBoth runs f as a sub-benchmark on each dialect, on a fresh database
// each time: a benchmark function runs once per b.N tried.
func benchBoth(b *testing.B, f func(b *testing.B, s *Store)) {
	for _, d := range []struct {
		name string
		url  func(testing.TB) string
	}{{"postgres", dbtest.PostgresURL}, {"sqlite", dbtest.SQLiteURL}} {
		b.Run(d.name, func(b *testing.B) { f(b, openStore(b, d.url(b))) })
	}
}

// BenchmarkApplyBought applies b.N one-line bought events in batches of 500,
// as the order consumer does on the hot path. events/s is orders stored per
// second; rows/s counts every row written (a journal row, an order and an
// order line per event).
//
//	go test -run '^$' -bench BenchmarkApplyBought -benchtime 100000x ./store/
func BenchmarkApplyBought(b *testing.B) {
	benchBoth(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
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

// BenchmarkDegradedBuy is degraded mode's buy: one transaction per buy on
// the database, 32 buyers at once, each buy a new user, one sale of
// 10,000,000 units (a limited item).
// buys/s is what the database sells while Redis is away.
//
//	go test -run '^$' -bench BenchmarkDegradedBuy -benchtime 5000x ./store/
func BenchmarkDegradedBuy(b *testing.B) {
	benchBoth(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
		must(b, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "bench", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10_000_000}}}}))
		m, err := s.SellMode(ctx)
		must(b, err)
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, time.Now(), time.Now(), "bench")
		must(b, err)
		var next atomic.Int64
		b.SetParallelism(16) // 32 goroutines on 2 cores
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				user := "u" + strconv.FormatInt(next.Add(1), 10)
				if _, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Buy: checked(inventory.BuyRequest{SaleID: "bench", UserID: user,
					Lines: []inventory.Line{{SKU: "A", Qty: 1}}}), Now: time.Now()}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "buys/s")
	})
}

// BenchmarkApplyCost is what storing an order costs PostgreSQL, on the
// order consumer's path: b.N one-line bought events of one sale applied in
// batches of the sizes the consumer reads (a batch is what one read of a
// sale returned), one transaction each. pg-own-µs/order is the CPU
// (utime+stime from /proc/PID/stat) of the benchmark's own backends per
// order; pg-all-µs/order that of every postgres process (the WAL writer's
// and checkpointer's share too, and any other client's: noisy on a shared
// machine). wal-B/order is the WAL PostgreSQL wrote meanwhile per order
// (pg_current_wal_lsn before and after: every client's, but steady when
// none else writes; a checkpoint meanwhile adds full-page images).
// allocs/op are per order.
//
//	go test -run '^$' -bench BenchmarkApplyCost -benchtime 40000x -count 3 ./store/
func BenchmarkApplyCost(b *testing.B) {
	for _, size := range []int{64, 256, 400} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) { benchApplyCost(b, size, false) })
	}
}

// BenchmarkApplyCostSpent is BenchmarkApplyCost with and without a spent
// single-use token (an admission's or a purchase token's) on every order:
// what keeping the token with its order costs.
//
//	go test -run '^$' -bench BenchmarkApplyCostSpent -benchtime 40000x -count 3 ./internal/store/
func BenchmarkApplyCostSpent(b *testing.B) {
	for _, spent := range []bool{false, true} {
		for _, size := range []int{16, 64} {
			b.Run("spent="+strconv.FormatBool(spent)+"/batch="+strconv.Itoa(size), func(b *testing.B) { benchApplyCost(b, size, spent) })
		}
	}
}

func benchApplyCost(b *testing.B, size int, spent bool) {
	{
		{
			u, m := meteredURL(b, dbtest.PostgresURL(b))
			s := openStore(b, u)
			ctx := context.Background()
			must(b, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "bench", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
			evs := boughtEvents("bench", b.N)
			if spent {
				for i := range evs {
					evs[i].Spent = inventory.SpentToken{Token: "adm" + strconv.Itoa(i) + "x7fT2mLr9aWc4Kd0", UserID: evs[i].Order.UserID,
						OrderID: evs[i].Order.ID, Until: time.Now().Add(time.Hour)}
				}
			}
			b.ReportAllocs()
			wal := func() (lsn int64) {
				must(b, s.db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn() - '0/0'").Scan(&lsn))
				return lsn
			}
			lsn := wal()
			m.start(b, s)
			b.ResetTimer()
			for i := 0; i < len(evs); i += size {
				if err := s.Apply(ctx, "bench", evs[i:min(i+size, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			m.stop(b, s)
			m.report(b, float64(b.N), "order")
			b.ReportMetric(float64(wal()-lsn)/float64(b.N), "wal-B/order")
		}
	}
}

// BenchmarkApplySpread is orders spread over 1,000 live sales, one order
// of a sale per read of 128 sales, as the consumer sees them then:
// per-sale applies each sale's batch on its own (a transaction each), many
// applies the read's batches in one ApplyMany. Metrics as in
// BenchmarkApplyCost.
//
//	go test -run '^$' -bench BenchmarkApplySpread -benchtime 20000x -count 3 ./store/
func BenchmarkApplySpread(b *testing.B) {
	for _, mode := range []string{"per-sale", "many"} {
		b.Run(mode, func(b *testing.B) {
			u, m := meteredURL(b, dbtest.PostgresURL(b))
			s := openStore(b, u)
			ctx := context.Background()
			const sales, perRead = 1000, 128
			gens := make([]*events, sales)
			for i := range gens {
				id := "s" + strconv.Itoa(i)
				must(b, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
				gens[i] = newEvents(id)
			}
			reads := make([][]SaleEvents, 0, b.N/perRead+1)
			for i := 0; i < b.N; i += perRead {
				var read []SaleEvents
				for j := i; j < min(i+perRead, b.N); j++ {
					e := gens[j%sales]
					read = append(read, SaleEvents{e.sale, []inventory.Event{e.bought("u"+strconv.Itoa(j), line("A", 1))}})
				}
				reads = append(reads, read)
			}
			b.ReportAllocs()
			m.start(b, s)
			b.ResetTimer()
			for _, read := range reads {
				if mode == "many" {
					must(b, s.ApplyMany(ctx, read))
					continue
				}
				for _, se := range read {
					must(b, s.Apply(ctx, se.SaleID, se.Events))
				}
			}
			b.StopTimer()
			m.stop(b, s)
			m.report(b, float64(b.N), "order")
		})
	}
}
