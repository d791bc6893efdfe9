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
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// The Redis CPU of one pass that archives many sales at once, on a
// redis-server of the test's own that holds many other keys (of live
// sales, under the same prefix: SCAN walks them all, and hands back every
// one of the prefix). It logs the pass's Redis CPU (used_cpu_sys +
// used_cpu_user), its SCAN calls and their time. A measurement, not run
// by default:
//
//	SECKILL_ARCHIVE_PASS=500x20000 go test -count=1 -v -run TestArchivePassCost ./internal/archive/
//
// archives 500 sales on a Redis holding 20,000 other keys.
func TestArchivePassCost(t *testing.T) {
	v := os.Getenv("SECKILL_ARCHIVE_PASS")
	if v == "" {
		t.Skip("a measurement: SECKILL_ARCHIVE_PASS=<sales>x<other keys> runs it")
	}
	s, k, ok := strings.Cut(v, "x")
	sales, err1 := strconv.Atoi(s)
	others, err2 := strconv.Atoi(k)
	if !ok || err1 != nil || err2 != nil || sales < 1 || others < 0 {
		t.Fatalf("SECKILL_ARCHIVE_PASS=%q: want <sales>x<other keys>", v)
	}
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRig(t, rdb, "seckill", dbtest.PostgresURL(t))

	// The other keys: five of each live sale.
	names := []string{"sale", "bought", "orders", "idem", "events"}
	p := rdb.Pipeline()
	for i := range others {
		p.Set(r.ctx, r.eng.Key(fmt.Sprintf("live%06d", i/len(names)), names[i%len(names)]), "x", 0)
		if p.Len() == 1000 || i == others-1 {
			if _, err := p.Exec(r.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The sales: each restocked once (an op:* marker the purge removes),
	// sold once, closed, its events stored.
	ids := make([]string, sales)
	buys := make([]inventory.BuyRequest, sales)
	for i := range ids {
		ids[i] = fmt.Sprintf("cost%06d", i)
		sale := inventory.Sale{ID: ids[i], PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := r.db.CreateSale(r.ctx, store.Sale{Sale: sale, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := r.eng.CreateSale(r.ctx, sale); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Restock(r.ctx, ids[i], "A", 1); err != nil {
			t.Fatal(err)
		}
		buys[i] = inventory.BuyRequest{SaleID: ids[i], UserID: "u", Lines: []inventory.Line{{SKU: "A", Qty: 1}}}
	}
	for _, res := range r.eng.BuyMany(r.ctx, buys) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	for _, id := range ids {
		if _, _, err := r.eng.Close(r.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(r.ctx)
	done := make(chan struct{})
	c := pipeline.New(rdb, r.eng, r.db, pipeline.Options{Name: "cost", Block: 20 * time.Millisecond})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	r.waitArchivable(10*waitfor.Patience, ids)
	stop() // the consumer's reads are no part of the pass
	<-done
	keys := rdb.DBSize(r.ctx).Val()

	arch := archive.New(r.eng, r.db, archive.Options{})
	before := redistest.ReadCounters(t, rdb)
	began := time.Now()
	archived, waiting, err := arch.Pass(r.ctx)
	took := time.Since(began)
	after := redistest.ReadCounters(t, rdb)
	if err != nil || archived != sales || waiting != 0 {
		t.Fatalf("pass: %d archived, %d waiting, %v; want all %d archived", archived, waiting, err, sales)
	}
	for _, id := range ids {
		if n := len(rdb.Keys(r.ctx, r.eng.Key(id, "*")).Val()); n != 1 { // the archived mark
			t.Fatalf("sale %s: %d keys left, want its archived mark", id, n)
		}
	}
	t.Logf("one pass archived %d sales on a Redis of %d keys in %v: Redis CPU %.0f ms; SCAN %d calls, %.1f ms; "+
		"EVALSHA %d calls, %.1f ms; UNLINK %d calls",
		sales, keys, took.Round(time.Millisecond), 1000*(after.CPU-before.CPU),
		after.Calls["scan"]-before.Calls["scan"], float64(after.Usec["scan"]-before.Usec["scan"])/1000,
		after.Calls["evalsha"]-before.Calls["evalsha"], float64(after.Usec["evalsha"]-before.Usec["evalsha"])/1000,
		after.Calls["unlink"]-before.Calls["unlink"])
}
