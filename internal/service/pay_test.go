package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// createPaySale creates sale id with sku A (stock units, limit 1 per buyer)
// and a payment timeout of timeoutS seconds.
func (a *app) createPaySale(id string, stock, timeoutS int64) {
	a.t.Helper()
	mustStatus(a.t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": id, "per_user_limit": 1,
		"payment_timeout_s": timeoutS, "items": []map[string]any{{"sku": "A", "stock": stock}}}), http.StatusCreated)
}

// pay pays an order as user.
func (a *app) pay(user, order, ref string) reply {
	a.t.Helper()
	return a.call("POST", "/v1/orders/"+order+"/pay", a.token(user), map[string]any{"payment_ref": ref})
}

// getOrder reads an order as user.
func (a *app) getOrder(user, order string) map[string]any {
	a.t.Helper()
	r := a.call("GET", "/v1/orders/"+order, a.token(user), nil)
	mustStatus(a.t, r, http.StatusOK)
	return r.json(a.t)
}

// waitExpired waits until the order reads cancelled and expired.
func (a *app) waitExpired(user, order string) {
	a.t.Helper()
	waitfor.Until(a.t, waitfor.Patience, "order "+order+" expires", func() error {
		o := a.getOrder(user, order)
		if o["status"] != "cancelled" || o["payment_status"] != "expired" {
			return fmt.Errorf("status %v, payment_status %v", o["status"], o["payment_status"])
		}
		return nil
	})
}

// TestPaymentDeadline: over HTTP, on both stacks: a sale with
// payment_timeout_s makes each order a reservation; an unpaid one expires
// on its own (status cancelled, payment_status expired) and its unit and
// the buyer's quota come back; a paid one stays. Every answer of the pay
// endpoint; the database gets the paid and expired events.
func TestPaymentDeadline(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createPaySale("s", 2, 1)
		sale := a.call("GET", "/v1/sales/s", "", nil).json(t)
		if sale["payment_timeout_s"] != 1.0 {
			t.Fatalf("sale: %v", sale)
		}
		r1 := a.buyOne("s", "u1")
		mustStatus(t, r1, http.StatusCreated)
		o1 := r1.json(t)
		created, _ := time.Parse(time.RFC3339, o1["created_at"].(string))
		payBy, err := time.Parse(time.RFC3339, fmt.Sprint(o1["pay_by"]))
		if o1["payment_status"] != "awaiting" || err != nil || !payBy.Equal(created.Add(time.Second)) {
			t.Fatalf("buy reply: %s", r1.body)
		}
		id1 := o1["order_id"].(string)
		r2 := a.buyOne("s", "u2")
		mustStatus(t, r2, http.StatusCreated)
		id2 := r2.json(t)["order_id"].(string)
		item := a.call("GET", "/v1/sales/s", "", nil).json(t)["items"].([]any)[0].(map[string]any)
		if item["awaiting_payment"] != 2.0 || item["remaining"] != 0.0 {
			t.Fatalf("item while two orders await payment: %v", item)
		}

		// u2 pays; again with the same ref; with another.
		p := a.pay("u2", id2, "ref-2")
		mustStatus(t, p, http.StatusOK)
		if b := p.json(t); b["payment_status"] != "paid" || b["pay_by"] != nil || b["order_id"] != id2 {
			t.Fatalf("pay reply: %s", p.body)
		}
		again := a.pay("u2", id2, "ref-2")
		mustStatus(t, again, http.StatusOK)
		if again.json(t)["payment_status"] != "paid" {
			t.Fatalf("pay again: %s", again.body)
		}
		if r := a.pay("u2", id2, "ref-other"); r.status != http.StatusConflict || r.code(t) != "already_paid" {
			t.Fatalf("pay with another ref: %d %s", r.status, r.body)
		}
		if r := a.pay("u3", id1, "ref"); r.status != http.StatusNotFound {
			t.Fatalf("pay of someone else's order: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/orders/"+id1+"/pay", a.token("u1"), map[string]any{}); r.status != http.StatusBadRequest {
			t.Fatalf("pay without payment_ref: %d %s", r.status, r.body)
		}
		if r := a.buyOne("s", "u3"); r.status != http.StatusConflict || r.code(t) != "sold_out" {
			t.Fatalf("buy while both units are held: %d %s", r.status, r.body)
		}

		// u1 never pays: the order expires, its unit and u1's quota come back.
		a.waitExpired("u1", id1)
		if r := a.pay("u1", id1, "late"); r.status != http.StatusConflict || r.code(t) != "order_closed" {
			t.Fatalf("pay of an expired order: %d %s", r.status, r.body)
		}
		r3 := a.buyOne("s", "u1") // u1's quota is back, and the unit
		mustStatus(t, r3, http.StatusCreated)
		id3 := r3.json(t)["order_id"].(string)
		if r := a.call("POST", "/v1/orders/"+id3+"/cancel", a.token("u1"), nil); r.status != http.StatusOK ||
			r.json(t)["payment_status"] != "expired" {
			t.Fatalf("cancel of an awaiting order: %d %s", r.status, r.body)
		}
		if r := a.pay("u1", id3, "ref"); r.status != http.StatusConflict || r.code(t) != "order_closed" {
			t.Fatalf("pay of a cancelled order: %d %s", r.status, r.body)
		}

		// A sale without a payment step.
		a.createSale("free", 1, "A", 5)
		rf := a.buyOne("free", "u1")
		mustStatus(t, rf, http.StatusCreated)
		if rf.json(t)["payment_status"] != "not_required" {
			t.Fatalf("order of a sale without payment: %s", rf.body)
		}
		if r := a.pay("u1", rf.json(t)["order_id"].(string), "ref"); r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
			t.Fatalf("pay of an order of a sale without payment: %d %s", r.status, r.body)
		}

		// The database: paid and expired stored, journaled, reconciled.
		a.settle("s")
		if o := a.getOrder("u2", id2); o["status"] != "confirmed" || o["payment_status"] != "paid" || o["payment_ref"] != "ref-2" {
			t.Fatalf("paid order from the database: %v", o)
		}
		if o := a.getOrder("u1", id1); o["status"] != "cancelled" || o["payment_status"] != "expired" {
			t.Fatalf("expired order from the database: %v", o)
		}
		stored, err := a.svc.Store().Order(a.ctx, id1)
		if err != nil || stored.Payment != inventory.PaymentExpired {
			t.Fatalf("expired order in the database: %+v, %v", stored, err)
		}
		journal, err := a.svc.Store().Journal(a.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[inventory.EventType]int{}
		for _, j := range journal {
			kinds[j.Type]++
			if j.Type == inventory.EventExpired {
				t.Logf("expired %v after its pay_by (the expiry's time by Redis's clock)", j.At.Sub(payBy))
			}
		}
		if kinds[inventory.EventPaid] != 1 || kinds[inventory.EventExpired] != 1 {
			t.Fatalf("journal: %v", kinds)
		}
		item = a.call("GET", "/v1/sales/s", "", nil).json(t)["items"].([]any)[0].(map[string]any)
		if item["awaiting_payment"] != 0.0 || item["sold"] != 1.0 || item["remaining"] != 1.0 {
			t.Fatalf("item at the end: %v", item)
		}
		// The live view (the dashboard's) and the metrics.
		waitfor.Until(t, waitfor.Patience, "the live view counts the paid and expired orders", func() error {
			var view struct {
				Sales []struct {
					ID      string `json:"id"`
					Paid    int    `json:"orders_paid"`
					Expired int    `json:"orders_expired"`
				} `json:"sales"`
			}
			if err := json.Unmarshal(a.call("GET", "/v1/live", "", nil).body, &view); err != nil {
				return err
			}
			for _, v := range view.Sales {
				if v.ID == "s" && v.Paid == 1 && v.Expired == 1 {
					return nil
				}
			}
			return fmt.Errorf("%+v", view.Sales)
		})
		metrics := string(a.call("GET", "/metrics", "", nil).body)
		for _, want := range []string{"seckill_orders_paid_total 1", "seckill_orders_expired_total 1",
			`seckill_stock_awaiting_payment{sale="s",sku="A"} 0`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("no %s in /metrics", want)
			}
		}
	})
}

// redisNow is the Redis server's clock, which decides deadlines.
func redisNow(t testing.TB, a *app) time.Time {
	t.Helper()
	now, err := a.svc.Redis().Time(a.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// TestExpiryOtherInstanceAndRestart: two instances on one Redis and one
// database. The one that takes the buys has its expiry loop stopped; the
// other expires the orders. Then that one is shut down too: an order whose
// deadline passes while no instance expires stays awaiting, and a
// restarted instance expires it.
func TestExpiryOtherInstanceAndRestart(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t)}
	front := cfg
	front.ExpireEvery = -1 // its expiry loop is stopped
	a := startApp(t, front)
	b := startApp(t, cfg)
	a.createPaySale("s", 10, 1)

	r := a.buyOne("s", "u1")
	mustStatus(t, r, http.StatusCreated)
	a.waitExpired("u1", r.json(t)["order_id"].(string)) // by b

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r = a.buyOne("s", "u2")
	mustStatus(t, r, http.StatusCreated)
	id := r.json(t)["order_id"].(string)
	payBy, _ := time.Parse(time.RFC3339, r.json(t)["pay_by"].(string))
	waitfor.Until(t, waitfor.Patience, "the deadline passes", func() error {
		if now := redisNow(t, a); !now.After(payBy.Add(500 * time.Millisecond)) {
			return fmt.Errorf("redis time %v, pay_by %v", now, payBy)
		}
		return nil
	})
	if o := a.getOrder("u2", id); o["payment_status"] != "awaiting" {
		t.Fatalf("with no expiry loop running, the order is %v", o)
	}
	c := startApp(t, cfg) // a restarted instance
	c.waitExpired("u2", id)
	c.settle("s")
	st, err := c.svc.Engine().Stock(c.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if it := st.Items[0]; it.Remaining != 10 || it.Awaiting != 0 {
		t.Fatalf("item %+v, want everything back in stock", it)
	}
}

// TestPaymentWhileTheDatabaseSells: while the database sells (the
// operator's switch), a pay is refused with 503 and reservations wait,
// also the ones the database sold; once Redis sells again (repaired from
// the database) they expire and their units are back.
func TestPaymentWhileTheDatabaseSells(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
			a := startApp(t, cfg)
			// A payment timeout longer than the switch to the database
			// takes on a loaded machine: u1's reservation must still be
			// awaiting when the database starts selling (with 1 s it once
			// expired first, under the full suite and other work).
			a.createPaySale("s", 3, 3)
			waitMode := a.waitMode   // the mode, as this instance has heard it
			r := a.buyOne("s", "u1") // from Redis
			mustStatus(t, r, http.StatusCreated)
			fromRedis := r.json(t)["order_id"].(string)
			a.settle("s")

			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "force"}), http.StatusOK)
			waitMode("db")
			var fromDB string
			var payBy time.Time
			waitfor.Until(t, waitfor.Patience, "a buy from the database", func() error {
				r := a.buyOne("s", "u2")
				if r.status != http.StatusCreated || r.json(t)["status"] != "confirmed" {
					return fmt.Errorf("%d %s", r.status, r.body)
				}
				fromDB = r.json(t)["order_id"].(string)
				if r.json(t)["payment_status"] != "awaiting" {
					t.Fatalf("an order the database sold: %s", r.body)
				}
				payBy, _ = time.Parse(time.RFC3339, r.json(t)["pay_by"].(string))
				return nil
			})
			if r := a.pay("u1", fromRedis, "ref"); r.status != http.StatusServiceUnavailable {
				t.Fatalf("pay while the database sells: %d %s", r.status, r.body)
			}
			waitfor.Until(t, waitfor.Patience, "both deadlines pass", func() error {
				if now := redisNow(t, a); !now.After(payBy.Add(500 * time.Millisecond)) {
					return fmt.Errorf("redis time %v, pay_by %v", now, payBy)
				}
				return nil
			})
			if o := a.getOrder("u1", fromRedis); o["payment_status"] != "awaiting" {
				t.Fatalf("a reservation expired while the database sells: %v", o)
			}
			item := a.call("GET", "/v1/sales/s", "", nil).json(t)["items"].([]any)[0].(map[string]any)
			if item["awaiting_payment"] != 2.0 || item["remaining"] != 1.0 {
				t.Fatalf("item while the database sells: %v", item)
			}

			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
			waitMode("redis")
			a.waitExpired("u1", fromRedis)
			a.waitExpired("u2", fromDB)
			a.settle("s")
			item = a.call("GET", "/v1/sales/s", "", nil).json(t)["items"].([]any)[0].(map[string]any)
			if item["remaining"] != 3.0 || item["awaiting_payment"] != 0.0 {
				t.Fatalf("item after the expiries: %v", item)
			}
		})
	}
}
