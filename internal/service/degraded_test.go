package service_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// shoppers buys one unit of sku A at a time, as users it never reuses except
// to try each one twice (the second try must never be a 201: the limit is
// one). It retries a 503 with the same user, and stops at the first
// sold_out or when ctx ends. hold pauses it.
type shoppers struct {
	a    *app
	sale string
	hold atomic.Bool

	mu       sync.Mutex
	statuses map[string]int    // status or error code -> replies
	acked    map[string]string // order id -> user
	byUser   map[string]int    // 201s per user
	byStatus map[string]int    // 201s by the order status in the reply: pending (Redis) or confirmed (the database)
	done     chan struct{}
}

func startShoppers(ctx context.Context, a *app, sale string, workers int) *shoppers {
	c := &shoppers{a: a, sale: sale, statuses: map[string]int{}, acked: map[string]string{}, byUser: map[string]int{},
		byStatus: map[string]int{}, done: make(chan struct{})}
	var next atomic.Int64
	var soldOut atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && !soldOut.Load() {
				user := fmt.Sprintf("u%d", next.Add(1))
				for try := 0; try < 2 && ctx.Err() == nil; {
					if c.hold.Load() {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					r := a.buyOne(sale, user)
					code := fmt.Sprint(r.status)
					if r.status >= 400 {
						code = r.code(a.t)
					}
					c.mu.Lock()
					c.statuses[code]++
					if r.status == http.StatusCreated {
						body := r.json(a.t)
						c.acked[body["order_id"].(string)] = user
						c.byUser[user]++
						c.byStatus[body["status"].(string)]++
					}
					c.mu.Unlock()
					if code == "sold_out" {
						soldOut.Store(true)
						break
					}
					if r.status == http.StatusServiceUnavailable {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					try++
				}
			}
		}()
	}
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// waitFor polls cond under the shoppers's lock until it holds, or fails.
func (c *shoppers) waitFor(what string, cond func(c *shoppers) bool) {
	c.a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		ok := cond(c)
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.a.t.Fatalf("timed out waiting for %s; replies so far %v", what, c.statuses)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// check asserts what holds whatever happened: no buyer over the limit,
// no more acknowledged than stock, and every acknowledged order confirmed
// in the database (the database may hold more: a buy whose reply was lost
// when Redis died).
func (c *shoppers) check(stock int) (confirmed int) {
	t := c.a.t
	t.Helper()
	for user, n := range c.byUser {
		if n > 1 {
			t.Errorf("user %s got %d orders with a limit of 1", user, n)
		}
	}
	if len(c.acked) > stock {
		t.Errorf("%d buys acknowledged of %d units", len(c.acked), stock)
	}
	db := c.a.svc.Store()
	for id := range c.acked {
		if o, err := db.Order(context.Background(), id); err != nil || o.Status != inventory.OrderConfirmed {
			t.Errorf("acknowledged order %s: %+v, %v", id, o, err)
		}
	}
	counts, err := db.CountOrders(context.Background(), c.sale)
	if err != nil {
		t.Fatal(err)
	}
	confirmed = counts[inventory.OrderConfirmed]
	if confirmed < len(c.acked) || confirmed > stock {
		t.Errorf("%d confirmed orders in the database, %d acknowledged, stock %d", confirmed, len(c.acked), stock)
	}
	return confirmed
}

func (a *app) sellMode() map[string]any {
	return a.admin("GET", "/v1/admin/degraded", nil).json(a.t)
}

func degradedConfig(redisAddr string) service.Config {
	return service.Config{RedisURL: "redis://" + redisAddr + "/0", RateLimitUser: "off",
		DegradedTick: 100 * time.Millisecond, DegradedGrace: 400 * time.Millisecond}
}

// killRedisAfterAThird starts the service on srv and PostgreSQL, sells
// sale s1 (stock units of A, limit 1) to a crowd of 8, and SIGKILLs srv
// once a third is sold. The crowd goes on until the sale sells out or the
// returned context (60 s) ends.
func killRedisAfterAThird(t *testing.T, srv *redistest.Server, cfg service.Config, stock int) (context.Context, *app, *shoppers) {
	t.Helper()
	cfg.DatabaseURL = dbtest.PostgresURL(t)
	a := startApp(t, cfg)
	a.createSale("s1", 1, "A", int64(stock))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := startShoppers(ctx, a, "s1", 8)
	c.waitFor("a third sold from redis", func(c *shoppers) bool { return len(c.acked) >= stock/3 })
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	return ctx, a, c
}

// TestRedisStoppedMidSaleDegradedModeTakesOver: the service's Redis (AOF
// always) is killed a third of the way through a sell-out. After the grace
// period the database sells; Redis comes back, is repaired from the
// database and sells the rest. Nothing is sold twice: no more orders than
// stock, no buyer over the limit, every acknowledged order confirmed, and
// the books reconcile.
func TestRedisStoppedMidSaleDegradedModeTakesOver(t *testing.T) {
	const stock = 300
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx, a, c := killRedisAfterAThird(t, srv, degradedConfig(srv.Addr()), stock)
	c.waitFor("the database selling", func(c *shoppers) bool { return c.byStatus["confirmed"] >= stock/6 })
	c.hold.Store(true) // let Redis come back with nobody buying, so that it sells some again
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.sellMode()["mode"] != "redis" {
		if time.Now().After(deadline) {
			t.Fatalf("redis never sold again: %v", a.sellMode())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	pendingBefore := c.byStatus["pending"]
	c.mu.Unlock()
	c.hold.Store(false)
	<-c.done
	if ctx.Err() != nil {
		t.Fatalf("the sale did not sell out: %v", c.statuses)
	}
	a.settle("s1")
	t.Logf("replies %v; acknowledged %d: %v; from redis after its return: %d", c.statuses, len(c.acked), c.byStatus, c.byStatus["pending"]-pendingBefore)
	confirmed := c.check(stock)
	if c.byStatus["pending"] == pendingBefore {
		t.Error("redis sold nothing after it came back")
	}
	st, err := a.svc.Engine().Stock(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if it := st.Items[0]; it.Remaining != 0 || it.Sold != int64(confirmed) {
		t.Errorf("after the sell-out redis says %+v; the database has %d orders", it, confirmed)
	}
	m := a.sellMode()
	if m["mode"] != "redis" || m["epoch"].(float64) != 3 || m["setting"] != "auto" {
		t.Errorf("sell mode after the round trip: %v", m)
	}
	if !strings.Contains(string(a.call("GET", "/metrics", "", nil).body), "seckill_degraded_mode 0") {
		t.Error("seckill_degraded_mode is not 0 once redis sells again")
	}
}

// TestDegradedModeHandsOverAcknowledgedOrders: orders Redis acknowledged
// that never reached the database through the stream (the consumer never
// read this sale, and Redis, without persistence, loses them when it dies)
// are handed to the database by the instance that acknowledged them before
// the database sells: it sells only what is left, and every acknowledged
// order is kept.
func TestDegradedModeHandsOverAcknowledgedOrders(t *testing.T) {
	const stock = 300
	srv := redistest.StartServer(t)
	cfg := degradedConfig(srv.Addr())
	cfg.Pipeline.DiscoverAll = time.Hour // the consumer never finds the sale created below
	ctx, a, c := killRedisAfterAThird(t, srv, cfg, stock)
	<-c.done
	if ctx.Err() != nil {
		t.Fatalf("the sale did not sell out on the database: %v", c.statuses)
	}
	t.Logf("replies %v; acknowledged %d: %v", c.statuses, len(c.acked), c.byStatus)
	if c.byStatus["confirmed"] == 0 {
		t.Fatal("the database sold nothing")
	}
	if confirmed := c.check(stock); confirmed != stock {
		t.Errorf("%d orders in the database after the sell-out, want %d", confirmed, stock)
	}
	if m := a.sellMode(); m["mode"] != "db" {
		t.Errorf("sell mode with redis gone: %v", m)
	}
	// Not ready (the contract: Redis and the database must answer), but
	// saying that the database sells.
	if r := a.call("GET", "/readyz", "", nil); r.status != http.StatusServiceUnavailable || r.json(t)["sells"] != "db" {
		t.Errorf("readyz while the database sells: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(a.call("GET", "/metrics", "", nil).body), "seckill_degraded_mode 1") {
		t.Error("seckill_degraded_mode is not 1 while the database sells")
	}
}

// TestOperatorSwitch: force makes the database sell while Redis is up;
// auto brings Redis back, repaired with what the database sold (its
// orders count against the limit and the stock); off refuses to sell from
// the database when Redis is gone. Bad settings and buyers are refused.
func TestOperatorSwitch(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
			a := startApp(t, cfg)
			a.createSale("s1", 1, "A", 10)
			waitMode := func(mode string) {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for a.sellMode()["mode"] != mode {
					if time.Now().After(deadline) {
						t.Fatalf("mode never became %s: %v", mode, a.sellMode())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			mustStatus(t, a.buyOne("s1", "r1"), http.StatusCreated) // from Redis

			for _, bad := range []any{map[string]any{"setting": "sometimes"}, map[string]any{}, map[string]any{"setting": "force", "x": 1}} {
				mustStatus(t, a.admin("PUT", "/v1/admin/degraded", bad), http.StatusBadRequest)
			}
			mustStatus(t, a.call("PUT", "/v1/admin/degraded", a.token("r1"), map[string]any{"setting": "force"}), http.StatusForbidden)
			if m := a.sellMode(); m["setting"] != "auto" || m["mode"] != "redis" {
				t.Fatalf("refused settings changed the mode: %v", m)
			}

			r := a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "force"})
			mustStatus(t, r, http.StatusOK)
			waitMode("db")
			var dbOrder string
			for deadline := time.Now().Add(waitfor.Patience); dbOrder == ""; time.Sleep(10 * time.Millisecond) {
				r := a.buyOne("s1", "d1")
				switch {
				case r.status == http.StatusCreated && r.json(t)["status"] == "confirmed":
					dbOrder = r.json(t)["order_id"].(string)
				case r.status != http.StatusServiceUnavailable || time.Now().After(deadline):
					t.Fatalf("a buy while the database sells: %d %s", r.status, r.body)
				}
			}
			if r := a.buyOne("s1", "r1"); r.code(t) != "limit_exceeded" {
				t.Fatalf("the database let a Redis buyer buy again: %d %s", r.status, r.body)
			}
			mustStatus(t, a.call("POST", "/v1/orders/"+dbOrder+"/cancel", a.token("d1"), nil), http.StatusOK)
			r = a.buyOne("s1", "d2")
			mustStatus(t, r, http.StatusCreated)
			sale := a.call("GET", "/v1/sales/s1", "", nil).json(t)
			if rem := sale["items"].([]any)[0].(map[string]any)["remaining"]; rem != float64(8) {
				t.Fatalf("remaining while the database sells: %v", rem)
			}

			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
			waitMode("redis")
			if r := a.buyOne("s1", "d2"); r.code(t) != "limit_exceeded" {
				t.Fatalf("redis, repaired, let a database buyer buy again: %d %s", r.status, r.body)
			}
			r = a.buyOne("s1", "d1") // cancelled on the database: may buy again
			mustStatus(t, r, http.StatusCreated)
			if r.json(t)["items"].([]any)[0].(map[string]any)["remaining"] != float64(7) {
				t.Fatalf("redis's stock after the repair: %s", r.body)
			}
			a.settle("s1")
			m := a.sellMode()
			if m["epoch"] != float64(3) || len(m["instances"].([]any)) != 1 {
				t.Errorf("after force and auto: %v", m)
			}
			// A fence a recovery left behind (epoch 2, before the mode's 3) is
			// lifted by the next buy; a newer one (a switch this instance has
			// not heard of) is obeyed.
			eng := a.svc.Engine()
			if _, err := eng.Fence(context.Background(), "s1", 2); err != nil {
				t.Fatal(err)
			}
			mustStatus(t, a.buyOne("s1", "f1"), http.StatusCreated)
			if _, err := eng.Fence(context.Background(), "s1", 4); err != nil {
				t.Fatal(err)
			}
			mustStatus(t, a.buyOne("s1", "f2"), http.StatusServiceUnavailable)
			if err := eng.Unfence(context.Background(), "s1", math.MaxInt64-1); err != nil {
				t.Fatal(err)
			}
			a.settle("s1")
			audit, err := a.svc.Store().AuditLog(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			set := 0
			for _, e := range audit {
				if e.Action == "degraded mode set" {
					set++
				}
			}
			if set != 2 {
				t.Errorf("%d operator settings journaled, want 2", set)
			}
		})
	}
}

// TestDegradedModeOff: with degraded mode off, Redis gone means 503, and
// the database never sells.
func TestDegradedModeOff(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := degradedConfig(srv.Addr())
	cfg.DatabaseURL = dbtest.SQLiteURL(t)
	a := startApp(t, cfg)
	a.createSale("s1", 1, "A", 10)
	mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "off"}), http.StatusOK)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(5 * cfg.DegradedGrace)
	for i := 0; time.Now().Before(until); i++ {
		if r := a.buyOne("s1", fmt.Sprintf("u%d", i)); r.status != http.StatusServiceUnavailable {
			t.Fatalf("a buy with redis gone and degraded mode off: %d %s", r.status, r.body)
		}
	}
	if m := a.sellMode(); m["mode"] != "redis" {
		t.Fatalf("the mode changed although degraded mode is off: %v", m)
	}
	counts, err := a.svc.Store().CountOrders(context.Background(), "s1")
	if err != nil || counts[inventory.OrderConfirmed] != 0 {
		t.Fatalf("orders in the database: %v, %v", counts, err)
	}
}
