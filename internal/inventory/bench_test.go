package inventory_test

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkBuy measures one-item buys through Buy, each by a different
// buyer, on the local Redis, from GOMAXPROCS x 1, x 25, x 128 and x 800
// parallel callers (2, 50, 256 and 1,600 on a 2-core machine: 50 is what
// redis-benchmark -c 50 uses), with buys coalesced (the default) and each
// sent alone.
// Run: go test -run '^$' -bench 'BenchmarkBuy$' -benchtime 300000x ./inventory/
func BenchmarkBuy(b *testing.B) {
	for _, coalesce := range []bool{true, false} {
		// 800 callers of one P (-cpu 1) are the hot-item ceiling's run
		// against redis-benchmark -P 16: one client thread with 800 buys
		// in flight, as its 50 connections of 16 (docs/performance.md).
		for _, par := range []int{1, 25, 128, 800} {
			name := fmt.Sprintf("coalesce=%v/callers=GOMAXPROCSx%d", coalesce, par)
			b.Run(name, func(b *testing.B) {
				eng := benchEngine(b, inventory.Options{Coalesce: inventory.Coalesce{Off: !coalesce}})
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
}

// BuyMany calls of BUY_CALL_BATCH (default 128) one-unit buys, each by a
// new buyer of a sale with per-user limit 1 (and the service's default
// per-user throttle with BUY_CALL_THROTTLE=1), from one caller, one call
// at a time: every call carries the same buys whatever the machine's load,
// so that a count of Redis's instructions per buy (internal/bench/redis-instructions.sh,
// under callgrind) is the same from run to run.
// Run: go test -run '^$' -bench BenchmarkBuyCallSerial -benchtime 100000x ./inventory/
func BenchmarkBuyCallSerial(b *testing.B) {
	batch := 128
	if n, err := strconv.Atoi(os.Getenv("BUY_CALL_BATCH")); err == nil && n > 0 {
		batch = n
	}
	var th *inventory.Throttle
	if os.Getenv("BUY_CALL_THROTTLE") == "1" {
		bk, err := throttleOf(ratelimit.PerSecond(5, 10))
		if err != nil {
			b.Fatal(err)
		}
		th = &bk
	}
	var eng *inventory.Engine
	lines := [][]inventory.Line{{{SKU: "A", Qty: 1}}}
	if n, err := strconv.Atoi(os.Getenv("BUY_CALL_ITEMS")); err != nil || n <= 1 {
		eng = benchEngine(b, inventory.Options{})
	} else {
		eng = benchItemsEngine(b, n)
		lines = make([][]inventory.Line, n)
		for i := range lines {
			lines[i] = []inventory.Line{{SKU: "i" + strconv.Itoa(i), Qty: 1}}
		}
	}
	next := 0
	reqs := make([]inventory.BuyRequest, 0, batch)
	b.ResetTimer()
	for done := 0; done < b.N; done += len(reqs) {
		reqs = reqs[:0]
		for range min(batch, b.N-done) {
			next++
			// (a multiplicative step through the items: each call's buys
			// name distinct items while the sale has at least as many
			// items as a call has buys, the same ones in every run)
			line := lines[(next*7919)%len(lines)]
			reqs = append(reqs, inventory.BuyRequest{SaleID: "bench", UserID: "u" + strconv.Itoa(next), Lines: line, Throttle: th})
		}
		for _, r := range eng.BuyMany(b.Context(), reqs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
}

// BuyMany calls of 1, 16 and 64 buys by GOMAXPROCS x 32 callers (64 on a
// 2-core machine, as `seckill bench` uses).
// Run: go test -run '^$' -bench BenchmarkBuyMany -benchtime 200000x ./inventory/
func BenchmarkBuyMany(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			eng := benchEngine(b, inventory.Options{})
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

// benchItemsEngine is benchEngine's engine with a sale "bench" of n items
// "i0", "i1", ..., each of which never sells out. Making a sale of many
// items leaves Lua garbage in Redis that its collector would clear during
// the buys measured after it, in steps that do not follow the buys: the
// scripts are flushed (SCRIPT FLUSH, a new Lua state: a client of another
// engine on the same Redis reloads them once) and loaded again before the
// buys.
func benchItemsEngine(b *testing.B, n int) *inventory.Engine {
	rdb := redistest.Standalone(b)
	eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(b, rdb)})
	items := make([]inventory.Item, n)
	for i := range items {
		items[i] = inventory.Item{SKU: "i" + strconv.Itoa(i), Stock: inventory.MaxQty}
	}
	if err := eng.CreateSale(b.Context(), inventory.Sale{ID: "bench", PerUserLimit: 1, Items: items}); err != nil {
		b.Fatal(err)
	}
	if err := rdb.ScriptFlush(b.Context()).Err(); err != nil {
		b.Fatal(err)
	}
	if err := eng.Preload(b.Context()); err != nil {
		b.Fatal(err)
	}
	return eng
}

// benchEngine is an engine on the local Redis with a sale "bench" whose
// item A holds a billion units, one per buyer.
func benchEngine(b *testing.B, opts inventory.Options) *inventory.Engine {
	rdb := redistest.Standalone(b)
	opts.Prefix = redistest.Prefix(b, rdb)
	eng := inventory.New(rdb, opts)
	if err := eng.CreateSale(b.Context(), inventory.Sale{ID: "bench", PerUserLimit: 1,
		Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
		b.Fatal(err)
	}
	if err := eng.Preload(b.Context()); err != nil {
		b.Fatal(err)
	}
	return eng
}
