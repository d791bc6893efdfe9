package failover_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestMoveOfUnknownOutcomeIsNotSoldAgain: an instance moves a unit from
// segment p:1 to p:0 (2 units each) and loses the out half's reply: the
// unit left p:1 in Redis, and the instance cannot tell. The database takes
// over before the out half's event reaches it through the stream. The
// instance hands the half over as unsure, and the database holds the unit
// it may have taken: it sells p:1's other unit only. The event arrives
// later and takes the unit out of p:1 for good: 1 sold of the 1 left, not
// 2 (the unit is in the move, which any instance can finish).
func TestMoveOfUnknownOutcomeIsNotSoldAgain(t *testing.T) {
	ctx := context.Background()
	rB := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rB)
	proxy := faultnet.Start(t, rB.Options().Addr)
	rA := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rA.Close() })
	db, err := store.Open(ctx, dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	f := failover.New(failover.Config{Tick: time.Hour, Grace: 300 * time.Millisecond}) // ticks only when the test says
	engA, engB := inventory.New(rA, inventory.Options{Prefix: prefix, Moves: f}), inventory.New(rB, inventory.Options{Prefix: prefix})
	f.Wire(failover.Parts{Engine: engA, Store: db, Streams: streams{rB, engB}, Consumer: "a",
		Ping: func(ctx context.Context) error { return rA.Ping(ctx).Err() }})
	for _, id := range []string{"p:0", "p:1"} {
		sale := inventory.Sale{ID: id, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 2}}}
		if err := db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := engB.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	if err := engA.Preload(ctx); err != nil { // the move's script runs by its SHA, not after a NOSCRIPT whose reply is lost
		t.Fatal(err)
	}
	f.Step(ctx)

	// The replies are lost from the out half on: the move's note in the
	// index of pending moves, sent first, gets its answer.
	proxy.HoldRepliesAfter([]byte("$3\r\nout\r\n"))
	if n, err := engA.Move(ctx, "p:1", "p:0", "A", 1); !inventory.OutcomeUnknown(err) {
		t.Fatalf("a move whose replies are lost: %d, %v", n, err)
	}
	if rem, err := engB.Remaining(ctx, "A", "p:1"); err != nil || rem[0] != 1 {
		t.Fatalf("p:1 in redis after the move out: %v, %v", rem, err)
	}
	if _, err := db.SetSetting(ctx, store.SettingForce); err != nil {
		t.Fatal(err)
	}
	sold := 0
	for i := 0; ; i++ {
		f.Step(ctx)
		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "p:1", UserID: fmt.Sprintf("u%d", i), Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Buy(ctx, c)
		if errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err == nil {
			sold++
		} else if !errors.Is(err, failover.ErrNobodySells) || i > 500 {
			t.Fatalf("a buy while the database takes over: %v", err)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if sold != 1 {
		t.Errorf("the database sold %d of p:1's units, 1 of which may be moving", sold)
	}

	// The order consumer reads the streams again: the move out arrives.
	cctx, stop := context.WithCancel(ctx)
	cons := pipeline.New(rB, engB, db, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, Linger: -1})
	done := make(chan struct{})
	go func() { defer close(done); _ = cons.Run(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitfor.Until(t, waitfor.Patience, "the move out in the database", func() error {
		totals, err := db.Totals(ctx, "p:1")
		if err == nil && totals[0].Stocked != 1 {
			err = fmt.Errorf("p:1 stocked %d", totals[0].Stocked)
		}
		return err
	})
	if totals, err := db.Totals(ctx, "p:1"); err != nil || totals[0].Sold > totals[0].Stocked {
		t.Errorf("p:1 in the database: %+v, %v: sold more than stocked", totals, err)
	}
}
