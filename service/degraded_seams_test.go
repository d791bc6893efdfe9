package service_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/service"
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
