package service_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// startStack starts the service on one stack with cfg's changes.
func startStack(t *testing.T, st stack, change func(*service.Config)) *app {
	cfg := st.start(t)
	change(&cfg)
	return startApp(t, cfg)
}

// saleKeys lists every key of the sale in the service's Redis but the
// mark an archived sale leaves for a while (its "archived" key, which
// must expire).
func (a *app) saleKeys(sale string) []string {
	a.t.Helper()
	var keys []string
	mark := a.svc.Engine().Key(sale, "archived")
	iter := a.svc.Redis().Scan(a.ctx, 0, a.svc.Engine().Key(sale, "*"), 1000).Iterator()
	for iter.Next(a.ctx) {
		if iter.Val() == mark {
			if ttl, err := a.svc.Redis().PTTL(a.ctx, mark).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
				a.t.Fatalf("the archived mark of %s must expire within an hour: ttl %v (%v)", sale, ttl, err)
			}
			continue
		}
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		a.t.Fatalf("scan keys of %s: %v", sale, err)
	}
	return keys
}

func (a *app) buyOne(sale, user string) reply {
	a.t.Helper()
	return a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user),
		map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
}

func soldOf(t *testing.T, r reply) float64 {
	t.Helper()
	items, _ := r.json(t)["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("want one item: %s", r.body)
	}
	return items[0].(map[string]any)["sold"].(float64)
}

// Close ends a sale at once: buys and restocks are refused as not active,
// and the database, which learns of it through the stream, keeps it ended
// when Redis loses the sale and it is rebuilt.
func TestCloseSale(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			a := startStack(t, st, func(c *service.Config) { c.ArchiveEvery = -1 }) // keys stay
			a.createSale("c1", 2, "A", 10)
			mustStatus(t, a.buyOne("c1", "u1"), http.StatusCreated)

			r := a.admin("POST", "/v1/admin/sales/c1/close", nil)
			mustStatus(t, r, http.StatusOK)
			if got := r.json(t)["status"]; got != "ended" {
				t.Fatalf("status after close %v, want ended: %s", got, r.body)
			}
			if r.json(t)["ends_at"] == nil {
				t.Fatalf("a closed sale has an end: %s", r.body)
			}
			for _, r := range []reply{
				a.buyOne("c1", "u2"),
				a.admin("POST", "/v1/admin/sales/c1/items/A/restock", map[string]any{"qty": 5}),
			} {
				if r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
					t.Fatalf("after close: %d %s, want 409 sale_not_active", r.status, r.body)
				}
			}
			mustStatus(t, a.admin("POST", "/v1/admin/sales/c1/close", nil), http.StatusOK) // again: nothing changes
			if r := a.call("POST", "/v1/admin/sales/c1/close", a.token("u1"), nil); r.status != http.StatusUnauthorized && r.status != http.StatusForbidden {
				t.Fatalf("a buyer closed a sale: %d %s", r.status, r.body)
			}

			// The database has the end once the stream is applied; then Redis
			// loses the sale and rebuilds it from there: still ended.
			a.settle("c1")
			sale, err := a.svc.Store().Sale(a.ctx, "c1")
			if err != nil || sale.EndsAt.IsZero() || sale.EndsAt.After(time.Now()) {
				t.Fatalf("database end %v (err %v), want the close's", sale.EndsAt, err)
			}
			if err := a.svc.Redis().Del(a.ctx, a.saleKeys("c1")...).Err(); err != nil {
				t.Fatal(err)
			}
			if r := a.buyOne("c1", "u3"); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
				t.Fatalf("buy after a rebuild of a closed sale: %d %s", r.status, r.body)
			}
			r = a.call("GET", "/v1/sales/c1", "", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "ended" || soldOf(t, r) != 1 {
				t.Fatalf("rebuilt closed sale: %s", r.body)
			}
		})
	}
}

// Once a closed sale is all in the database, its keys leave Redis; the
// database answers for it from then on, and nothing brings it back.
func TestArchiveEndToEnd(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			logs := &syncBuffer{}
			a := startStack(t, st, func(c *service.Config) {
				c.ArchiveEvery = 20 * time.Millisecond
				c.ReconcileEvery = 50 * time.Millisecond // its loop too must leave the archived sale alone
				c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			a.createSale("ar1", 1, "A", 10)
			var orders []string
			for _, u := range []string{"u1", "u2", "u3"} {
				r := a.buyOne("ar1", u)
				mustStatus(t, r, http.StatusCreated)
				orders = append(orders, r.json(t)["order_id"].(string))
			}
			// A cancel while the sale lives goes through Redis.
			mustStatus(t, a.call("POST", "/v1/orders/"+orders[2]+"/cancel", a.token("u3"), nil), http.StatusOK)
			// A live sale stays.
			time.Sleep(100 * time.Millisecond) // some archiver passes; nothing to wait for
			if len(a.saleKeys("ar1")) == 0 {
				t.Fatal("the keys of a live sale were removed")
			}
			logged := len(logs.String())
			mustStatus(t, a.admin("POST", "/v1/admin/sales/ar1/close", nil), http.StatusOK)

			waitfor.Until(t, waitfor.Patience, "the closed sale's keys to go", func() error {
				if keys := a.saleKeys("ar1"); len(keys) > 0 {
					return fmt.Errorf("keys left: %v", keys)
				}
				return nil
			})
			r := a.call("GET", "/v1/sales/ar1", "", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["archived"] != true || r.json(t)["status"] != "ended" || soldOf(t, r) != 2 {
				t.Fatalf("archived sale: %s", r.body)
			}
			r = a.call("GET", "/v1/orders/"+orders[0], a.token("u1"), nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "confirmed" {
				t.Fatalf("order of an archived sale: %s", r.body)
			}
			// A cancel now is the database's; the units go back to no one.
			r = a.call("POST", "/v1/orders/"+orders[0]+"/cancel", a.token("u1"), nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "cancelled" {
				t.Fatalf("cancel of an order of an archived sale: %s", r.body)
			}
			mustStatus(t, a.call("POST", "/v1/orders/"+orders[0]+"/cancel", a.token("u1"), nil), http.StatusOK) // again
			if r := a.call("POST", "/v1/orders/"+orders[1]+"/cancel", a.token("u1"), nil); r.status != http.StatusNotFound {
				t.Fatalf("someone else's order of an archived sale: %d %s", r.status, r.body)
			}
			r = a.call("GET", "/v1/sales/ar1", "", nil)
			if r.json(t)["archived"] != true || soldOf(t, r) != 1 {
				t.Fatalf("archived sale after a cancel: %s", r.body)
			}
			r = a.admin("GET", "/v1/admin/sales/ar1/reconcile", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["consistent"] != true {
				t.Fatalf("reconcile of an archived sale: %s", r.body)
			}
			// Nothing sells it again, nor brings its keys back.
			for _, r := range []reply{
				a.buyOne("ar1", "u9"),
				a.admin("POST", "/v1/admin/sales/ar1/items/A/restock", map[string]any{"qty": 5}),
			} {
				if r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
					t.Fatalf("on an archived sale: %d %s, want 409 sale_not_active", r.status, r.body)
				}
			}
			r = a.admin("POST", "/v1/admin/sales/ar1/close", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["archived"] != true {
				t.Fatalf("close of an archived sale: %s", r.body)
			}
			time.Sleep(200 * time.Millisecond) // a few consumer rounds, archiver and reconciliation passes
			if keys := a.saleKeys("ar1"); len(keys) > 0 {
				t.Fatalf("an archived sale is back in Redis: %v", keys)
			}
			// Closing, archiving and reading the archived sale logged no warning
			// about it (the consumer, the reconciliation loop, the archiver).
			for _, line := range strings.Split(logs.String()[logged:], "\n") {
				if strings.Contains(line, "ar1") || strings.Contains(line, "archiv") || strings.Contains(line, "NOGROUP") {
					t.Errorf("logged after the close: %s", line)
				}
			}
		})
	}
}
