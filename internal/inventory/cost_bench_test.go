package inventory_test

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ratelimit"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkBuyRedisCost measures what a coalesced buy costs Redis: BuyMany
// calls of 14 and 64 one-unit buys (14 is the batch the HTTP load makes),
// each buy by a new buyer of a sale with per-user limit 1, through the
// service's default per-user throttle (5/s, burst 10) and without one. It
// runs on a redis-server of its own, so that no other client's commands
// count, and reports per buy:
//
//	redis-cpu-µs   Redis's CPU (INFO cpu, user + sys)
//	lua-µs         the script's time (INFO commandstats, usec of evalsha)
//	cmds           the commands the script ran (commandstats calls)
//	mem-B          used_memory growth
//	stream-B       the stream's memory (MEMORY USAGE) over the orders in it
//
// with the stream written one entry per call (stream=call, the default) and
// one per order (stream=order, Options.EntryPerOrder).
//
// Run: go test -run '^$' -bench BenchmarkBuyRedisCost -benchtime 30000x ./inventory/
func BenchmarkBuyRedisCost(b *testing.B) {
	for _, throttle := range []bool{true, false} {
		for _, batch := range benchBatches() {
			for _, perOrder := range []bool{false, true} {
				stream := "call"
				if perOrder {
					stream = "order"
				}
				b.Run("throttle="+strconv.FormatBool(throttle)+"/batch="+strconv.Itoa(batch)+"/stream="+stream, func(b *testing.B) {
					benchRedisCost(b, batch, throttle, perOrder, false)
				})
			}
		}
	}
}

func benchRedisCost(b *testing.B, batch int, throttle, perOrder, token bool) {
	ctx := context.Background()
	rdb := redistest.StartServer(b).Client(b)
	eng := inventory.New(rdb, inventory.Options{Prefix: "cost", EntryPerOrder: perOrder})
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "bench", PerUserLimit: 1,
		Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
		b.Fatal(err)
	}
	var bucket *inventory.Throttle
	if throttle {
		bk, err := throttleOf(ratelimit.PerSecond(5, 10))
		if err != nil {
			b.Fatal(err)
		}
		bucket = &bk
	}
	line := []inventory.Line{{SKU: "A", Qty: 1}}
	next := 0
	buy := func(n int) {
		reqs := make([]inventory.BuyRequest, n)
		for i := range reqs {
			next++
			reqs[i] = inventory.BuyRequest{SaleID: "bench", UserID: "u" + strconv.Itoa(next), Lines: line, Throttle: bucket}
			if token {
				reqs[i].Token, reqs[i].TokenTTL = "adm-"+strconv.Itoa(next)+"-Qx7fT2mLr9aWc4Kd", 2*time.Minute
			}
		}
		for _, r := range eng.BuyMany(ctx, reqs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	buy(batch) // loads the script
	before := redistest.ReadCounters(b, rdb)
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		buy(min(batch, b.N-done))
	}
	b.StopTimer()
	after := redistest.ReadCounters(b, rdb)
	n := float64(b.N)
	b.ReportMetric((after.CPU-before.CPU)*1e6/n, "redis-cpu-µs/buy")
	b.ReportMetric(float64(after.Usec["evalsha"]-before.Usec["evalsha"])/n, "lua-µs/buy")
	var cmds int64
	var inside []string
	for name, calls := range after.Calls {
		switch name {
		case "evalsha", "evalsha_ro", "eval", "info", "memory", "xlen", "script", "ping", "hello", "client":
			continue
		}
		if d := calls - before.Calls[name]; d > 0 {
			cmds += d
			inside = append(inside, name+"="+strconv.FormatFloat(float64(d)/n, 'f', 2, 64))
		}
	}
	b.ReportMetric(float64(cmds)/n, "cmds/buy")
	b.ReportMetric(float64(after.Mem-before.Mem)/n, "mem-B/buy")
	events := eng.EventsKey("bench")
	size, err1 := rdb.MemoryUsage(ctx, events, 0).Result()
	if err1 != nil {
		b.Fatalf("stream size: %v", err1)
	}
	b.ReportMetric(float64(size)/float64(b.N+batch), "stream-B/buy")
	b.Logf("commands per buy: %s", strings.Join(inside, " "))
}

// BenchmarkBuyRedisCostToken is BenchmarkBuyRedisCost's default shape
// (throttle, one stream entry per call) with and without a single-use
// token per buy (an admission's or a purchase token's): what spending it
// adds.
//
// Run: go test -run '^$' -bench BenchmarkBuyRedisCostToken -benchtime 30000x ./internal/inventory/
func BenchmarkBuyRedisCostToken(b *testing.B) {
	for _, token := range []bool{false, true} {
		for _, batch := range benchBatches() {
			b.Run("token="+strconv.FormatBool(token)+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				benchRedisCost(b, batch, true, false, token)
			})
		}
	}
}

func benchBatches() []int {
	if s := os.Getenv("COST_BATCHES"); s != "" {
		var out []int
		for _, f := range strings.Split(s, ",") {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	return []int{14, 64}
}

// BenchmarkBuyRedisCostGate is what a waiting room's admitted buy costs
// Redis against a plain buy and a buy with a purchase token: batches of
// concurrent BuyChecked calls (coalesced, as the service's are), each a
// new buyer of a sale with per-user limit 1 and the default throttle;
// gated, each buyer holds a live admission in the room's keys (its state,
// as package admission writes it, in one of 1024 state hashes as a room of
// 65,536 buyers has them: about 30 states each, small hashes) and the buy
// checks it and spends it there. Metrics as BenchmarkBuyRedisCost's.
//
// Run: go test -run '^$' -bench BenchmarkBuyRedisCostGate -benchtime 30000x ./internal/inventory/
func BenchmarkBuyRedisCostGate(b *testing.B) {
	for _, mode := range []string{"plain", "token", "gated"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			rdb := redistest.StartServer(b).Client(b)
			eng := inventory.New(rdb, inventory.Options{Prefix: "cost"})
			if err := eng.CreateSale(ctx, inventory.Sale{ID: "bench", PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
				b.Fatal(err)
			}
			bk, err := throttleOf(ratelimit.PerSecond(5, 10))
			if err != nil {
				b.Fatal(err)
			}
			const batch = 16
			n := b.N + batch
			until := time.Now().Add(time.Hour).UnixMilli()
			nonce := func(i int) string { return fmt.Sprintf("%032x", i+1) }
			if mode == "gated" {
				// Every buyer's admitted state, in its bucket of nb.
				const nb = 1024
				pipe := rdb.Pipeline()
				pipe.HSet(ctx, eng.Key("bench", "room:cfg"), "nb", nb, "used", 0)
				for i := range n {
					u := "u" + strconv.Itoa(i)
					sum := sha1.Sum([]byte(u))
					bucket := strconv.Itoa(int(binary.BigEndian.Uint32(sum[:4]) % nb))
					pipe.HSet(ctx, eng.Key("bench", "room:b:"+bucket), u, fmt.Sprintf("a1:%s:%d:0", nonce(i), until))
					pipe.ZAdd(ctx, eng.Key("bench", "room:live"), redis.Z{Score: float64(until), Member: "u" + strconv.Itoa(i)})
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			next := 0
			round := func(k int) {
				var wg sync.WaitGroup
				for range k {
					i := next
					next++
					c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "bench", UserID: "u" + strconv.Itoa(i),
						Lines: []inventory.Line{{SKU: "A", Qty: 1}}, Throttle: &bk})
					if err == nil && mode != "plain" {
						c, err = c.WithToken(nonce(i), 2*time.Minute)
					}
					if err == nil && mode == "gated" {
						c, err = c.WithGate(time.UnixMilli(until))
					}
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						if _, err := eng.BuyChecked(ctx, c); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			round(batch) // loads the script
			before := redistest.ReadCounters(b, rdb)
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				round(min(batch, b.N-done))
			}
			b.StopTimer()
			after := redistest.ReadCounters(b, rdb)
			f := float64(b.N)
			b.ReportMetric((after.CPU-before.CPU)*1e6/f, "redis-cpu-µs/buy")
			b.ReportMetric(float64(after.Usec["evalsha"]-before.Usec["evalsha"])/f, "lua-µs/buy")
			b.ReportMetric(float64(after.Calls["evalsha"]-before.Calls["evalsha"])/f, "calls/buy")
			b.ReportMetric(float64(after.Mem-before.Mem)/f, "mem-B/buy")
		})
	}
}
