package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestAdvCloseSegmentedSale: closing a segmented sale closes every segment
// (no buy of it is accepted afterwards), archiving removes every segment's
// keys, and the archived sale still reads as one sale: archived, ended, its
// total sold.
func TestAdvCloseSegmentedSale(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.ArchiveEvery = 20 * time.Millisecond
			a := startApp(t, cfg)
			mustStatus(t, a.createSegmented("hs", 1, "A", int64(40), 4), http.StatusCreated)
			segs, err := a.svc.Store().Segments(a.ctx, "hs")
			if err != nil || len(segs) != 4 {
				t.Fatalf("segments: %v %v", segs, err)
			}
			var orders []string
			for u := range 8 {
				r := a.buyOne("hs", fmt.Sprintf("u%d", u))
				mustStatus(t, r, http.StatusCreated)
				orders = append(orders, r.json(t)["order_id"].(string))
			}
			// A segment is closed by closing its sale, not alone.
			if r := a.admin("POST", "/v1/admin/sales/"+segs[0]+"/close", nil); r.status != http.StatusNotFound {
				t.Fatalf("close of a segment: %d %s", r.status, r.body)
			}
			r := a.admin("POST", "/v1/admin/sales/hs/close", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["status"] != "ended" {
				t.Fatalf("close: %s", r.body)
			}
			// Every buyer, whatever their home segment, is refused now.
			for u := range 16 {
				if r := a.buyOne("hs", fmt.Sprintf("late%d", u)); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
					t.Fatalf("buy after close of a segmented sale: %d %s", r.status, r.body)
				}
			}
			waitfor.Until(t, waitfor.Patience, "every segment's keys to go", func() error {
				for _, seg := range segs {
					if keys := a.saleKeys(seg); len(keys) > 0 {
						return fmt.Errorf("keys left: %v", keys)
					}
				}
				return nil
			})
			r = a.call("GET", "/v1/sales/hs", "", nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["archived"] != true || r.json(t)["status"] != "ended" || soldOf(t, r) != 8 {
				t.Fatalf("archived segmented sale: %s", r.body)
			}
			// Orders read under the sale's id; a cancel is the database's,
			// and the sale reads one fewer sold, reconciled as one sale.
			r = a.call("GET", "/v1/orders/"+orders[0], a.token("u0"), nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["sale_id"] != "hs" || r.json(t)["status"] != "confirmed" {
				t.Fatalf("order of an archived segmented sale: %s", r.body)
			}
			r = a.call("POST", "/v1/orders/"+orders[0]+"/cancel", a.token("u0"), nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["sale_id"] != "hs" || r.json(t)["status"] != "cancelled" {
				t.Fatalf("cancel of an order of an archived segmented sale: %s", r.body)
			}
			if r := a.call("GET", "/v1/sales/hs", "", nil); soldOf(t, r) != 7 || r.json(t)["archived"] != true {
				t.Fatalf("archived segmented sale after a cancel: %s", r.body)
			}
			r = a.admin("GET", "/v1/admin/sales/hs/reconcile", nil)
			mustStatus(t, r, http.StatusOK)
			items, _ := r.json(t)["items"].([]any)
			if r.json(t)["consistent"] != true || len(items) != 1 || items[0].(map[string]any)["sold"] != 7.0 {
				t.Fatalf("reconcile of an archived segmented sale: %s", r.body)
			}
			// Nothing sells it again.
			for _, r := range []reply{
				a.buyOne("hs", "u9"),
				a.admin("POST", "/v1/admin/sales/hs/items/A/restock", map[string]any{"qty": 5}),
			} {
				if r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
					t.Fatalf("on an archived segmented sale: %d %s, want 409 sale_not_active", r.status, r.body)
				}
			}
			// Nothing of it stays in Redis: its directory (the list of its
			// segments, under the sale's own id) went with the last segment,
			// and an instance that never read it does not put it back.
			waitfor.Until(t, waitfor.Patience, "the directory to go", func() error {
				if keys := a.saleKeys("hs"); len(keys) > 0 {
					return fmt.Errorf("keys left: %v", keys)
				}
				return nil
			})
			b := startApp(t, cfg) // an instance that never read the directory
			if r := b.call("GET", "/v1/sales/hs", "", nil); r.status != http.StatusOK || r.json(t)["archived"] != true || soldOf(t, r) != 7 {
				t.Fatalf("archived segmented sale read by another instance: %d %s", r.status, r.body)
			}
			if r := b.buyOne("hs", "u10"); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
				t.Fatalf("buy of an archived segmented sale on another instance: %d %s", r.status, r.body)
			}
			if keys := a.saleKeys("hs"); len(keys) > 0 {
				t.Fatalf("keys of the archived segmented sale back: %v", keys)
			}
		})
	}
}

// TestAdvSegmentedSaleWithPayment: a segmented sale with a payment step:
// the orders' answers (buy, GET, pay, cancel) show the sale's id, never a
// segment's, and their payment step, whether the order is in the database
// yet or not.
func TestAdvSegmentedSaleWithPayment(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "hp", "per_user_limit": 1,
			"payment_timeout_s": 600, "items": []map[string]any{{"sku": "A", "stock": 20, "segments": 4}}}), http.StatusCreated)
		check := func(what string, r reply, payment string) {
			t.Helper()
			mustStatus(t, r, http.StatusOK)
			if m := r.json(t); m["sale_id"] != "hp" || m["payment_status"] != payment {
				t.Fatalf("%s: %s", what, r.body)
			}
		}
		for u := range 6 {
			user := fmt.Sprintf("u%d", u)
			r := a.buyOne("hp", user)
			mustStatus(t, r, http.StatusCreated)
			if m := r.json(t); m["sale_id"] != "hp" || m["payment_status"] != "awaiting" {
				t.Fatalf("buy: %s", r.body)
			}
			order := r.json(t)["order_id"].(string)
			check("GET", a.call("GET", "/v1/orders/"+order, a.token(user), nil), "awaiting")
			check("pay", a.pay(user, order, "ref-"+user), "paid")
			check("pay again", a.pay(user, order, "ref-"+user), "paid")
			check("GET after pay", a.call("GET", "/v1/orders/"+order, a.token(user), nil), "paid")
		}
	})
}

// TestAdvIdempotentBuyResentAfterArchive: a buy resent with its
// Idempotency-Key (its first reply lost) returns the order it made (200),
// as the contract says, also once the sale has ended and is archived: the
// buyer must not be told that the buy failed while the order stands. Of an
// ordinary sale and of a segmented one (the order is in the buyer's home
// segment).
func TestAdvIdempotentBuyResentAfterArchive(t *testing.T) {
	forEachStackCfg(t, func(c *service.Config) { c.ArchiveEvery = 20 * time.Millisecond }, func(t *testing.T, a *app) {
		a.createSale("ik", 1, "A", 10)
		mustStatus(t, a.createSegmented("iks", 1, "A", int64(10), 3), http.StatusCreated)
		buy := func(sale string) reply {
			return a.call("POST", "/v1/sales/"+sale+"/orders", a.token("u1"),
				map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, "Idempotency-Key", "k-1")
		}
		first := map[string]string{}
		for _, sale := range []string{"ik", "iks"} {
			r := buy(sale)
			mustStatus(t, r, http.StatusCreated)
			first[sale] = r.json(t)["order_id"].(string)
			mustStatus(t, a.admin("POST", "/v1/admin/sales/"+sale+"/close", nil), http.StatusOK)
			r = buy(sale) // ended, not archived yet (maybe): Redis replays it
			mustStatus(t, r, http.StatusOK)
		}
		waitfor.Until(t, waitfor.Patience, "both sales to be archived", func() error {
			for _, sale := range []string{"ik", "iks"} {
				if r := a.call("GET", "/v1/sales/"+sale, "", nil); r.json(t)["archived"] != true {
					return fmt.Errorf("%s: %s", sale, r.body)
				}
			}
			return nil
		})
		for _, sale := range []string{"ik", "iks"} {
			r := buy(sale)
			if r.status != http.StatusOK || r.json(t)["order_id"] != first[sale] || r.json(t)["sale_id"] != sale {
				t.Fatalf("buy of %s resent after archive: %d %s, want 200 with order %s", sale, r.status, r.body, first[sale])
			}
			// Another key is a new buy: refused, the sale has ended.
			r = a.call("POST", "/v1/sales/"+sale+"/orders", a.token("u1"),
				map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, "Idempotency-Key", "k-2")
			if r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
				t.Fatalf("new buy of archived %s: %d %s", sale, r.status, r.body)
			}
		}
	})
}

// forEachStackCfg is forEachStack with cfg's changes.
func forEachStackCfg(t *testing.T, change func(*service.Config), f func(t *testing.T, a *app)) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) { f(t, startStack(t, st, change)) })
	}
}

// TestAdvSegmentedSalePartlyArchived: a closed segmented sale one of whose
// segments waits for a reservation's payment while the others are
// archived is not shown archived (its keys are not all gone, and a pay
// still changes it), and reads its reservation awaiting; once paid, every
// segment goes and it reads archived.
func TestAdvSegmentedSalePartlyArchived(t *testing.T) {
	forEachStackCfg(t, func(c *service.Config) { c.ArchiveEvery = 20 * time.Millisecond }, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "pp", "per_user_limit": 1,
			"payment_timeout_s": 600, "items": []map[string]any{{"sku": "A", "stock": 20, "segments": 2}}}), http.StatusCreated)
		segs, err := a.svc.Store().Segments(a.ctx, "pp")
		if err != nil || len(segs) != 2 {
			t.Fatalf("segments: %v %v", segs, err)
		}
		// One buyer at home in each segment.
		users := map[string]string{}
		for u := 0; len(users) < 2; u++ {
			user := fmt.Sprintf("u%d", u)
			if h := segment.Home(segs, user); users[h] == "" {
				users[h] = user
			}
		}
		orders := map[string]string{}
		for _, seg := range segs {
			r := a.buyOne("pp", users[seg])
			mustStatus(t, r, http.StatusCreated)
			orders[seg] = r.json(t)["order_id"].(string)
		}
		mustStatus(t, a.pay(users[segs[0]], orders[segs[0]], "ref"), http.StatusOK)
		mustStatus(t, a.admin("POST", "/v1/admin/sales/pp/close", nil), http.StatusOK)
		waitfor.Until(t, waitfor.Patience, "the paid segment to be archived", func() error {
			if st, err := a.svc.Store().Archive(a.ctx, segs[0]); err != nil || st.ArchivedAt.IsZero() {
				return fmt.Errorf("%+v %v", st, err)
			}
			return nil
		})
		r := a.call("GET", "/v1/sales/pp", "", nil)
		mustStatus(t, r, http.StatusOK)
		if r.json(t)["archived"] == true || soldOf(t, r) != 2 {
			t.Fatalf("a segmented sale with a segment left in Redis reads: %s", r.body)
		}
		mustStatus(t, a.pay(users[segs[1]], orders[segs[1]], "ref"), http.StatusOK)
		waitfor.Until(t, waitfor.Patience, "the sale to read archived", func() error {
			if r := a.call("GET", "/v1/sales/pp", "", nil); r.json(t)["archived"] != true || soldOf(t, r) != 2 {
				return fmt.Errorf("%s", r.body)
			}
			return nil
		})
	})
}

// TestAdvCloseSurvivesRedisLoss: a close answered 200 holds even if Redis
// loses the sale before the order consumer stored its closed event (a
// consumer that lags: the database was down, say): the sale rebuilt from
// the database is ended, and nobody buys after the close.
func TestAdvCloseSurvivesRedisLoss(t *testing.T) {
	forEachStackCfg(t, func(c *service.Config) { c.ArchiveEvery = -1 }, func(t *testing.T, a *app) {
		a.createSale("cl", 2, "A", 10)
		mustStatus(t, a.buyOne("cl", "u1"), http.StatusCreated)
		a.settle("cl")
		// The consumer is past every id the close can get: it never
		// delivers (so never stores) the closed event.
		rdb, key := a.svc.Redis(), a.svc.Engine().EventsKey("cl")
		if err := rdb.XGroupSetID(a.ctx, key, pipeline.Group, "99999999999999-0").Err(); err != nil {
			if strings.Contains(err.Error(), "not supported") {
				t.Skip("the embedded Redis lacks XGROUP SETID")
			}
			t.Fatal(err)
		}
		mustStatus(t, a.admin("POST", "/v1/admin/sales/cl/close", nil), http.StatusOK)
		// Redis loses the sale, stream and all.
		if err := rdb.Del(a.ctx, a.saleKeys("cl")...).Err(); err != nil {
			t.Fatal(err)
		}
		if r := a.buyOne("cl", "u2"); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
			t.Fatalf("buy after a close and a loss of Redis: %d %s", r.status, r.body)
		}
	})
}
