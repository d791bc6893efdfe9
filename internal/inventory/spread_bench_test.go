package inventory_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkBuySpread measures one-unit buys through Buy by GOMAXPROCS x 16
// callers (32 on a 2-core machine, as TestManyLiveSales uses), each buy on
// a sale picked at random among 1 or 1,000, on a redis-server of its own,
// with the calls of different sales pipelined together (pipelines=2, the
// default) and each call sent alone (pipelines=off: every call finds room,
// as before the pipeliner). Besides buys/s it reports, per buy, the Redis
// server's CPU, its read events (about one per round trip), this process's
// CPU (the callers and the client), and the p50 and p99 of Buy's latency;
// and the buys per script call and the µs Redis spent in each call.
// Run: go test -run '^$' -bench BenchmarkBuySpread -benchtime 40000x ./inventory/
func BenchmarkBuySpread(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, sales := range []int{1, 1000} {
		for _, pipelines := range []int{2, 1 << 30} {
			name := fmt.Sprintf("sales=%d/pipelines=%d", sales, pipelines)
			if pipelines == 1<<30 {
				name = fmt.Sprintf("sales=%d/pipelines=off", sales)
			}
			b.Run(name, func(b *testing.B) {
				rdb := srv.Client(b)
				eng := inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(b, rdb),
					Coalesce: inventory.Coalesce{Pipelines: pipelines}})
				ids := make([]string, sales)
				for i := range ids {
					ids[i] = "s" + strconv.Itoa(i)
					if err := eng.CreateSale(b.Context(), inventory.Sale{ID: ids[i], PerUserLimit: 1,
						Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
						b.Fatal(err)
					}
				}
				if err := eng.Preload(b.Context()); err != nil {
					b.Fatal(err)
				}
				var (
					next atomic.Int64
					mu   sync.Mutex
					lat  = make([]time.Duration, 0, b.N)
				)
				cpu, reads, own := redisCPU(b, rdb), redisReads(b, rdb), processCPU(b)
				calls, usec := scriptStats(b, rdb)
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					line := []inventory.Line{{SKU: "A", Qty: 1}}
					mine := make([]time.Duration, 0, 1024)
					for pb.Next() {
						user := "u" + strconv.FormatInt(next.Add(1), 36)
						began := time.Now()
						if _, err := eng.Buy(b.Context(), ids[rand.IntN(sales)], user, line, ""); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(began))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
				b.StopTimer()
				n := float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "buys/s")
				b.ReportMetric(float64((redisCPU(b, rdb)-cpu).Microseconds())/n, "redis-cpu-us/buy")
				b.ReportMetric(float64(redisReads(b, rdb)-reads)/n, "round-trips/buy")
				b.ReportMetric(float64((processCPU(b)-own).Microseconds())/n, "client-cpu-us/buy")
				calls2, usec2 := scriptStats(b, rdb)
				b.ReportMetric(n/float64(calls2-calls), "buys/call")
				b.ReportMetric(float64(usec2-usec)/float64(calls2-calls), "redis-us/call")
				slices.Sort(lat)
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[min(len(lat)*99/100, len(lat)-1)].Microseconds())/1000, "p99-ms")
				}
			})
		}
	}
}

// redisReads is the Redis server's total_reads_processed: the read events
// it handled, about one per round trip of a client.
func redisReads(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.InfoMap(b.Context(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Stats"]["total_reads_processed"], 10, 64)
	if err != nil {
		b.Fatalf("INFO stats: total_reads_processed: %v", err)
	}
	return n
}

// scriptStats is the Redis server's count of EVALSHA calls and the µs it
// spent in them (INFO commandstats).
func scriptStats(b *testing.B, rdb *redis.Client) (calls, usec int64) {
	b.Helper()
	info, err := rdb.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		v, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			k, x, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(x, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(x, 10, 64)
			}
		}
	}
	return calls, usec
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * (time.Second / 100) // USER_HZ
}
