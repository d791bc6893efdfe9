package inventory_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// How the cost of a buy grows with the size of its sale: with the number
// of items (BenchmarkBuyItems) and with the number of buyers the sale
// already has (BenchmarkBuyBuyers), each buy one unit by a new buyer from
// GOMAXPROCS x 128 callers (256 on a 2-core machine), coalesced (the
// default). The target: buys/s within 10% from 1 to 100,000 items and from
// 1,000 to 1,000,000 buyers. Each also reports redis-cpu-us/buy, the CPU
// time of Redis per buy, which a busy machine disturbs far less than
// buys/s. TestMemoryPerBuyer measures what each buyer costs in Redis
// memory (goal: at most 100 bytes per buyer record).
//
// go test -run '^$' -bench 'BuyItems|BuyBuyers' -benchtime 200000x ./inventory/
//
// -count runs each configuration N times back to back; on a noisy machine,
// run the command N times instead, so the configurations interleave.

// BenchmarkBuyItems measures buys of one unit of a random item of a sale
// of 1 to 100,000 items, each of which never sells out.
func BenchmarkBuyItems(b *testing.B) {
	for _, n := range []int{1, 100, 10_000, 100_000} {
		b.Run("items="+strconv.Itoa(n), func(b *testing.B) {
			if n > inventory.MaxItems {
				b.Skipf("the engine caps a sale at %d items", inventory.MaxItems)
			}
			skus := make([]string, n)
			items := make([]inventory.Item, n)
			for i := range items {
				skus[i] = "i" + strconv.Itoa(i)
				items[i] = inventory.Item{SKU: skus[i], Stock: inventory.MaxQty}
			}
			eng, rdb := growthEngine(b, inventory.Sale{ID: "bench", PerUserLimit: 1, Items: items})
			buyParallel(b, eng, rdb, "bench", func() string { return skus[rand.IntN(n)] })
		})
	}
}

// BenchmarkBuyBuyers measures buys of a sale whose bought and orders hashes
// already hold the records of 1,000 to 1,000,000 buyers, each buy by a new
// buyer. The measured buys add their own records: the hashes end b.N
// records larger (reported as end-buyers). Redis grows a hash by doubling
// its table and moving the entries over a step per operation on it, so a
// run that crosses a power of two (1,048,576 from 1,000,000 buyers) pays
// for moving the whole table; one that stays between two does not.
func BenchmarkBuyBuyers(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run("buyers="+strconv.Itoa(n), func(b *testing.B) {
			const sale = "bench"
			eng, rdb := growthEngine(b, inventory.Sale{ID: sale, PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}})
			prefillBuyers(b, rdb, eng, sale, n)
			buyParallel(b, eng, rdb, sale, func() string { return "A" })
			held, err := rdb.HLen(b.Context(), eng.Key(sale, "bought")).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(held), "end-buyers")
		})
	}
}

// growthEngine is an engine on the local Redis, under a key prefix of its
// own, with sale s created and the scripts loaded.
func growthEngine(b *testing.B, s inventory.Sale) (*inventory.Engine, *redis.Client) {
	b.Helper()
	rdb := redistest.Standalone(b)
	eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(b, rdb)})
	if err := eng.CreateSale(b.Context(), s); err != nil {
		b.Fatal(err)
	}
	if err := eng.Preload(b.Context()); err != nil {
		b.Fatal(err)
	}
	return eng, rdb
}

// buyParallel buys one unit of sku() per iteration, each by a new buyer
// ("u1", "u2", ...), from GOMAXPROCS x 128 callers, and reports buys/s and
// the CPU time the Redis server's main thread spent per buy. That one
// counts the work Redis did for any client: it is exact only on a Redis no
// one else uses meanwhile (point $SECKILL_TEST_REDIS_URL at one), but it
// does not move with the load on the machine as buys/s does.
func buyParallel(b *testing.B, eng *inventory.Engine, rdb *redis.Client, sale string, sku func() string) {
	var next atomic.Int64
	cpu := redisCPU(b, rdb)
	b.SetParallelism(128)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			user := "u" + strconv.FormatInt(next.Add(1), 36)
			line := []inventory.Line{{SKU: sku(), Qty: 1}}
			if _, err := eng.Buy(b.Context(), sale, user, line, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "buys/s")
	cpu = redisCPU(b, rdb) - cpu
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "redis-cpu-us/buy")
}

// redisCPU returns the CPU time (user and system) the Redis server's main
// thread has used since it started (the whole server's on a Redis that
// does not report its main thread's).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.InfoMap(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	cpu := info["CPU"]
	fields := []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"}
	if _, ok := cpu[fields[0]]; !ok {
		fields = []string{"used_cpu_user", "used_cpu_sys"}
	}
	var seconds float64
	for _, f := range fields {
		v, err := strconv.ParseFloat(cpu[f], 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s = %q", f, cpu[f])
		}
		seconds += v
	}
	return time.Duration(seconds * float64(time.Second))
}

// prefillBuyers writes what n one-unit buys of sku A by buyers "p1", "p2",
// ... leave in the sale's bought and orders hashes (keys.go, record.go),
// directly, with pipelined HSETs of 1,000 fields each. The remaining stock
// and the events stream are left alone: buy.lua reads only the fields of
// the buy at hand, and XADD appends at the stream's tail whatever its length.
func prefillBuyers(b *testing.B, rdb *redis.Client, eng *inventory.Engine, sale string, n int) {
	b.Helper()
	const perHSET, perPipeline = 1000, 100
	bought, orders := eng.Key(sale, "bought"), eng.Key(sale, "orders")
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	pipe := rdb.Pipeline()
	for lo := 0; lo < n; lo += perHSET {
		hi := min(lo+perHSET, n)
		held := make([]any, 0, 2*(hi-lo))
		placed := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			user := "p" + strconv.FormatInt(int64(i+1), 36)
			held = append(held, user+"|A", "1")
			placed = append(placed, sale+"."+ulid.Make().String(), "p|"+user+"|"+now+"|A=1|")
		}
		pipe.HSet(b.Context(), bought, held...)
		pipe.HSet(b.Context(), orders, placed...)
		if pipe.Len() >= 2*perPipeline || hi == n {
			if _, err := pipe.Exec(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, key := range []string{bought, orders} {
		if got, err := rdb.HLen(b.Context(), key).Result(); err != nil || got != int64(n) {
			b.Fatalf("prefilled %s: HLEN = %d, %v; want %d", key, got, err, n)
		}
	}
}

// TestMemoryPerBuyer makes 20,000 one-unit buys by distinct buyers through
// the engine on the local Redis and reports the Redis memory each buyer
// record (bought hash), order record (orders hash) and event (stream)
// takes, for 12-character user ids and for 36-character ones (UUIDs), and
// for a crowd (64 callers: script calls of many buys, whose orders share a
// field of the orders hash) and for lone buys (one caller: a call, and a
// field, per order). At 20,000 fields both hashes are in hashtable
// encoding, the encoding of any sale of real size (listpack ends at
// hash-max-listpack-entries fields, 128 by default); smaller hashes cost
// less per field. The goals: at most 100 bytes per buyer record, and,
// for a crowd of 12-character user ids, at most 128 bytes per buyer for
// what a sale keeps while it lives, the buyer and order records (the
// stream is trimmed as the orders are stored).
func TestMemoryPerBuyer(t *testing.T) {
	const n, goal, goalKept = 20_000, 100, 128
	users := []struct {
		name string
		id   func(i int) string
	}{
		{"user=12chars", func(i int) string { return fmt.Sprintf("u%011d", i) }},
		{"user=36chars", func(i int) string {
			return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", i, i%0xffff, 0x4000|i%0xfff, 0x8000|i%0x3fff, i)
		}},
	}
	for _, u := range users {
		for _, workers := range []int{64, 1} {
			t.Run(fmt.Sprintf("%s/callers=%d", u.name, workers), func(t *testing.T) {
				per := memoryPerBuyer(t, n, workers, u.id)
				kept := per["bought"] + per["orders"]
				t.Logf("per buyer: %.1f bytes kept (bought, orders), %.1f with the stream (user id %d chars)",
					kept, kept+per["events"], len(u.id(1)))
				if per["bought"] > goal {
					t.Errorf("bought: %.1f bytes per buyer record; goal at most %d", per["bought"], goal)
				}
				if workers > 1 && len(u.id(1)) == 12 && kept > goalKept {
					t.Errorf("bought and orders: %.1f bytes per buyer; goal at most %d", kept, goalKept)
				}
			})
		}
	}
}

// memoryPerBuyer makes n one-unit buys of a new sale, by users id(1) ..
// id(n), from workers callers, and returns the bytes per buy of the sale's
// bought and orders hashes and its events stream.
func memoryPerBuyer(t *testing.T, n, workers int, id func(i int) string) map[string]float64 {
	const sale = "double11"
	rdb := redistest.Standalone(t)
	eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(t, rdb)})
	if err := eng.CreateSale(t.Context(), inventory.Sale{ID: sale, PerUserLimit: 1,
		Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				line := []inventory.Line{{SKU: "A", Qty: 1}}
				if _, err := eng.Buy(t.Context(), sale, id(i), line, ""); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	per := map[string]float64{}
	for _, name := range []string{"bought", "orders", "events"} {
		key := eng.Key(sale, name)
		size, err := rdb.MemoryUsage(t.Context(), key, 0).Result() // SAMPLES 0: every element
		if err != nil {
			t.Fatal(err)
		}
		enc, err := rdb.ObjectEncoding(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		per[name] = float64(size) / float64(n)
		t.Logf("%-6s %-9s %9d bytes / %d = %6.1f bytes per record", name, enc, size, n, per[name])
		if name != "events" && enc != "hashtable" {
			t.Errorf("%s is %s-encoded at %d buys; want hashtable", name, enc, n)
		}
	}
	return per
}
