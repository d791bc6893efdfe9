package service_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// waitMode waits until the sell mode is mode, and until this instance has
// heard of it: whether it sells from Redis follows the modes it reads (its
// ticks, which a loaded machine may delay past the test's next request) or
// sets itself. The mode row says redis as soon as a recovery ends, which
// this instance hears of a moment later if it ran the recovery, at its next
// tick if another instance did; it says db as soon as an operator forces
// it, while the instance sells from Redis until its next tick
// (TestPaymentWhileTheDatabaseSells's buyer got an order from Redis, then
// limit_exceeded from the database for ever).
func (a *app) waitMode(mode string) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for a.sellMode()["mode"] != mode || a.svc.RedisSells() != (mode == "redis") {
		if time.Now().After(deadline) {
			a.t.Fatalf("the mode never became %s here: %v (redis sells here: %v)", mode, a.sellMode(), a.svc.RedisSells())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// buyUntil sends the buy until it is answered otherwise than 503 (the
// grace period of a switch), and returns that answer.
func (a *app) buyUntil(sale, user string, headers ...string) reply {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, headers...)
		if r.status != http.StatusServiceUnavailable {
			return r
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s's buy still answered 503: %s", user, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forceDegraded switches the database to selling and waits until it does.
func (a *app) forceDegraded() {
	a.t.Helper()
	mustStatus(a.t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "force"}), http.StatusOK)
	a.waitMode("db")
}

// TestUnknownOutcomeBuyIsNotSoldTwice: a buy runs in Redis, but every reply
// is lost (a partition right after Redis ran it: the proxy lets requests
// through and drops the answers), so the buyer gets 503 and the service
// never learns of its order. No instance reaches Redis, the database
// sells: the buyer's retry with the same idempotency key, and the rest of
// the stock. When Redis is back, the recovery drains the stream, where the
// lost buy's order still is: it must not become a second order of the
// buyer, under the same key, over the stock. The instance handed it over
// as unsure, and it arrives voided.
func TestUnknownOutcomeBuyIsNotSoldTwice(t *testing.T) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	cfg := service.Config{
		RedisURL:  "redis://" + proxy.Addr() + "/0?read_timeout=300ms&write_timeout=300ms&dial_timeout=300ms&max_retries=0",
		KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off",
		DegradedTick: 100 * time.Millisecond, DegradedGrace: 400 * time.Millisecond,
		// A node's role check before a command is a round trip whose reply
		// the proxy drops too: the buy must reach Redis, so the check made
		// at start-up holds through the test (with the tick's Recheck, a
		// loaded machine let it run out between the sale's creation and the
		// buy, and the buy was refused unsent).
		NodeRecheck: time.Hour,
	}
	a := startApp(t, cfg)
	const stock = 3
	a.createSale("s1", 1, "A", stock)

	proxy.DropReplies(true)
	key := []string{"Idempotency-Key", "k1"}
	if r := a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, key...); r.status == http.StatusCreated {
		t.Fatalf("a buy whose replies are all lost was acknowledged: %s", r.body)
	}
	// The request did reach Redis: the lost order is there.
	if recs, err := redisOrders(context.Background(), rdb, a.svc.Engine().Key("s1", "orders")); err != nil || len(recs) != 1 {
		t.Fatalf("orders in redis after the lost reply: %v, %v", recs, err)
	}
	a.waitMode("db")
	r := a.buyUntil("s1", "u1", key...)
	mustStatus(t, r, http.StatusCreated)
	retried := r.json(t)["order_id"].(string)
	for _, user := range []string{"u2", "u3"} {
		mustStatus(t, a.buyUntil("s1", user), http.StatusCreated)
	}
	if r := a.buyUntil("s1", "u4"); r.code(t) != "sold_out" {
		t.Fatalf("the database sold more than its stock: %d %s", r.status, r.body)
	}

	proxy.DropReplies(false)
	a.waitMode("redis") // the recovery has drained the stream into the database
	snap, err := a.svc.Store().Snapshot(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	live, byUser, byKey, voided := 0, map[string]int{}, map[string]int{}, 0
	for _, o := range snap.Orders {
		if o.Status == inventory.OrderConfirmed {
			live++
			byUser[o.UserID]++
			byKey[o.IdempotencyKey]++
		} else if o.UserID == "u1" {
			voided++
		}
	}
	if live != stock || byUser["u1"] != 1 || byKey["k1"] != 1 {
		t.Errorf("%d live orders of %d units, %d of them u1's (limit 1), %d under key k1: %+v", live, stock, byUser["u1"], byKey["k1"], snap.Orders)
	}
	if voided != 1 {
		t.Errorf("the lost buy's order did not arrive voided: %+v", snap.Orders)
	}
	if o, err := a.svc.Store().Order(context.Background(), retried); err != nil || o.Status != inventory.OrderConfirmed {
		t.Errorf("the order the database sold u1: %+v, %v", o, err)
	}
	st, err := a.svc.Engine().Stock(context.Background(), "s1")
	if err != nil || st.Items[0].Remaining != 0 || st.Items[0].Sold != stock {
		t.Errorf("redis after the recovery: %+v, %v", st.Items, err)
	}
	if r := a.buyOne("s1", "u5"); r.code(t) != "sold_out" {
		t.Errorf("redis sold past the stock after the recovery: %d %s", r.status, r.body)
	}
	a.settle("s1") // and the books are consistent
	// The key names the order the buyer has, in Redis too.
	r = a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, key...)
	if r.status != http.StatusOK || r.json(t)["order_id"] != retried {
		t.Errorf("u1's key after the recovery: %d %s, want order %s", r.status, r.body, retried)
	}
}

// TestDegradedModeKeepsTheBuyersRateLimit: the per-user limit, which a buy
// from Redis checks inside its own script, also holds for buys from the
// database: one buyer's burst is answered 429 as it is when Redis sells,
// whether an operator forced degraded mode (the limit is kept in Redis) or
// Redis is gone (the in-process fallback keeps it, without waiting for
// Redis's timeouts).
func TestDegradedModeKeepsTheBuyersRateLimit(t *testing.T) {
	for _, redisGone := range []bool{false, true} {
		t.Run(map[bool]string{false: "forced", true: "redis gone"}[redisGone], func(t *testing.T) {
			rdb := redistest.Standalone(t)
			proxy := faultnet.Start(t, rdb.Options().Addr)
			defer proxy.Cut() // the calls still waiting end at once
			// A long read timeout: a buy from the database that asked Redis
			// for its rate limit would wait past the server's write timeout.
			a := startApp(t, service.Config{
				RedisURL:  "redis://" + proxy.Addr() + "/0?read_timeout=30s&max_retries=0",
				KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "1/m,burst=3",
				DegradedTick: 50 * time.Millisecond, DegradedGrace: 200 * time.Millisecond,
			})
			a.createSale("s1", 1000, "A", 1000)
			if redisGone { // replies lost: no call fails fast
				proxy.DropReplies(true)
				a.waitMode("db")
			} else {
				a.forceDegraded()
			}
			mustStatus(t, a.buyUntil("s1", "warm"), http.StatusCreated) // past the grace period: the database sells
			began := time.Now()
			created, limited := 0, 0
			for range 20 {
				r := a.buyOne("s1", "u1")
				switch {
				case r.status == http.StatusCreated && r.json(t)["status"] == "confirmed":
					created++
				case r.status == http.StatusTooManyRequests && r.code(t) == "rate_limited" && r.header.Get("Retry-After") != "":
					limited++
				default:
					t.Fatalf("a buy from the database: %d %s", r.status, r.body)
				}
			}
			// A burst of 3 (4 at once), then one a minute.
			if limit := 4 + int(time.Since(began)/time.Minute); created > limit || limited == 0 {
				t.Errorf("one buyer's 20 buys from the database: %d created (at most %d allowed), %d rate limited", created, limit, limited)
			}
		})
	}
}

// TestDegradedModePauseIsImmediate: while the database sells, a pause is
// written where it sells: the reply says paused, and the very next buy is
// refused; a resume lets the next one through.
func TestDegradedModePauseIsImmediate(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
			a := startApp(t, cfg)
			a.createSale("s1", 1, "A", 100)
			a.forceDegraded()
			mustStatus(t, a.buyUntil("s1", "u0"), http.StatusCreated)

			r := a.admin("POST", "/v1/admin/sales/s1/pause", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "paused" {
				t.Fatalf("the pause's reply: %s", r.body)
			}
			if r := a.buyOne("s1", "u1"); r.code(t) != "sale_not_active" {
				t.Fatalf("a buy right after the pause: %d %s", r.status, r.body)
			}
			r = a.admin("POST", "/v1/admin/sales/s1/resume", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "active" {
				t.Fatalf("the resume's reply: %s", r.body)
			}
			mustStatus(t, a.buyOne("s1", "u1"), http.StatusCreated)

			// Paused again, then Redis sells again: repaired from the
			// database, it does not sell the paused sale.
			mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
			a.waitMode("redis")
			if r := a.buyOne("s1", "u2"); r.code(t) != "sale_not_active" {
				t.Fatalf("redis after the recovery sold a sale paused in degraded mode: %d %s", r.status, r.body)
			}
		})
	}
}

// TestDegradedModeRefusesPurchaseTokenSales: a sale that requires purchase
// tokens does not sell from the database (a token's single use is kept in
// Redis): a clear 503, and the token stays unspent for when Redis is back.
func TestDegradedModeRefusesPurchaseTokenSales(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
	a := startApp(t, cfg)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "t1", "require_purchase_token": true,
		"items": []map[string]any{{"sku": "A", "stock": 10}}}), http.StatusCreated)
	tok := a.call("POST", "/v1/sales/t1/purchase-tokens", a.token("u1"), nil)
	mustStatus(t, tok, http.StatusCreated)
	header := []string{"X-Purchase-Token", tok.json(t)["token"].(string)}
	a.forceDegraded()
	a.createSale("plain", 1, "A", 10)
	mustStatus(t, a.buyUntil("plain", "u0"), http.StatusCreated) // the database sells

	r := a.call("POST", "/v1/sales/t1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, header...)
	if r.status != http.StatusServiceUnavailable || r.code(t) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a token sale's buy from the database: %d %s", r.status, r.body)
	}
	if msg := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "purchase token") || !strings.Contains(msg, "redis") {
		t.Errorf("the refusal does not say why: %q", msg)
	}
	if counts, err := a.svc.Store().CountOrders(context.Background(), "t1"); err != nil || counts[inventory.OrderConfirmed] != 0 {
		t.Fatalf("orders of the token sale: %v, %v", counts, err)
	}

	mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
	a.waitMode("redis")
	r = a.call("POST", "/v1/sales/t1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, header...)
	mustStatus(t, r, http.StatusCreated) // the token was not spent by the refusal
}

// TestHandOverWaitsForBuysOnTheirWay: a buy is on its way to Redis when an
// operator makes the database sell: it runs in Redis at once, its reply
// comes late (the proxy holds it) and acknowledges it. The database must
// not sell before that buy's order is handed over — neither on the instance
// that sent it, whose hand-over waits for it, nor on another instance,
// which waits for every live instance's hand-over — or it sells the units
// that order holds: one instance's buy is held, the other sells.
func TestHandOverWaitsForBuysOnTheirWay(t *testing.T) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	prefix, dbURL := redistest.Prefix(t, rdb), dbtest.PostgresURL(t)
	// An instance is taken for dead once its heartbeat is older than the
	// grace: the held one's tick (a ping the proxy holds, the hand-over's
	// wait for its buy) beats every two ticks or so, and a loaded machine
	// delays it more. With 200 ms the seller passed over the live instance
	// and sold while its buy was on its way (TestStepHeartbeatsBeforeTheHandOverWaits
	// covers the heartbeat's order itself).
	const grace = 2 * time.Second
	config := func(readTimeout string) service.Config {
		return service.Config{RedisURL: "redis://" + proxy.Addr() + "/0?max_retries=0&read_timeout=" + readTimeout, KeyPrefix: prefix,
			DatabaseURL: dbURL, RateLimitUser: "off", DegradedTick: 100 * time.Millisecond, DegradedGrace: grace,
			// A node's role check before a command is a round trip whose
			// reply the proxy would hold too: the buy must be on its way,
			// so the check made at start-up holds through the test.
			NodeRecheck: time.Hour}
	}
	// Both through the proxy: no consumer brings the held buy's order to
	// the database through the stream meanwhile (a partition would not).
	seller, slow := startApp(t, config("300ms")), startApp(t, config("20s"))
	const stock = 3
	seller.createSale("s1", 1, "A", stock)

	proxy.HoldReplies(true)
	held := make(chan reply, 1)
	go func() { // not buyOne: it may not fail the test from here
		req, _ := http.NewRequest("POST", slow.svc.URL()+"/v1/sales/s1/orders", strings.NewReader(`{"items":[{"sku":"A","qty":1}]}`))
		req.Header.Set("Authorization", "Bearer "+slow.token("u1"))
		r := reply{}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			r.status, r.header = resp.StatusCode, resp.Header
			r.body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		held <- r
	}()
	deadline := time.Now().Add(20 * time.Second)
	inRedis := func() int {
		recs, _ := redisOrders(context.Background(), rdb, seller.svc.Engine().Key("s1", "orders"))
		return len(recs)
	}
	for inRedis() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the held buy never ran in redis")
		}
		time.Sleep(5 * time.Millisecond)
	}
	seller.forceDegraded()
	for !strings.Contains(string(seller.call("GET", "/metrics", "", nil).body), "seckill_degraded_mode 1") {
		time.Sleep(10 * time.Millisecond) // the seller has heard of it: no buy of its goes to redis
	}
	// Well past the grace period: while the buy's reply is held, the
	// database does not sell.
	for until := time.Now().Add(2 * grace); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
		if r := seller.buyOne("s1", "early"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("the database sold while a buy was on its way to redis: %d %s", r.status, r.body)
		}
	}
	proxy.HoldReplies(false)
	r := <-held
	mustStatus(t, r, http.StatusCreated)
	first := r.json(t)["order_id"].(string)
	for _, user := range []string{"u2", "u3"} {
		mustStatus(t, seller.buyUntil("s1", user), http.StatusCreated)
	}
	if r := seller.buyUntil("s1", "u4"); r.code(t) != "sold_out" {
		t.Fatalf("the database sold past the stock: %d %s", r.status, r.body)
	}
	mustStatus(t, seller.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
	seller.waitMode("redis")
	seller.settle("s1")
	counts, err := seller.svc.Store().CountOrders(context.Background(), "s1")
	if err != nil || counts[inventory.OrderConfirmed] != stock {
		t.Errorf("orders after the round trip: %v, %v", counts, err)
	}
	if o, err := seller.svc.Store().Order(context.Background(), first); err != nil || o.Status != inventory.OrderConfirmed {
		t.Errorf("the acknowledged order whose reply came late: %+v, %v", o, err)
	}
}
