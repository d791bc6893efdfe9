package service_test

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestCreateAndReadSale(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		r := a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "per_user_limit": 2,
			"starts_at": start.Format(time.RFC3339), "ends_at": start.Add(time.Hour).Format(time.RFC3339),
			"items": []map[string]any{{"sku": "A", "stock": 100}, {"sku": "B", "stock": -1}}})
		mustStatus(t, r, http.StatusCreated)
		got := a.call("GET", "/v1/sales/s1", "", nil)
		mustStatus(t, got, http.StatusOK)
		body := got.json(t)
		if body["id"] != "s1" || body["status"] != "active" || body["per_user_limit"] != 2.0 {
			t.Errorf("sale = %s", got.body)
		}
		items := body["items"].([]any)
		if len(items) != 2 || items[0].(map[string]any)["sku"] != "A" || items[0].(map[string]any)["remaining"] != 100.0 ||
			items[1].(map[string]any)["remaining"] != -1.0 {
			t.Errorf("items = %v", items)
		}
		if !reflect.DeepEqual(r.json(t), body) {
			t.Errorf("create answered %s, GET answers %s", r.body, got.body)
		}
		dup := a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "items": []map[string]any{{"sku": "A", "stock": 1}}})
		if dup.status != http.StatusConflict || dup.code(t) != "already_exists" {
			t.Errorf("duplicate create: %d %s", dup.status, dup.body)
		}
		if r := a.call("GET", "/v1/sales/nope", "", nil); r.status != http.StatusNotFound || r.code(t) != "not_found" {
			t.Errorf("unknown sale: %d %s", r.status, r.body)
		}
		for _, path := range []string{"/v1/sales/a%20b", "/v1/sales/" + strings.Repeat("x", 65)} {
			if r := a.call("GET", path, "", nil); r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("malformed sale id %s: %d %s", path, r.status, r.body)
			}
		}
	})
}

func TestCreateSaleRejectsBadInput(t *testing.T) {
	item := []map[string]any{{"sku": "A", "stock": 1}}
	cases := map[string]any{
		"not json":           "{",
		"array":              "[]",
		"unknown field":      map[string]any{"id": "x", "items": item, "color": "red"},
		"unknown item field": map[string]any{"id": "x", "items": []map[string]any{{"sku": "A", "stock": 1, "x": 1}}},
		"missing id":         map[string]any{"items": item},
		"bad id":             map[string]any{"id": "a b", "items": item},
		"long id":            map[string]any{"id": strings.Repeat("x", 65), "items": item},
		"no items":           map[string]any{"id": "x", "items": []any{}},
		"missing stock":      map[string]any{"id": "x", "items": []map[string]any{{"sku": "A"}}},
		"stock -2":           map[string]any{"id": "x", "items": []map[string]any{{"sku": "A", "stock": -2}}},
		"stock too big":      map[string]any{"id": "x", "items": []map[string]any{{"sku": "A", "stock": 1_000_000_001}}},
		"fractional stock":   `{"id":"x","items":[{"sku":"A","stock":1.5}]}`,
		"duplicate sku":      map[string]any{"id": "x", "items": []map[string]any{{"sku": "A", "stock": 1}, {"sku": "A", "stock": 2}}},
		"limit 0":            map[string]any{"id": "x", "per_user_limit": 0, "items": item},
		"bad time":           map[string]any{"id": "x", "starts_at": "tomorrow", "items": item},
		"end before start":   map[string]any{"id": "x", "starts_at": "2026-11-21T13:00:00Z", "ends_at": "2026-11-21T12:00:00Z", "items": item},
		"trailing data":      `{"id":"x","items":[{"sku":"A","stock":1}]} {}`,
		"over 64 KiB":        `{"id":"x","items":[{"sku":"A","stock":1}],"pad":"` + strings.Repeat("x", 70<<10) + `"}`,
	}
	forEachStack(t, func(t *testing.T, a *app) {
		for name, body := range cases {
			r := a.admin("POST", "/v1/admin/sales", body)
			if r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
		if r := a.call("GET", "/v1/sales/x", "", nil); r.status != http.StatusNotFound {
			t.Errorf("a rejected create left sale x behind: %d", r.status)
		}
		if ids, _ := a.svc.Store().SaleIDs(a.ctx); len(ids) != 0 {
			t.Errorf("rejected creates wrote sales %v", ids)
		}
	})
}

func TestAuth(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1, "A", 10)
		body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		rs256, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "u1"}).SignedString(rsaKey)
		none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "u1"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
		expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(-time.Minute).Unix()}).
			SignedString([]byte(a.svc.JWTSecret()))
		wrongKey, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1"}).SignedString([]byte("another secret"))
		noSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"name": "u1"}).SignedString([]byte(a.svc.JWTSecret()))
		badSub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u 1"}).SignedString([]byte(a.svc.JWTSecret()))
		for name, tok := range map[string]string{"none": "", "garbage": "x.y.z", "alg none": none, "RS256": rs256,
			"expired": expired, "wrong key": wrongKey, "no sub": noSub, "bad sub": badSub, "admin token": a.svc.AdminToken()} {
			r := a.call("POST", "/v1/sales/s1/orders", tok, body)
			if r.status != http.StatusUnauthorized || r.code(t) != "unauthenticated" {
				t.Errorf("buy with %s token: %d %s", name, r.status, r.body)
			}
		}
		admin := map[string]any{"id": "s2", "items": []map[string]any{{"sku": "A", "stock": 1}}}
		if r := a.call("POST", "/v1/admin/sales", "", admin); r.status != http.StatusUnauthorized || r.code(t) != "unauthenticated" {
			t.Errorf("admin without token: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/admin/sales", a.token("u1"), admin); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
			t.Errorf("admin with a user token: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/admin/sales", "wrong-admin-token", admin); r.status != http.StatusUnauthorized {
			t.Errorf("admin with a wrong token: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/sales/s1/orders", a.token("u1"), body); r.status != http.StatusCreated {
			t.Errorf("a good token was refused: %d %s", r.status, r.body)
		}
	})
}

func TestBuyAnswers(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 2, "A", 3, "B", 1, "U", -1)
		u1 := a.token("u1")
		buy := func(tok string, key string, items ...any) reply {
			var list []map[string]any
			for i := 0; i < len(items); i += 2 {
				list = append(list, map[string]any{"sku": items[i], "qty": items[i+1]})
			}
			var h []string
			if key != "" {
				h = []string{"Idempotency-Key", key}
			}
			return a.call("POST", "/v1/sales/s1/orders", tok, map[string]any{"items": list}, h...)
		}
		r := buy(u1, "k1", "A", 2, "U", 1)
		mustStatus(t, r, http.StatusCreated)
		order := r.json(t)
		if order["sale_id"] != "s1" || order["status"] != "pending" || order["order_id"] == "" {
			t.Errorf("order = %s", r.body)
		}
		lines := order["items"].([]any)
		if l := lines[0].(map[string]any); l["sku"] != "A" || l["qty"] != 2.0 || l["remaining"] != 1.0 {
			t.Errorf("line = %v", l)
		}
		again := buy(u1, "k1", "A", 2, "U", 1)
		if again.status != http.StatusOK || again.json(t)["order_id"] != order["order_id"] {
			t.Errorf("repeat: %d %s", again.status, again.body)
		}
		checks := []struct {
			name   string
			r      func() reply
			status int
			code   string
			skus   []any
		}{
			{"over the limit", func() reply { return buy(u1, "", "A", 1, "U", 2) }, 409, "limit_exceeded", []any{"A", "U"}},
			{"sold out", func() reply { return buy(a.token("u2"), "", "A", 2, "B", 2) }, 409, "sold_out", []any{"A", "B"}},
			{"unknown sku", func() reply { return buy(u1, "", "X", 1) }, 404, "not_found", nil},
			{"qty 0", func() reply { return buy(u1, "", "A", 0) }, 400, "invalid_argument", nil},
			{"qty too big", func() reply { return buy(u1, "", "A", 1_000_000_001) }, 400, "invalid_argument", nil},
			{"duplicate sku", func() reply { return buy(u1, "", "A", 1, "A", 1) }, 400, "invalid_argument", nil},
			{"empty items", func() reply { return buy(u1, "") }, 400, "invalid_argument", nil},
			{"bad sku", func() reply { return buy(u1, "", "a/b", 1) }, 400, "invalid_argument", nil},
			{"key too long", func() reply { return buy(u1, strings.Repeat("k", 65), "A", 1) }, 400, "invalid_argument", nil},
			{"fractional qty", func() reply {
				return a.call("POST", "/v1/sales/s1/orders", u1, `{"items":[{"sku":"A","qty":0.5}]}`)
			}, 400, "invalid_argument", nil},
			{"string qty", func() reply {
				return a.call("POST", "/v1/sales/s1/orders", u1, `{"items":[{"sku":"A","qty":"1"}]}`)
			}, 400, "invalid_argument", nil},
			{"unknown field", func() reply {
				return a.call("POST", "/v1/sales/s1/orders", u1, `{"items":[{"sku":"A","qty":1}],"coupon":"x"}`)
			}, 400, "invalid_argument", nil},
			{"missing qty", func() reply { return a.call("POST", "/v1/sales/s1/orders", u1, `{"items":[{"sku":"A"}]}`) }, 400, "invalid_argument", nil},
			{"body over 64 KiB", func() reply {
				return a.call("POST", "/v1/sales/s1/orders", u1, `{"items":[{"sku":"`+strings.Repeat("A", 70<<10)+`","qty":1}]}`)
			}, 400, "invalid_argument", nil},
			{"unknown sale", func() reply {
				return a.call("POST", "/v1/sales/nope/orders", u1, map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
			}, 404, "not_found", nil},
		}
		for _, c := range checks {
			a.settle("s1") // the journal and the stream move while the pipeline catches up
			before := a.state("s1")
			r := c.r()
			if r.status != c.status || r.code(t) != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
				continue
			}
			if c.skus != nil {
				body := r.json(t)
				if !reflect.DeepEqual(body["error"].(map[string]any)["skus"], c.skus) && !reflect.DeepEqual(body["skus"], c.skus) {
					t.Errorf("%s: skus in %s, want %v", c.name, r.body, c.skus)
				}
			}
			a.settle("s1")
			if after := a.state("s1"); !reflect.DeepEqual(before, after) {
				t.Errorf("%s changed state:\n before %+v\n after  %+v", c.name, before, after)
			}
		}
		mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
		if r := buy(a.token("u3"), "", "U", 1); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
			t.Errorf("buy in a paused sale: %d %s", r.status, r.body)
		}
		if r := a.call("GET", "/v1/sales/s1", "", nil); r.json(t)["status"] != "paused" {
			t.Errorf("paused sale reads %s", r.body)
		}
		mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/resume", nil), http.StatusOK)
		mustStatus(t, buy(a.token("u3"), "", "U", 1), http.StatusCreated)
	})
}

func TestOrdersAreTheirOwnersOnly(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 1, "A", 5)
		r := a.call("POST", "/v1/sales/s1/orders", a.token("alice"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
		mustStatus(t, r, http.StatusCreated)
		id := r.json(t)["order_id"].(string)
		path := "/v1/orders/" + id

		got := a.call("GET", path, a.token("alice"), nil)
		mustStatus(t, got, http.StatusOK)
		if b := got.json(t); b["user_id"] != "alice" || b["sale_id"] != "s1" || b["created_at"] == nil {
			t.Errorf("order = %s", got.body)
		}
		for name, r := range map[string]reply{
			"read by bob":     a.call("GET", path, a.token("bob"), nil),
			"cancel by bob":   a.call("POST", path+"/cancel", a.token("bob"), nil),
			"unknown order":   a.call("GET", "/v1/orders/s1.01JD0000000000000000000000", a.token("alice"), nil),
			"malformed order": a.call("GET", "/v1/orders/garbage", a.token("alice"), nil),
		} {
			if r.status != http.StatusNotFound || r.code(t) != "not_found" {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
		if r := a.call("GET", path, "", nil); r.status != http.StatusUnauthorized {
			t.Errorf("anonymous read: %d", r.status)
		}
		a.settle("s1")
		if r := a.admin("GET", path, nil); r.status != http.StatusOK || r.json(t)["status"] != "confirmed" {
			t.Errorf("admin read after the pipeline: %d %s", r.status, r.body)
		}
		c1 := a.call("POST", path+"/cancel", a.token("alice"), nil)
		mustStatus(t, c1, http.StatusOK)
		c2 := a.call("POST", path+"/cancel", a.token("alice"), nil)
		mustStatus(t, c2, http.StatusOK)
		if c1.json(t)["status"] != "cancelled" || !reflect.DeepEqual(c1.json(t), c2.json(t)) {
			t.Errorf("cancel twice: %s then %s", c1.body, c2.body)
		}
		if r := a.call("GET", "/v1/sales/s1", "", nil); r.json(t)["items"].([]any)[0].(map[string]any)["remaining"] != 5.0 {
			t.Errorf("stock not returned: %s", r.body)
		}
		a.settle("s1")
		if r := a.call("GET", path, a.token("alice"), nil); r.json(t)["status"] != "cancelled" {
			t.Errorf("after the pipeline the order reads %s", r.body)
		}
	})
}

func TestRestockAndReconcile(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 5, "A", 1, "U", -1)
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}), http.StatusCreated)
		r := a.admin("POST", "/v1/admin/sales/s1/items/A/restock", map[string]any{"qty": 10})
		mustStatus(t, r, http.StatusOK)
		if b := r.json(t); b["sku"] != "A" || b["remaining"] != 10.0 {
			t.Errorf("restock = %s", r.body)
		}
		for name, c := range map[string]struct {
			path   string
			body   any
			status int
		}{
			"unlimited":   {"/v1/admin/sales/s1/items/U/restock", map[string]any{"qty": 1}, 400},
			"qty 0":       {"/v1/admin/sales/s1/items/A/restock", map[string]any{"qty": 0}, 400},
			"no qty":      {"/v1/admin/sales/s1/items/A/restock", map[string]any{}, 400},
			"unknown sku": {"/v1/admin/sales/s1/items/X/restock", map[string]any{"qty": 1}, 404},
			"unknown":     {"/v1/admin/sales/nope/items/A/restock", map[string]any{"qty": 1}, 404},
		} {
			if r := a.admin("POST", c.path, c.body); r.status != c.status {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
		a.settle("s1")
		rec := a.admin("GET", "/v1/admin/sales/s1/reconcile", nil).json(t)
		a0 := rec["items"].([]any)[0].(map[string]any)
		want := map[string]float64{"stocked": 11, "remaining": 10, "sold": 1, "orders_in_db": 1, "in_flight": 0, "drift": 0}
		for k, v := range want {
			if a0[k] != v {
				t.Errorf("reconcile %s = %v, want %v (%v)", k, a0[k], v, a0)
			}
		}
		if rec["sale"] != "s1" || rec["consistent"] != true {
			t.Errorf("reconcile = %v", rec)
		}
		if r := a.call("GET", "/v1/admin/sales/s1/reconcile", a.token("u1"), nil); r.status != http.StatusForbidden {
			t.Errorf("reconcile by a buyer: %d", r.status)
		}
	})
}

func TestPurchaseTokens(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "require_purchase_token": true,
			"items": []map[string]any{{"sku": "A", "stock": 5}}}), http.StatusCreated)
		body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		alice, bob := a.token("alice"), a.token("bob")
		if r := a.call("POST", "/v1/sales/s1/orders", alice, body); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
			t.Errorf("buy without a token: %d %s", r.status, r.body)
		}
		r := a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil)
		mustStatus(t, r, http.StatusCreated)
		tok := r.json(t)["token"].(string)
		if r.json(t)["expires_at"] == nil {
			t.Errorf("no expires_at: %s", r.body)
		}
		if r := a.call("POST", "/v1/sales/s1/orders", bob, body, "X-Purchase-Token", tok); r.status != http.StatusForbidden {
			t.Errorf("someone else's token: %d %s", r.status, r.body)
		}
		if r := a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok+"x"); r.status != http.StatusForbidden {
			t.Errorf("a forged token: %d %s", r.status, r.body)
		}
		mustStatus(t, a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok), http.StatusCreated)
		if r := a.call("POST", "/v1/sales/s1/orders", alice, body, "X-Purchase-Token", tok); r.status != http.StatusForbidden {
			t.Errorf("a used token: %d %s", r.status, r.body)
		}
		mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
		if r := a.call("POST", "/v1/sales/s1/purchase-tokens", alice, nil); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
			t.Errorf("token for a paused sale: %d %s", r.status, r.body)
		}
	})
}

func TestOperationsEndpoints(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.call("GET", "/healthz", "", nil), http.StatusOK)
		mustStatus(t, a.call("GET", "/readyz", "", nil), http.StatusOK)
		a.createSale("s1", 1, "A", 5)
		a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
		m := a.call("GET", "/metrics", "", nil)
		if m.status != http.StatusOK || !strings.Contains(string(m.body), `seckill_buy_requests_total{result="ok"} 1`) ||
			!strings.Contains(string(m.body), "go_goroutines") {
			t.Errorf("metrics: %d\n%.400s", m.status, m.body)
		}
		page := a.call("GET", "/", "", nil)
		if page.status != http.StatusOK || !strings.Contains(page.header.Get("Content-Type"), "text/html") {
			t.Errorf("dashboard: %d %s", page.status, page.header.Get("Content-Type"))
		}
		if r := a.call("GET", "/nope", "", nil); r.status != http.StatusNotFound || r.code(t) != "not_found" {
			t.Errorf("unknown path: %d %s", r.status, r.body)
		}
		if r := a.call("DELETE", "/v1/sales/s1", "", nil); r.status != http.StatusMethodNotAllowed || r.code(t) == "" {
			t.Errorf("wrong method: %d %s", r.status, r.body)
		}
	})
}

// TestSellOutOverHTTP: 1,500 buyers at 50 units. Exactly the stock sells,
// nobody goes over the limit, every 201 becomes a confirmed order, and
// reconciliation is consistent.
func TestSellOutOverHTTP(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("hot", 1, "A", 50)
		type result struct {
			status int
			order  string
		}
		results := make(chan result, 1500)
		sem := make(chan struct{}, 48)
		for i := range 1500 {
			sem <- struct{}{}
			go func() {
				// Sent however this goroutine ends: a.call fails the test
				// from here (runtime.Goexit), and the loop below would wait
				// for ever for a result never sent.
				var res result
				defer func() { results <- res; <-sem }()
				r := a.call("POST", "/v1/sales/hot/orders", a.token(fmt.Sprintf("u%d", i%1200)),
					map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
				res.status = r.status
				if r.status == http.StatusCreated {
					res.order = r.json(t)["order_id"].(string)
				}
			}()
		}
		var accepted []string
		for range 1500 {
			r := <-results
			switch r.status {
			case http.StatusCreated:
				accepted = append(accepted, r.order)
			case http.StatusConflict:
			default:
				t.Errorf("unexpected status %d", r.status)
			}
		}
		if len(accepted) != 50 {
			t.Errorf("%d buys accepted, want exactly 50", len(accepted))
		}
		a.settle("hot")
		for _, id := range accepted {
			o, err := a.svc.Store().Order(a.ctx, id)
			if err != nil || o.Status != "confirmed" {
				t.Errorf("order %s: %+v, %v", id, o, err)
			}
		}
		snap, err := a.svc.Store().Snapshot(a.ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		perUser := map[string]int64{}
		for _, o := range snap.Orders {
			perUser[o.UserID] += o.Items[0].Qty
			if perUser[o.UserID] > 1 {
				t.Errorf("%s holds %d", o.UserID, perUser[o.UserID])
			}
		}
		if len(snap.Orders) != 50 {
			t.Errorf("%d orders in the database, want 50", len(snap.Orders))
		}
	})
}

// TestReconcileFindsDrift: the report is not consistent by construction.
// A stock counter moved outside any order shows as stock drift; an order
// Redis lost (while the database has it) shows as drift.
func TestReconcileFindsDrift(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		a.createSale("s1", 5, "A", 10)
		r := a.call("POST", "/v1/sales/s1/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}})
		mustStatus(t, r, http.StatusCreated)
		a.settle("s1")
		eng, rdb := a.svc.Engine(), a.svc.Redis()
		item := func() map[string]any {
			rep := a.admin("GET", "/v1/admin/sales/s1/reconcile", nil).json(t)
			if rep["consistent"] != false {
				t.Errorf("report says consistent: %v", rep)
			}
			return rep["items"].([]any)[0].(map[string]any)
		}
		// Three units vanish from the counter, no order says why.
		if err := rdb.HIncrBy(a.ctx, eng.Key("s1", "sale"), "r:A", -3).Err(); err != nil {
			t.Fatal(err)
		}
		if it := item(); it["stock_drift"] != -3.0 || it["drift"] != 0.0 {
			t.Errorf("after a counter leak: %v", it)
		}
		if err := rdb.HIncrBy(a.ctx, eng.Key("s1", "sale"), "r:A", 3).Err(); err != nil {
			t.Fatal(err)
		}
		// Redis loses the order record (a failover lost the write); the database has it.
		dropOrder(a.ctx, t, rdb, eng.Key("s1", "orders"), r.json(t)["order_id"].(string))
		if it := item(); it["drift"] != 2.0 || it["sold"] != 0.0 || it["orders_in_db"] != 2.0 {
			t.Errorf("after a lost order: %v", it)
		}
	})
}
