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

// TestAcknowledgedOnOneInstanceUnsureOnAnother: instance A sends alice's
// buy (key k1) and loses its replies: it answers her 503 and keeps the buy
// as unsure. Her retry of k1 goes to instance B, where Redis replays the
// order and B acknowledges it. The database takes over: A hands the order
// over as unsure first, the order consumer then stores it (voided, as an
// unsure order that arrives), and only then does B hand it over as
// acknowledged. An order any instance acknowledged is never voided: it
// stays alice's, and the database does not sell its unit (the last) again.
func TestAcknowledgedOnOneInstanceUnsureOnAnother(t *testing.T) {
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
	engA, engB := inventory.New(rA, inventory.Options{Prefix: prefix}), inventory.New(rB, inventory.Options{Prefix: prefix})
	sale := inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
	if err := db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
		t.Fatal(err)
	}
	if err := engB.CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	instance := func(name string, eng *inventory.Engine, rdb *redis.Client) *failover.Seller {
		f := failover.New(failover.Config{Tick: time.Hour, Grace: grace}) // ticks only when the test says
		f.Wire(failover.Parts{Engine: eng, Store: db, Streams: streams{rB, engB}, Consumer: name,
			Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
		f.Step(ctx)
		return f
	}
	if err := engA.Preload(ctx); err != nil { // the buy's script runs by its SHA, not after a NOSCRIPT whose reply is lost
		t.Fatal(err)
	}
	a, b := instance("a", engA, rA), instance("b", engB, rB)
	buy := func(user, key string) inventory.CheckedBuy {
		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user, IdempotencyKey: key, Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	proxy.DropReplies(true)
	if rc, err := a.Buy(ctx, buy("alice", "k1")); !inventory.OutcomeUnknown(err) {
		t.Fatalf("a buy whose replies are lost: %+v, %v", rc, err)
	}
	rc, err := b.Buy(ctx, buy("alice", "k1"))
	if err != nil || !rc.Replayed {
		t.Fatalf("alice's retry on B: %+v, %v; want a replay of the order A's buy made", rc, err)
	}
	order := rc.Order.ID

	if _, err := db.SetSetting(ctx, store.SettingForce); err != nil {
		t.Fatal(err)
	}
	a.Step(ctx) // switches to the database
	a.Step(ctx) // hands over: the order, unsure
	// The order consumer, a moment behind, stores it now: voided.
	cctx, stop := context.WithCancel(ctx)
	cons := pipeline.New(rB, engB, db, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond, Linger: -1})
	done := make(chan struct{})
	go func() { defer close(done); _ = cons.Run(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitfor.Until(t, waitfor.Patience, "the order stored", func() error {
		o, err := db.Order(ctx, order)
		if err == nil && o.Status != inventory.OrderCancelled {
			err = fmt.Errorf("stored %s, want it voided first", o.Status)
		}
		return err
	})
	b.Step(ctx) // hands over: the order, acknowledged

	// The database sells once both have handed over and the grace is over.
	var last error
	waitfor.Until(t, waitfor.Patience, "the database sells", func() error {
		a.Step(ctx)
		b.Step(ctx)
		_, last = b.Buy(ctx, buy("bob", ""))
		if errors.Is(last, failover.ErrNobodySells) {
			return last
		}
		return nil
	})
	if !errors.Is(last, inventory.ErrSoldOut) {
		t.Errorf("bob's buy of the unit alice holds: %v, want sold out", last)
	}
	if o, err := db.Order(ctx, order); err != nil || o.Status != inventory.OrderConfirmed {
		t.Errorf("alice's acknowledged order in the database: %+v, %v", o, err)
	}
	totals, err := db.Totals(ctx, "s1")
	if err != nil || totals[0].Sold > totals[0].Stocked {
		t.Errorf("%+v, %v: sold more than stocked", totals, err)
	}
}
