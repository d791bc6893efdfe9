package service_test

import (
	"net/http"
	"testing"

	"github.com/seckill/seckill/internal/waitfor"
)

// createSegmentedPaySale creates sale id with sku A (stock units on k
// segments, limit 1 per buyer) and a payment timeout of timeoutS seconds.
func (a *app) createSegmentedPaySale(id string, stock, k, timeoutS int64) {
	a.t.Helper()
	mustStatus(a.t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": id, "per_user_limit": 1,
		"payment_timeout_s": timeoutS, "items": []map[string]any{{"sku": "A", "stock": stock, "segments": k}}}), http.StatusCreated)
}

// TestSegmentedSalePayment: a segmented sale with a payment step: its
// orders (of its segments, "<sale>:<n>.<ULID>") are reservations, read
// awaiting also from Redis before the database has them, are paid under
// the sale's id, and expire, their quota back.
func TestSegmentedSalePayment(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSegmentedPaySale("hot", 4, 2, 3600)
		r := buyOne(a, "hot", "u1")
		mustStatus(t, r, http.StatusCreated)
		id := r.json(t)["order_id"].(string)
		if b := r.json(t); b["payment_status"] != "awaiting" || b["sale_id"] != "hot" {
			t.Fatalf("buy reply: %s", r.body)
		}
		fromRedis, err := a.svc.Engine().Order(a.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if o := a.svc.WithPayment(a.ctx, fromRedis); o.Payment != "awaiting" || o.PayBy.IsZero() {
			t.Fatalf("a segment's order read from Redis: payment %q, pay_by %v", o.Payment, o.PayBy)
		}
		if o := a.getOrder("u1", id); o["payment_status"] != "awaiting" || o["sale_id"] != "hot" {
			t.Fatalf("GET: %v", o)
		}
		p := a.pay("u1", id, "ref-1")
		mustStatus(t, p, http.StatusOK)
		if b := p.json(t); b["payment_status"] != "paid" || b["sale_id"] != "hot" {
			t.Fatalf("pay reply: %s", p.body)
		}
		if r := a.pay("u1", id, "ref-1"); r.status != http.StatusOK || r.json(t)["sale_id"] != "hot" {
			t.Fatalf("pay again: %d %s", r.status, r.body)
		}
		a.settle(segmentOf(t, id))
		if o := a.getOrder("u1", id); o["payment_status"] != "paid" || o["sale_id"] != "hot" || o["status"] != "confirmed" {
			t.Fatalf("GET after pay: %v", o)
		}

		a.createSegmentedPaySale("hotx", 2, 2, 1)
		r = buyOne(a, "hotx", "u2")
		mustStatus(t, r, http.StatusCreated)
		x := r.json(t)["order_id"].(string)
		a.waitExpired("u2", x)
		if r := a.pay("u2", x, "late"); r.status != http.StatusConflict || r.code(t) != "order_closed" {
			t.Fatalf("pay of an expired segment order: %d %s", r.status, r.body)
		}
		waitfor.Until(t, waitfor.Patience, "u2 buys again", func() error {
			return nil
		})
		mustStatus(t, buyOne(a, "hotx", "u2"), http.StatusCreated)
	})
}

func segmentOf(t testing.TB, order string) string {
	t.Helper()
	for i := len(order) - 1; i >= 0; i-- {
		if order[i] == '.' {
			return order[:i]
		}
	}
	t.Fatalf("order id %s", order)
	return ""
}
