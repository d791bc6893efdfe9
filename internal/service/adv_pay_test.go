package service_test

import (
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
		r := a.buyOne("hot", "u1")
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

		// Units held by reservations, summed over the segments.
		a.createSegmentedPaySale("held", 8, 4, 3600)
		for u := range 8 {
			mustStatus(t, a.buyOne("held", fmt.Sprintf("h%d", u)), http.StatusCreated)
		}
		if item := a.call("GET", "/v1/sales/held", "", nil).json(t)["items"].([]any)[0].(map[string]any); item["awaiting_payment"] != 8.0 || item["sold"] != 8.0 {
			t.Fatalf("a segmented sale's item with 8 reservations: %v", item)
		}
		waitfor.Until(t, waitfor.Patience, "the live view shows the 8 units awaiting payment", func() error {
			var view struct {
				Sales []struct {
					ID    string `json:"id"`
					Items []struct {
						Awaiting int64 `json:"awaiting_payment"`
					} `json:"items"`
				} `json:"sales"`
			}
			if err := json.Unmarshal(a.call("GET", "/v1/live", "", nil).body, &view); err != nil {
				return err
			}
			for _, v := range view.Sales {
				if v.ID == "held" && len(v.Items) == 1 && v.Items[0].Awaiting == 8 {
					return nil
				}
			}
			return fmt.Errorf("%+v", view.Sales)
		})

		a.createSegmentedPaySale("hotx", 2, 2, 1)
		r = a.buyOne("hotx", "u2")
		mustStatus(t, r, http.StatusCreated)
		x := r.json(t)["order_id"].(string)
		a.waitExpired("u2", x)
		if r := a.pay("u2", x, "late"); r.status != http.StatusConflict || r.code(t) != "order_closed" {
			t.Fatalf("pay of an expired segment order: %d %s", r.status, r.body)
		}
		waitfor.Until(t, waitfor.Patience, "u2 buys again", func() error {
			return nil
		})
		mustStatus(t, a.buyOne("hotx", "u2"), http.StatusCreated)
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

// TestPayOfAnArchivedSale: once a sale with a payment step is archived
// (its keys gone from Redis), a pay answers from the database as the
// contract says: the same ref again -> 200 paid (nothing changes), another
// ref -> 409 already_paid, an expired order -> 409 order_closed, someone
// else's -> 404; GET of the orders still shows their payment status; and
// nothing brings the sale's keys back.
func TestPayOfAnArchivedSale(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			a := startStack(t, st, func(c *service.Config) { c.ArchiveEvery = 20 * time.Millisecond })
			a.createPaySale("pa", 5, 1)
			r := a.buyOne("pa", "u1")
			mustStatus(t, r, http.StatusCreated)
			paid := r.json(t)["order_id"].(string)
			mustStatus(t, a.pay("u1", paid, "ref-1"), http.StatusOK)
			r = a.buyOne("pa", "u2")
			mustStatus(t, r, http.StatusCreated)
			lapsed := r.json(t)["order_id"].(string)
			a.waitExpired("u2", lapsed)
			mustStatus(t, a.admin("POST", "/v1/admin/sales/pa/close", nil), http.StatusOK)
			waitfor.Until(t, waitfor.Patience, "the closed sale's keys to go", func() error {
				if keys := a.saleKeys("pa"); len(keys) > 0 {
					return fmt.Errorf("keys left: %v", keys)
				}
				if r := a.call("GET", "/v1/sales/pa", "", nil); r.json(t)["archived"] != true {
					return fmt.Errorf("sale: %s", r.body)
				}
				return nil
			})
			if o := a.getOrder("u1", paid); o["payment_status"] != "paid" || o["status"] != "confirmed" {
				t.Fatalf("paid order of an archived sale: %v", o)
			}
			if o := a.getOrder("u2", lapsed); o["payment_status"] != "expired" || o["status"] != "cancelled" {
				t.Fatalf("expired order of an archived sale: %v", o)
			}

			r = a.pay("u1", paid, "ref-1")
			mustStatus(t, r, http.StatusOK)
			if b := r.json(t); b["payment_status"] != "paid" || b["payment_ref"] != "ref-1" || b["status"] != "confirmed" || b["sale_id"] != "pa" {
				t.Fatalf("pay again of an archived sale's order: %s", r.body)
			}
			if r := a.pay("u1", paid, "ref-2"); r.status != http.StatusConflict || r.code(t) != "already_paid" {
				t.Fatalf("pay with another ref: %d %s", r.status, r.body)
			}
			if r := a.pay("u2", lapsed, "ref"); r.status != http.StatusConflict || r.code(t) != "order_closed" {
				t.Fatalf("pay of an expired order of an archived sale: %d %s", r.status, r.body)
			}
			if r := a.pay("u2", paid, "ref-1"); r.status != http.StatusNotFound {
				t.Fatalf("pay of someone else's order: %d %s", r.status, r.body)
			}
			if r := a.admin("POST", "/v1/orders/"+paid+"/pay", map[string]any{"payment_ref": "ref-1"}); r.status != http.StatusOK {
				t.Fatalf("operator's pay: %d %s", r.status, r.body)
			}
			if keys := a.saleKeys("pa"); len(keys) > 0 {
				t.Fatalf("an archived sale is back in Redis: %v", keys)
			}
		})
	}
}

// TestLostEndedSaleReservationsExpire: Redis loses the keys of a sale that
// has ended while one of its reservations still awaits payment (the
// database has the order, unpaid). The reservation must still expire at
// its deadline (the archiver must not archive the sale with it awaiting:
// it would await forever, its unit never back).
func TestLostEndedSaleReservationsExpire(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			a := startStack(t, st, func(c *service.Config) { c.ArchiveEvery = 20 * time.Millisecond })
			a.createPaySale("lost", 5, 4)
			r := a.buyOne("lost", "u1")
			mustStatus(t, r, http.StatusCreated)
			id := r.json(t)["order_id"].(string)
			mustStatus(t, a.admin("POST", "/v1/admin/sales/lost/close", nil), http.StatusOK)
			a.settle("lost")
			if o := a.getOrder("u1", id); o["payment_status"] != "awaiting" {
				t.Fatalf("order before the loss: %v", o)
			}
			if err := a.svc.Redis().Del(a.ctx, a.saleKeys("lost")...).Err(); err != nil {
				t.Fatal(err)
			}
			a.waitExpired("u1", id)
			waitfor.Until(t, waitfor.Patience, "the sale is archived", func() error {
				if r := a.call("GET", "/v1/sales/lost", "", nil); r.json(t)["archived"] != true {
					return fmt.Errorf("sale: %s", r.body)
				}
				return nil
			})
			o, err := a.svc.Store().Order(a.ctx, id)
			if err != nil || o.Status != inventory.OrderCancelled || o.Payment != inventory.PaymentExpired {
				t.Fatalf("the order in the database: %+v %v", o, err)
			}
			r = a.call("GET", "/v1/sales/lost", "", nil)
			if soldOf(t, r) != 0 {
				t.Fatalf("archived sale: %s", r.body)
			}
		})
	}
}

// TestPaidOrderSurvivesARedisThatComesBackBehind: Redis comes back from a
// restart behind the database (an older snapshot: the order awaiting
// payment there, paid in the database) after the order's deadline. No
// instance may expire it on that Redis before the recovery has repaired
// it from the database: the expiry would cancel, in the database too, an
// order whose pay was answered 200 and stored.
func TestPaidOrderSurvivesARedisThatComesBackBehind(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := degradedConfig(srv.Addr())
	cfg.DatabaseURL = dbtest.PostgresURL(t)
	a := startApp(t, cfg)
	a.createPaySale("s", 5, 2)
	r := a.buyOne("s", "u1")
	mustStatus(t, r, http.StatusCreated)
	id := r.json(t)["order_id"].(string)
	payBy, _ := time.Parse(time.RFC3339, r.json(t)["pay_by"].(string))
	if err := srv.Client(t).Save(a.ctx).Err(); err != nil { // the snapshot Redis comes back from
		t.Fatal(err)
	}
	mustStatus(t, a.pay("u1", id, "ref-1"), http.StatusOK)
	a.settle("s")
	if o, err := a.svc.Store().Order(a.ctx, id); err != nil || o.Payment != inventory.PaymentPaid {
		t.Fatalf("paid order in the database: %+v %v", o, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(payBy.Add(500 * time.Millisecond)); wait > 0 {
		time.Sleep(wait) // Redis is down: its clock is this machine's
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	n := 0
	waitfor.Until(t, waitfor.Patience, "buys from the repaired Redis", func() error {
		n++
		r := a.buyOne("s", fmt.Sprintf("later%d", n)) // from the database first, while Redis is repaired
		if r.status != http.StatusCreated || r.json(t)["status"] != "pending" {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	a.settle("s")
	o, err := a.svc.Store().Order(a.ctx, id)
	if err != nil || o.Status != inventory.OrderConfirmed || o.Payment != inventory.PaymentPaid || o.PaymentRef != "ref-1" {
		t.Fatalf("the paid order in the database after the restart: %+v %v", o, err)
	}
	if p, err := a.svc.Engine().Payment(a.ctx, id); err != nil || p.Payment != inventory.PaymentPaid {
		t.Fatalf("the paid order in the repaired Redis: %+v %v", p, err)
	}
	if got := a.getOrder("u1", id); got["payment_status"] != "paid" || got["status"] != "confirmed" {
		t.Fatalf("the paid order after the restart: %v", got)
	}
}

// TestPayRefusesBadInput: a pay names an order of no sale, a malformed id,
// a ref too long or not printable, or no body: each refused, nothing paid;
// an operator may pay a buyer's order.
func TestPayRefusesBadInput(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createPaySale("s", 3, 3600)
		r := a.buyOne("s", "u1")
		mustStatus(t, r, http.StatusCreated)
		id := r.json(t)["order_id"].(string)
		for _, c := range []struct {
			order, ref string
			status     int
		}{
			{"nosuchsale.01M8A2HBA96XM044C7CWR182QS", "ref", http.StatusNotFound},
			{"s.NOTAULID", "ref", http.StatusNotFound},
			{"..", "ref", http.StatusNotFound},
			{id, strings.Repeat("r", 129), http.StatusBadRequest},
			{id, "ref\x7f", http.StatusBadRequest},
			{id, "ré", http.StatusBadRequest},
			{id, "", http.StatusBadRequest},
		} {
			if r := a.pay("u1", c.order, c.ref); r.status != c.status {
				t.Errorf("pay of %q with ref %q: %d %s, want %d", c.order, c.ref, r.status, r.body, c.status)
			}
		}
		if o := a.getOrder("u1", id); o["payment_status"] != "awaiting" {
			t.Fatalf("after refused pays: %v", o)
		}
		r = a.admin("POST", "/v1/orders/"+id+"/pay", map[string]any{"payment_ref": strings.Repeat("r", 128)})
		if r.status != http.StatusOK || r.json(t)["payment_status"] != "paid" || r.json(t)["user_id"] != "u1" {
			t.Fatalf("operator's pay: %d %s", r.status, r.body)
		}
	})
}
