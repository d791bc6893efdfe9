package service_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestPaymentDeadlineThroughADatabaseOutage: the connection to PostgreSQL
// is cut (through a proxy) while reservations await payment. Redis decides
// alone meanwhile: a pay made during the outage is paid, the reservations
// nobody pays expire on time and their units go to later buyers (who pay
// at once), and the sale is sold out with the paid orders. Once the
// database is back, every pay and every expiry reaches it, once: the paid
// orders confirmed and paid, the expired ones cancelled and expired, and
// reconciliation consistent.
func TestPaymentDeadlineThroughADatabaseOutage(t *testing.T) {
	a, proxy, db := startBehindDBProxy(t)

	a.createPaySale("p", 4, 2)
	// The expiry loop's list of sales (read from the database, refreshed
	// every second, kept as it is while the database is away) must have
	// the sale before the cut: a first reservation left to expire shows it
	// has.
	probe := a.buyOne("p", "probe")
	mustStatus(t, probe, http.StatusCreated)
	a.waitExpired("probe", probe.json(t)["order_id"].(string))
	ids := map[string]string{}
	for i := range 4 {
		user := fmt.Sprintf("u%d", i)
		r := a.buyOne("p", user)
		mustStatus(t, r, http.StatusCreated)
		ids[user] = r.json(t)["order_id"].(string)
	}
	mustStatus(t, a.pay("u0", ids["u0"], "ref-u0"), http.StatusOK)

	proxy.Cut()
	if p := a.pay("u1", ids["u1"], "ref-u1"); p.status != http.StatusOK || p.json(t)["payment_status"] != "paid" {
		t.Fatalf("pay during the outage: %d %s", p.status, p.body)
	}
	// u2 and u3 never pay: their units come back on time, to later buyers.
	for _, user := range []string{"late0", "late1"} {
		waitfor.Until(t, waitfor.Patience, user+" buys a unit that came back", func() error {
			r := a.buyOne("p", user)
			if r.status != http.StatusCreated {
				return fmt.Errorf("%d %s", r.status, r.body)
			}
			ids[user] = r.json(t)["order_id"].(string)
			return nil
		})
		mustStatus(t, a.pay(user, ids[user], "ref-"+user), http.StatusOK)
	}
	if r := a.buyOne("p", "late2"); r.status != http.StatusConflict || r.code(t) != "sold_out" {
		t.Fatalf("a buy with every unit paid for: %d %s", r.status, r.body)
	}

	proxy.Restore()
	a.settle("p")
	for user, id := range ids {
		o, err := db.Order(context.Background(), id)
		if err != nil {
			t.Fatalf("order of %s: %v", user, err)
		}
		want := inventory.PaymentPaid
		if user == "u2" || user == "u3" {
			want = inventory.PaymentExpired
		}
		switch {
		case o.Payment != want:
			t.Errorf("order of %s in the database: payment %q, want %q", user, o.Payment, want)
		case want == inventory.PaymentPaid && (o.Status != inventory.OrderConfirmed || o.PaymentRef != "ref-"+user):
			t.Errorf("paid order of %s in the database: %+v", user, o)
		case want == inventory.PaymentExpired && o.Status != inventory.OrderCancelled:
			t.Errorf("expired order of %s in the database: %+v", user, o)
		}
	}
	if counts, _ := db.CountOrders(context.Background(), "p"); counts[inventory.OrderConfirmed] != 4 || counts[inventory.OrderCancelled] != 3 {
		t.Errorf("orders in the database %v, want 4 confirmed and 3 cancelled (the probe's too)", counts)
	}
}
