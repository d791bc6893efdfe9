package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestPurchaseTokenSpentOnlyByAnAcceptedBuy: a token is spent by the buy
// that is accepted, in the same script, and by nothing else. A buy refused
// for an unknown sku (404) or over the limit (409) leaves it usable; a
// repeat of the accepted buy (same Idempotency-Key, same token) returns the
// first order (200) instead of 403; a new buy with the spent token is 403.
func TestPurchaseTokenSpentOnlyByAnAcceptedBuy(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "require_purchase_token": true,
			"per_user_limit": 1, "items": []map[string]any{{"sku": "A", "stock": 5}, {"sku": "B", "stock": 5}}}), http.StatusCreated)
		alice := a.token("alice")
		newToken := func() string {
			r := a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil)
			mustStatus(t, r, http.StatusCreated)
			return r.json(t)["token"].(string)
		}
		items := func(sku string) map[string]any {
			return map[string]any{"items": []map[string]any{{"sku": sku, "qty": 1}}}
		}
		tok := newToken()
		if r := a.call("POST", "/v1/sales/s1/orders", alice, items("Z"), "X-Purchase-Token", tok); r.status != http.StatusNotFound {
			t.Fatalf("unknown sku: %d %s", r.status, r.body)
		}
		first := a.call("POST", "/v1/sales/s1/orders", alice, items("A"), "X-Purchase-Token", tok, "Idempotency-Key", "k1")
		if first.status != http.StatusCreated {
			t.Fatalf("the token after a 404: %d %s, want 201", first.status, first.body)
		}
		again := a.call("POST", "/v1/sales/s1/orders", alice, items("A"), "X-Purchase-Token", tok, "Idempotency-Key", "k1")
		if again.status != http.StatusOK || again.json(t)["order_id"] != first.json(t)["order_id"] {
			t.Errorf("the same buy again: %d %s, want 200 with order %v", again.status, again.body, first.json(t)["order_id"])
		}
		if r := a.call("POST", "/v1/sales/s1/orders", alice, items("B"), "X-Purchase-Token", tok, "Idempotency-Key", "k2"); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
			t.Errorf("a new buy with the spent token: %d %s, want 403", r.status, r.body)
		}

		tok = newToken()
		if r := a.call("POST", "/v1/sales/s1/orders", alice, items("A"), "X-Purchase-Token", tok); r.status != http.StatusConflict || r.code(t) != "limit_exceeded" {
			t.Fatalf("over the limit: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/sales/s1/orders", alice, items("B"), "X-Purchase-Token", tok); r.status != http.StatusCreated {
			t.Errorf("the token after a 409: %d %s, want 201", r.status, r.body)
		}
	})
}

// TestResentTokenBuyReturnsTheFirstOrder: a buy with a purchase token and
// an Idempotency-Key, sent again as it was (its answer was lost, say), is
// answered with the first order, 200, not 403 for a spent token.
func TestResentTokenBuyReturnsTheFirstOrder(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "require_purchase_token": true,
			"items": []map[string]any{{"sku": "A", "stock": 5}}}), http.StatusCreated)
		carol := a.token("carol")
		r := a.call("POST", "/v1/sales/s1/purchase-tokens", carol, nil)
		mustStatus(t, r, http.StatusCreated)
		tok := r.json(t)["token"].(string)
		body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		first := a.call("POST", "/v1/sales/s1/orders", carol, body, "X-Purchase-Token", tok, "Idempotency-Key", "k1")
		mustStatus(t, first, http.StatusCreated)
		for range 2 {
			again := a.call("POST", "/v1/sales/s1/orders", carol, body, "X-Purchase-Token", tok, "Idempotency-Key", "k1")
			if again.status != http.StatusOK || again.json(t)["order_id"] != first.json(t)["order_id"] {
				t.Errorf("the buy resent: %d %s, want 200 with order %v", again.status, again.body, first.json(t)["order_id"])
			}
		}
	})
}

// TestIdempotencyKeyWithOtherItems: the same Idempotency-Key with other
// items is 422 idempotency_mismatch and changes nothing; the exact repeat
// still returns the first order with 200; in degraded mode too.
func TestIdempotencyKeyWithOtherItems(t *testing.T) {
	for _, degraded := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis", true: "degraded"}[degraded], func(t *testing.T) {
			idempotencyKeyWithOtherItems(t, degraded)
		})
	}
}

// idempotencyKeyWithOtherItems is TestIdempotencyKeyWithOtherItems with
// Redis selling or, degraded, the database (which must keep the same rule).
func idempotencyKeyWithOtherItems(t *testing.T, degraded bool) {
	forEachStack(t, func(t *testing.T, a *app) {
		if degraded {
			a.forceDegraded()
		}
		a.createSale("s1", 5, "A", 10, "B", 10)
		bob := a.token("bob")
		body := func(lines ...any) map[string]any {
			var items []map[string]any
			for i := 0; i < len(lines); i += 2 {
				items = append(items, map[string]any{"sku": lines[i], "qty": lines[i+1]})
			}
			return map[string]any{"items": items}
		}
		var first reply
		if degraded {
			first = a.buyUntil("s1", "bob", "Idempotency-Key", "k1") // past the grace period: the database sells
		} else {
			first = a.call("POST", "/v1/sales/s1/orders", bob, body("A", 1), "Idempotency-Key", "k1")
		}
		mustStatus(t, first, http.StatusCreated)
		if !degraded {
			a.settle("s1") // the order in the database: the state below is still
		}
		before := a.state("s1")
		for _, other := range []map[string]any{body("A", 2), body("B", 1), body("A", 1, "B", 1)} {
			r := a.call("POST", "/v1/sales/s1/orders", bob, other, "Idempotency-Key", "k1")
			if r.status != http.StatusUnprocessableEntity || r.code(t) != "idempotency_mismatch" {
				t.Errorf("key k1 with %v: %d %s, want 422 idempotency_mismatch", other, r.status, r.body)
			}
		}
		if after := a.state("s1"); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("a mismatched repeat changed the state:\n%+v\n%+v", before, after)
		}
		again := a.call("POST", "/v1/sales/s1/orders", bob, body("A", 1), "Idempotency-Key", "k1")
		if again.status != http.StatusOK || again.json(t)["order_id"] != first.json(t)["order_id"] {
			t.Errorf("the exact repeat: %d %s, want 200 with order %v", again.status, again.body, first.json(t)["order_id"])
		}
	})
}

// TestBadIdempotencyKey: an empty, over-long or unprintable
// Idempotency-Key is 400 invalid_argument and changes nothing (no order,
// no quota or stock spent): the buyer can then buy with a good key.
func TestBadIdempotencyKey(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1, "A", 10)
		bob := a.token("bob")
		body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		a.settle("s1") // the sale's created event stored: the state below is still
		before := a.state("s1")
		for _, key := range []string{"", strings.Repeat("k", 65), "k 1"} {
			r := a.call("POST", "/v1/sales/s1/orders", bob, body, "Idempotency-Key", key)
			if r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("Idempotency-Key %q: %d %s, want 400 invalid_argument", key, r.status, r.body)
			}
		}
		if after := a.state("s1"); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("refused buys changed the state:\n%+v\n%+v", before, after)
		}
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", bob, body, "Idempotency-Key", strings.Repeat("k", 64)), http.StatusCreated)
	})
}

// TestSaleEndingBefore1970 is 400 invalid_argument: Redis keeps windows as
// unix ms with 0 for none, and such an end would read as no end at all.
func TestSaleEndingBefore1970(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		r := a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "ends_at": "1969-07-20T20:17:00Z",
			"items": []map[string]any{{"sku": "A", "stock": 5}}})
		if r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
			t.Errorf("a sale ending in 1969: %d %s, want 400 invalid_argument", r.status, r.body)
		}
	})
}

// TestSpentTokenSurvivesRedisLoss: a purchase token is accepted once,
// across a loss of Redis's data too. Alice's token buys once; Redis then
// loses the sale, every key of it (the token's mark with them), once the
// database has the order: the sale rebuilt from the database refuses the
// token again (403 permission_denied) and makes no second order. A buy
// without a token goes on as before.
func TestSpentTokenSurvivesRedisLoss(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "require_purchase_token": true,
			"per_user_limit": 3, "items": []map[string]any{{"sku": "A", "stock": 5}}}), http.StatusCreated)
		alice := a.token("alice")
		r := a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil)
		mustStatus(t, r, http.StatusCreated)
		tok := r.json(t)["token"].(string)
		body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok), http.StatusCreated)
		if r := a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok); r.status != http.StatusForbidden {
			t.Fatalf("the spent token before the loss: %d %s", r.status, r.body)
		}
		a.settle("s1")

		if err := a.svc.Redis().Del(a.ctx, a.saleKeys("s1")...).Err(); err != nil {
			t.Fatal(err)
		}
		if r := a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
			t.Errorf("the spent token after Redis lost the sale: %d %s, want 403 permission_denied", r.status, r.body)
		}
		a.settle("s1")
		if counts, err := a.svc.Store().CountOrders(a.ctx, "s1"); err != nil || counts[inventory.OrderConfirmed] != 1 {
			t.Errorf("orders in the database %v (%v), want the token's one", counts, err)
		}
		r = a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil)
		mustStatus(t, r, http.StatusCreated)
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", r.json(t)["token"].(string)), http.StatusCreated)
	})
}
