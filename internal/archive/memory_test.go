package archive_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// Archiving gives Redis back the memory of the sales it removes: sales
// sold to buyers, closed and archived bring used_memory back to within 5%
// of where it started, on a redis-server of the test's own (nothing else
// writes to it). 5 sales × 500 buyers by default;
//
//	SECKILL_ARCHIVE_MEMORY=100x10000 go test -count=1 -v -run TestArchiveGivesMemoryBack ./archive/
//
// runs the 100 sales × 10,000 buyers and logs the numbers.
func TestArchiveGivesMemoryBack(t *testing.T) {
	sales, buyers := 5, 500
	if v := os.Getenv("SECKILL_ARCHIVE_MEMORY"); v != "" {
		s, b, ok := strings.Cut(v, "x")
		var err1, err2 error
		sales, err1 = strconv.Atoi(s)
		buyers, err2 = strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || sales < 1 || buyers < 1 {
			t.Fatalf("SECKILL_ARCHIVE_MEMORY=%q: want <sales>x<buyers>", v)
		}
	}
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, rdb, "seckill", dbtest.PostgresURL(t))
	if err := r.eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.consume("mem")

	// A first round warms Redis up: it allocates its statistics of each
	// command (with latency-tracking, a histogram per command, about
	// 40 KB each) the first time the command runs, once, whatever the
	// sales. The baseline is taken after it.
	sellCloseArchive(t, r, rdb, "warm", 2, 100)
	// Redis shrinks the buffers of a client idle for 2 s (clientsCron): the
	// pipelining client's are big right after its buys. Both ends are
	// measured once they are back.
	// And the slow log keeps the arguments of the last 128 slow commands
	// (a pipeline's big buy batches, over 10 ms on a busy machine): up to
	// about 0.5 MB whatever the number of sales. It is emptied before both.
	settle := func() {
		time.Sleep(3 * time.Second)
		if err := rdb.SlowLogReset(r.ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	memoryParts(t, r.ctx, rdb) // the commands the test itself sends, warmed up too
	settle()
	before, beforeParts := usedMemory(t, r.ctx, rdb), memoryParts(t, r.ctx, rdb)
	live, sold := sellCloseArchive(t, r, rdb, "mem", sales, buyers)
	settle()
	after := usedMemory(t, r.ctx, rdb)
	t.Logf("before: %s; after: %s", beforeParts, memoryParts(t, r.ctx, rdb))
	n := int64(sales * buyers)
	t.Logf("%d sales × %d buyers (sold in %v): used_memory before %d B, live %d B (%.1f MB, %d B per buyer), after archiving %d B (%+.2f%%)",
		sales, buyers, sold.Round(time.Millisecond), before, live, float64(live)/1e6, (live-before)/n, after,
		100*float64(after-before)/float64(before))
	if live-before < n*50 {
		t.Fatalf("live sales took %d B: the measurement measured nothing", live-before)
	}
	if d := after - before; d > before/20 || d < -before/20 {
		t.Fatalf("used_memory after archiving %d B, before %d B: more than 5%% apart", after, before)
	}
}

func usedMemory(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	return infoField(t, ctx, rdb, "memory", "used_memory")
}

func infoField(t *testing.T, ctx context.Context, rdb *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// sellCloseArchive creates sales, sells each to buyers users, waits for
// every order to be in the database (live is used_memory then), closes
// and archives them, and waits for Redis to free them.
func sellCloseArchive(t *testing.T, r *rig, rdb *redis.Client, name string, sales, buyers int) (live int64, sold time.Duration) {
	t.Helper()
	ids := make([]string, sales)
	began := time.Now()
	for s := range ids {
		ids[s] = fmt.Sprintf("%s%03d", name, s)
		sale := inventory.Sale{ID: ids[s], PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: int64(buyers)}}}
		if err := r.db.CreateSale(r.ctx, store.Sale{Sale: sale, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := r.eng.CreateSale(r.ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	// Every buyer buys once, with an idempotency key (as the service's
	// buyers do), a thousand buys to a pipeline.
	reqs := make([]inventory.BuyRequest, 0, 1000)
	flush := func() {
		for _, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		reqs = reqs[:0]
	}
	for b := range buyers {
		for _, id := range ids {
			user := "user-" + strconv.Itoa(b)
			reqs = append(reqs, inventory.BuyRequest{SaleID: id, UserID: user, Lines: []inventory.Line{{SKU: "A", Qty: 1}},
				IdempotencyKey: "k-" + user})
			if len(reqs) == cap(reqs) {
				flush()
			}
		}
	}
	flush()
	sold = time.Since(began)
	// Live: every order in the database, the streams trimmed.
	waitfor.Until(t, 10*waitfor.Patience, "every order to be stored", func() error {
		for _, id := range ids {
			if n := r.confirmed(id); n != buyers {
				return fmt.Errorf("sale %s: %d of %d stored", id, n, buyers)
			}
			if n, err := rdb.XLen(r.ctx, r.eng.EventsKey(id)).Result(); err != nil || n > 0 {
				return fmt.Errorf("sale %s: %d stream entries left (%v)", id, n, err)
			}
		}
		return nil
	})
	live = usedMemory(t, r.ctx, rdb)
	var parts []string
	for _, name := range []string{"sale", "bought", "orders", "idem", "events"} {
		n, err := rdb.MemoryUsage(r.ctx, r.eng.Key(ids[0], name), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s %d B", name, n))
	}
	t.Logf("%s: live, one sale of %d buyers holds %s", name, buyers, strings.Join(parts, ", "))

	for _, id := range ids {
		if _, _, err := r.eng.Close(r.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	arch := archive.New(r.eng, r.db, archive.Options{})
	waitfor.Until(t, 10*waitfor.Patience, "every sale to be archived", func() error {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			return err
		}
		for _, id := range ids {
			if r.hasSale(id) {
				return fmt.Errorf("sale %s still in Redis", id)
			}
		}
		return nil
	})
	// UNLINK frees big values in a background thread.
	waitfor.Until(t, waitfor.Patience, "the lazy frees to finish", func() error {
		if n := infoField(t, r.ctx, rdb, "memory", "lazyfree_pending_objects"); n != 0 {
			return fmt.Errorf("%d objects to free", n)
		}
		return nil
	})
	return live, sold
}

// memoryParts is what INFO says used_memory is made of.
func memoryParts(t *testing.T, ctx context.Context, rdb *redis.Client) string {
	var parts []string
	for _, f := range []string{"used_memory_dataset", "used_memory_overhead", "mem_clients_normal", "used_memory_scripts"} {
		parts = append(parts, fmt.Sprintf("%s %d", f, infoField(t, ctx, rdb, "memory", f)))
	}
	parts = append(parts, fmt.Sprintf("slowlog %d", rdb.SlowLogLen(ctx).Val()))
	parts = append(parts, fmt.Sprintf("keys %d", rdb.DBSize(ctx).Val()))
	return strings.Join(parts, ", ")
}
