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
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
)

// TestAdvMoveFinishedByAnotherIsHandedOverWhole: instance A moves a unit
// from segment p:1 to p:0 (2 units each) and stops right after the out
// half (its replies never come: it died there). Instance B finishes the
// move (FinishPendingMoves): the unit reaches p:0, and B's ring of acks
// keeps that in half. The move's out half is still in p:1's stream (no
// consumer has stored it: A's own consumer died holding it, say) when the
// database takes over. B hands over the in half only: the database counts
// the unit in p:0, and still in p:1, and sells it twice — 5 units of 4.
// The instance that finishes a move knows its out half ran (the record it
// finished it from): it must hand that half over too.
func TestAdvMoveFinishedByAnotherIsHandedOverWhole(t *testing.T) {
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
	engA := inventory.New(rA, inventory.Options{Prefix: prefix})
	engB := inventory.New(rB, inventory.Options{Prefix: prefix, Moves: f})
	f.Wire(failover.Parts{Engine: engB, Store: db, Streams: streams{rB, engB}, Consumer: "b",
		Ping: func(ctx context.Context) error { return rB.Ping(ctx).Err() }})
	for _, id := range []string{"p:0", "p:1"} {
		sale := inventory.Sale{ID: id, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 2}}}
		if err := db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := engB.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	if err := engA.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	f.Step(ctx)

	// A dies right after its out half: the unit left p:1, in no segment.
	proxy.HoldRepliesAfter([]byte("$3\r\nout\r\n"))
	if n, err := engA.Move(ctx, "p:1", "p:0", "A", 1); err == nil {
		t.Fatalf("a move whose out half's reply never came: moved %d", n)
	}
	proxy.Cut()
	// B finishes it.
	if n, err := engB.FinishPendingMoves(ctx, 0); n != 1 || err != nil {
		t.Fatalf("FinishPendingMoves: %d, %v", n, err)
	}
	if rem, err := engB.Remaining(ctx, "A", "p:0", "p:1"); err != nil || rem[0] != 3 || rem[1] != 1 {
		t.Fatalf("p:0, p:1 in redis after the move: %v, %v", rem, err)
	}

	// The database takes over; no consumer has read the streams.
	if _, err := db.SetSetting(ctx, store.SettingForce); err != nil {
		t.Fatal(err)
	}
	sold := 0
	for i := 0; i < 600; i++ {
		f.Step(ctx)
		segment := fmt.Sprintf("p:%d", i%2)
		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: segment, UserID: fmt.Sprintf("u%d", i), Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Buy(ctx, c)
		switch {
		case err == nil:
			sold++
		case errors.Is(err, inventory.ErrSoldOut):
		case errors.Is(err, failover.ErrNobodySells):
			time.Sleep(10 * time.Millisecond)
		default:
			t.Fatalf("a buy while the database sells: %v", err)
		}
	}
	if sold > 4 {
		t.Errorf("the database sold %d units of the 4 stocked over p:0 and p:1", sold)
	}
}
