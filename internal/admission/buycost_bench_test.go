package admission

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// BenchmarkAdmittedBuyRedisCost is what an admitted buy costs Redis against
// a plain buy, in a room as the service runs one: a room of --waiting
// buyers (b.N of them admitted by the room's own steps, then buying), each
// buy of one unit by a new buyer, with the service's per-user throttle (5
// a second, burst 10), sent as rounds of 32 concurrent BuyChecked calls
// (coalesced, as the service's are). "plain" buys the same way on a sale
// without a room. Reported: the buy script's µs of Redis per buy
// (lua-µs/buy, commandstats of EVALSHA; the room's steps are not in it),
// its calls per buy and Redis's CPU per buy (INFO cpu; the steps in it).
//
// Run: go test -run '^$' -bench BenchmarkAdmittedBuyRedisCost -benchtime 30000x ./internal/admission/
func BenchmarkAdmittedBuyRedisCost(b *testing.B) {
	for _, mode := range []string{"plain", "admitted"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			srv := redistest.StartServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
			b.Cleanup(func() { _ = rdb.Close() })
			// The rooms' clock and the buys' are the server's, a little
			// later for the rooms (so that every admission is made in one
			// go): the admissions last an hour.
			eng := inventory.New(rdb, inventory.Options{Prefix: "cost"})
			if err := eng.CreateSale(ctx, inventory.Sale{ID: "s", PerUserLimit: 1,
				Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
				b.Fatal(err)
			}
			const conc = 32
			n := b.N + conc
			user := func(i int) string { return fmt.Sprintf("user%012d", i) }
			places := make([]Place, n)
			if mode == "admitted" {
				places = admitAll(b, rdb, eng, n, user)
			}
			th := inventory.Throttle{Rate: 5, Period: time.Second, Burst: 10}
			next := 0
			round := func(k int) {
				var wg sync.WaitGroup
				for range k {
					i := next
					next++
					c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s", UserID: user(i),
						Lines: []inventory.Line{{SKU: "A", Qty: 1}}, Throttle: &th})
					if err == nil && mode == "admitted" {
						if c, err = c.WithToken(places[i].Nonce, time.Minute); err == nil {
							c, err = c.WithGate(places[i].AdmittedUntil)
						}
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
			round(conc) // loads the script
			before := redistest.ReadCounters(b, rdb)
			b.ResetTimer()
			for done := 0; done < b.N; done += conc {
				round(min(conc, b.N-done))
			}
			b.StopTimer()
			after := redistest.ReadCounters(b, rdb)
			f := float64(b.N)
			b.ReportMetric((after.CPU-before.CPU)*1e6/f, "redis-cpu-µs/buy")
			b.ReportMetric(float64(after.Usec["evalsha"]-before.Usec["evalsha"])/f, "lua-µs/buy")
			b.ReportMetric(float64(after.Calls["evalsha"]-before.Calls["evalsha"])/f, "calls/buy")
		})
	}
}

// admitAll joins users 0..n-1 to a room of sale "s" and has the room's
// steps admit every one of them; their places.
func admitAll(b *testing.B, rdb *redis.Client, eng *inventory.Engine, n int, user func(int) string) []Place {
	ctx := context.Background()
	rooms := NewRooms(rdb, eng.Key)
	t, err := rdb.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	var now atomic.Int64
	now.Store(t.UnixMicro())
	rooms.clock = func() time.Time { return time.UnixMicro(now.Load()) }
	if err := rooms.Create(ctx, "s", Config{OpensAt: t.Add(-time.Hour), DrawUntil: t.Add(-time.Minute),
		CapacityPerS: 100_000, AdmitTTL: 10 * time.Minute, MaxWaiting: int64(n)}); err != nil {
		b.Fatal(err)
	}
	if _, err := rooms.Step(ctx, "s"); err != nil { // loads the script; writes the empty draw's need
		b.Fatal(err)
	}
	if err := rooms.WriteDraw(ctx, "s", nil); err != nil {
		b.Fatal(err)
	}
	keys := rooms.keys("s")
	for from := 0; from < n; from += 1000 {
		p := rdb.Pipeline()
		for i := from; i < min(from+1000, n); i++ {
			p.EvalSha(ctx, roomScript.SHA, keys, "join", strconv.FormatInt(now.Load(), 10), user(i))
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for admitted := 0; admitted < n; {
		now.Add(20_000)
		st, err := rooms.Step(ctx, "s")
		if err != nil {
			b.Fatal(err)
		}
		admitted += st.Admitted
	}
	places := make([]Place, n)
	for i := range places {
		if places[i], err = rooms.Place(ctx, "s", user(i)); err != nil || places[i].Status != Admitted {
			b.Fatalf("%s: %+v %v", user(i), places[i], err)
		}
	}
	return places
}

// BenchmarkRoomStep is what a step of a room costs Redis when it admits
// nobody (everyone admitted, the admissions live): the step every live
// room takes every 20 ms on every instance, whatever its load.
//
// Run: go test -run '^$' -bench BenchmarkRoomStep -benchtime 2000x ./internal/admission/
func BenchmarkRoomStep(b *testing.B) {
	ctx := context.Background()
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	b.Cleanup(func() { _ = rdb.Close() })
	eng := inventory.New(rdb, inventory.Options{Prefix: "cost"})
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "s", PerUserLimit: 1,
		Items: []inventory.Item{{SKU: "A", Stock: inventory.MaxQty}}}); err != nil {
		b.Fatal(err)
	}
	admitAll(b, rdb, eng, 100_000, func(i int) string { return fmt.Sprintf("user%012d", i) })
	rooms := NewRooms(rdb, eng.Key)
	before := redistest.ReadCounters(b, rdb)
	b.ResetTimer()
	for range b.N {
		if _, err := rooms.Step(ctx, "s"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := redistest.ReadCounters(b, rdb)
	b.ReportMetric(float64(after.Usec["evalsha"]-before.Usec["evalsha"])/float64(after.Calls["evalsha"]-before.Calls["evalsha"]), "lua-µs/step")
}
