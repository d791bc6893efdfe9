package service_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// partitionedConfig is a service behind proxy, with short timeouts and
// degraded mode's timings short: a cut or held proxy is a partition.
func partitionedConfig(t *testing.T, proxy *faultnet.Proxy, prefix string) service.Config {
	return service.Config{
		RedisURL:  "redis://" + proxy.Addr() + "/0?read_timeout=300ms&write_timeout=300ms&dial_timeout=300ms&max_retries=0",
		KeyPrefix: prefix, DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off",
		DegradedTick: 100 * time.Millisecond, DegradedGrace: 400 * time.Millisecond,
		// A node's role check before a command is a round trip the proxy
		// holds too: the check made at start-up holds through the test.
		NodeRecheck: time.Hour,
	}
}

// TestLateFirstRequestDoesNotTakeTheKey: a buyer's first request (key k1)
// is stuck in the network (the proxy holds what the service sends), so
// she gets 503 and the instance keeps the buy as unsure. Nobody reaches
// Redis; the database sells, and her retry with k1 buys there. Then her
// first request reaches Redis after all, which is not fenced (nobody
// reached it), and makes an order under k1 there, newer than her retry's.
// At the recovery it arrives voided. Her next retry with k1 must name the
// order she holds, confirmed, not the voided one (the repair gave Redis
// the newest order of the key, the voided one).
func TestLateFirstRequestDoesNotTakeTheKey(t *testing.T) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	a := startApp(t, partitionedConfig(t, proxy, redistest.Prefix(t, rdb)))
	a.createSale("s1", 1, "A", 3)
	key := []string{"Idempotency-Key", "k1"}

	proxy.HoldRequests(true)
	if r := a.call("POST", "/v1/sales/s1/orders", a.token("alice"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, key...); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a buy stuck in the network: %d %s", r.status, r.body)
	}
	a.waitMode("db")
	r := a.buyUntil("s1", "alice", key...)
	mustStatus(t, r, http.StatusCreated)
	held := r.json(t)["order_id"].(string)

	proxy.HoldRequests(false) // the first request reaches Redis now
	ctx := context.Background()
	waitfor.Until(t, waitfor.Patience, "the late request's order in redis", func() error {
		recs, err := redisOrders(ctx, rdb, a.svc.Engine().Key("s1", "orders"))
		if err == nil && len(recs) != 1 {
			err = fmt.Errorf("%d orders in redis", len(recs))
		}
		return err
	})
	a.waitMode("redis")
	snap, err := a.svc.Store().Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	voided := 0
	for _, o := range snap.Orders {
		if o.Status == inventory.OrderCancelled && o.IdempotencyKey == "k1" {
			voided++
		}
	}
	if voided != 1 {
		t.Fatalf("the late request's order did not arrive voided: %+v", snap.Orders)
	}
	for _, x := range []string{"first", "second"} {
		r = a.call("POST", "/v1/sales/s1/orders", a.token("alice"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, key...)
		if r.status != http.StatusOK || r.json(t)["order_id"] != held || r.json(t)["status"] != "confirmed" {
			t.Fatalf("alice's %s retry of k1 after the recovery: %d %s; she holds %s", x, r.status, r.body, held)
		}
	}
	if o, err := a.svc.Engine().Order(ctx, held); err != nil || o.Status == inventory.OrderCancelled {
		t.Fatalf("redis's record of %s: %+v %v", held, o, err)
	}
}

// TestMoveInTheStreamIsNotSoldAgain: stock 4 over two segments (2 and 2).
// Segment 0's buyers take its 2 units; a third buyer of segment 0 finds it
// empty, and the refill moves 1 unit from segment 1 to segment 0 before
// she buys it: 201. The order consumer is behind (lingering after its
// last round), so the move's two halves are still in the segments'
// streams when the partition starts. The hand-over must carry them with
// the orders: the database then counts 1 unit left in segment 1, not 2,
// and after the recovery 4 are sold of 4, not 5.
func TestMoveInTheStreamIsNotSoldAgain(t *testing.T) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	cfg := partitionedConfig(t, proxy, redistest.Prefix(t, rdb))
	// One reader for both segments, lingering long after a round that read
	// something: what the test does next stays in the streams.
	cfg.Pipeline.Readers, cfg.Pipeline.Linger = 1, 10*time.Second
	a := startApp(t, cfg)
	const stock = 4
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(stock), 2), http.StatusCreated)
	ctx := context.Background()
	segs, err := a.svc.Store().Segments(ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	waitfor.Until(t, waitfor.Patience, "the segments' creation in the database", func() error {
		for _, seg := range segs {
			in, err := pipeline.InFlight(ctx, rdb, a.svc.Engine(), seg)
			if err == nil && len(in) > 0 {
				err = fmt.Errorf("segment %s: %d events in flight", seg, len(in))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	// The consumer has just read: it lingers now.
	homed := func(seg string, n int) []string {
		var users []string
		for i := 0; len(users) < n; i++ {
			if u := fmt.Sprintf("u%d", i); segment.Home(segs, u) == seg {
				users = append(users, u)
			}
		}
		return users
	}
	home0, home1 := homed(segs[0], 8), homed(segs[1], 8)
	sold := 0
	for _, u := range home0[:3] { // the third falls through: a move from segment 1
		mustStatus(t, a.buyOne("hot", u), http.StatusCreated)
		sold++
	}
	if in, err := pipeline.InFlight(ctx, rdb, a.svc.Engine(), segs[1]); err != nil || len(in) != 1 || in[0].Type != inventory.EventMoved {
		t.Fatalf("segment 1's move out is not in its stream: %+v, %v", in, err)
	}
	proxy.Cut()
	a.waitMode("db")
	for _, u := range slices.Concat(home1[:4], home0[3:5]) {
		r := a.buyUntil("hot", u)
		switch {
		case r.status == http.StatusCreated:
			sold++
		case r.status == http.StatusConflict && r.code(t) == "sold_out":
		default:
			t.Fatalf("a buy while the database sells: %d %s", r.status, r.body)
		}
	}
	proxy.Restore()
	a.waitMode("redis")
	for _, u := range slices.Concat(home1[4:], home0[5:]) {
		r := a.buyOne("hot", u)
		switch {
		case r.status == http.StatusCreated:
			sold++
		case r.status == http.StatusConflict && r.code(t) == "sold_out":
		default:
			t.Fatalf("%s's buy after the recovery (%d sold before): %d %s", u, sold, r.status, r.body)
		}
	}
	if sold > stock {
		t.Errorf("%d units sold of %d", sold, stock)
	}
	a.settle("hot")
	if units := confirmedUnits(t, a, "hot"); units != int64(sold) || units > stock {
		t.Errorf("%d units confirmed in the database, %d sold, stock %d", units, sold, stock)
	}
	for _, seg := range segs {
		totals, err := a.svc.Store().Totals(ctx, seg)
		if err != nil || totals[0].Sold > totals[0].Stocked {
			t.Errorf("segment %s: %+v, %v", seg, totals, err)
		}
	}
}
