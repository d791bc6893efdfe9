package admission

import (
	"context"
	"fmt"
	"os"
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

// TestRoomMemory (SECKILL_ROOM_MEMORY=1, on a redis-server of its own)
// joins 1,000,000 users with 16-character ids, draws them and admits some,
// and reports Redis's used_memory along the way and after Remove, and the
// server's CPU per call of each operation (INFO commandstats). It fails if
// the joined room takes more than 128 MB.
func TestRoomMemory(t *testing.T) {
	if os.Getenv("SECKILL_ROOM_MEMORY") != "1" {
		t.Skip("set SECKILL_ROOM_MEMORY=1 to run (about a minute)")
	}
	const n = 1_000_000
	ctx := context.Background()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	eng := inventory.New(rdb, inventory.Options{Prefix: "mem"})
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "s", Items: []inventory.Item{{SKU: "A", Stock: 1000}}}); err != nil {
		t.Fatal(err)
	}
	rooms := NewRooms(rdb, eng.Key)
	draw := time.Now().Add(time.Hour)
	var now atomic.Int64 // the script's clock, µs
	now.Store(draw.Add(-time.Minute).UnixMicro())
	rooms.clock = func() time.Time { return time.UnixMicro(now.Load()) }
	if err := rooms.Create(ctx, "s", Config{OpensAt: draw.Add(-time.Hour), DrawUntil: draw, CapacityPerS: 1000,
		AdmitTTL: 2 * time.Minute, MaxWaiting: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := rooms.Step(ctx, "s"); err != nil { // loads the script
		t.Fatal(err)
	}
	before := usedMemory(t, rdb)
	user := func(i int) string { return fmt.Sprintf("user%012d", i) }

	// each runs op for users [0, count) in pipelines of 1000, from 4
	// goroutines, and returns the server's µs per call.
	each := func(count int, op func(p redis.Pipeliner, i int)) float64 {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		const workers, batch = 4, 1000
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for from := w * batch; from < count; from += workers * batch {
					p := rdb.Pipeline()
					for i := from; i < min(from+batch, count); i++ {
						op(p, i)
					}
					if _, err := p.Exec(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return usecPerEvalSha(t, rdb)
	}
	keys := rooms.keys("s")
	clock := func() string { return strconv.FormatInt(now.Load(), 10) }
	start := time.Now()
	joinUS := each(n, func(p redis.Pipeliner, i int) { p.EvalSha(ctx, roomScript.SHA, keys, "join", clock(), user(i)) })
	joinTook := time.Since(start)
	joined := usedMemory(t, rdb)
	placeUS := each(100_000, func(p redis.Pipeliner, i int) {
		p.EvalSha(ctx, roomScript.SHA, keys, "place", clock(), user(i*7))
	})

	now.Store(draw.UnixMicro())
	start = time.Now()
	entrants, ok, err := rooms.Entrants(ctx, "s")
	if err != nil || !ok || len(entrants) != n {
		t.Fatalf("Entrants: %d %v %v", len(entrants), ok, err)
	}
	secret, _, _ := NewSecret()
	d, err := RunDraw("s", secret, entrants)
	if err != nil {
		t.Fatal(err)
	}
	byEntry := make(map[string]string, n)
	for _, u := range entrants {
		byEntry[Entry("s", u)] = u
	}
	order := make([]string, n)
	for i, e := range d.Order {
		order[i] = byEntry[e]
	}
	drawStart := time.Now()
	if err := rooms.WriteDraw(ctx, "s", order); err != nil {
		t.Fatal(err)
	}
	writeTook, drawTook := time.Since(drawStart), time.Since(start)
	drawn := usedMemory(t, rdb)

	// Steps every 20 ms of the script's clock: 20 admissions each.
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		now.Add(20_000)
		if _, err := rooms.Step(ctx, "s"); err != nil {
			t.Fatal(err)
		}
	}
	stepUS := usecPerEvalSha(t, rdb)
	st, err := rooms.Stats(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := rooms.Remove(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	removeTook := time.Since(start)
	time.Sleep(500 * time.Millisecond) // UNLINK frees in the background
	removed := usedMemory(t, rdb)

	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	t.Logf("used_memory: before %s, %d joined %s (+%s, %d B a user), drawn %s (+%s), after Remove %s",
		mb(before), n, mb(joined), mb(joined-before), (joined-before)/n, mb(drawn), mb(drawn-before), mb(removed))
	t.Logf("joins took %v (pipelined, 4 clients); Entrants+RunDraw+WriteDraw %v (WriteDraw %v); Remove %v",
		joinTook.Round(time.Millisecond), drawTook.Round(time.Millisecond), writeTook.Round(time.Millisecond),
		removeTook.Round(time.Millisecond))
	t.Logf("Redis CPU (evalsha usec_per_call): join %.2f µs, place %.2f µs, step %.2f µs (admitting %d a step)",
		joinUS, placeUS, stepUS, st.Admitted/40)
	if joined-before > 128<<20 || drawn-before > 128<<20 {
		t.Fatalf("the room of %d users takes more than 128 MB", n)
	}
	if removed-before > 1<<20 {
		t.Fatalf("Remove gave back %s of %s", mb(drawn-removed), mb(drawn-before))
	}
}

// usedMemory is the server's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	return infoField(t, rdb, "memory", "used_memory:")
}

// usecPerEvalSha is cmdstat_evalsha's usec_per_call since CONFIG RESETSTAT.
func usecPerEvalSha(t *testing.T, rdb *redis.Client) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	t.Fatalf("no cmdstat_evalsha in %q", info)
	return 0
}

// infoField is the integer after prefix in INFO section.
func infoField(t *testing.T, rdb *redis.Client, section, prefix string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO %s", prefix, section)
	return 0
}
