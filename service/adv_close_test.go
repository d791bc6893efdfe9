package service_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/waitfor"
	"github.com/seckill/seckill/service"
)

// TestAdvCloseSegmentedSale: closing a segmented sale closes every segment
// (no buy of it is accepted afterwards), archiving removes every segment's
// keys, and the archived sale still reads as one sale: archived, ended, its
// total sold.
func TestAdvCloseSegmentedSale(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			a := startStack(t, st, func(c *service.Config) { c.ArchiveEvery = 20 * time.Millisecond })
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
		})
	}
}
