package service_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/service"
)

// Fuzz tests of the HTTP API with what a client may send: each request goes
// to a running service (the embedded stack: in-process Redis, SQLite), and
// a refused request must be the contract's error and change nothing.

// fuzzApp starts the service once per fuzzing process, with the buyers'
// rate limit off (the fuzzer is one very fast buyer), and creates sale "fz":
// A with 1,000,000,000 units, B unlimited, a limit of 1,000,000,000.
func fuzzApp(f *testing.F) *app {
	a := startApp(f, service.Config{DatabaseURL: dbtest.SQLiteURL(f), RateLimitUser: "off"})
	a.createSale("fz", 1_000_000_000, "A", 1_000_000_000, "B", -1)
	return a
}

// send is app.call for a fuzz function: it reports instead of failing, as
// the client refuses some inputs (header values with control characters).
func send(a *app, method, path, token string, body []byte, headers ...string) (reply, error) {
	req, err := http.NewRequest(method, a.svc.URL()+path, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header[headers[i]] = []string{headers[i+1]}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

// fuzzState is what a refused request must leave as it was: the stock,
// the quotas and the orders in Redis. (Not the event stream's length: the
// order pipeline trims it as it goes.)
func fuzzState(t *testing.T, a *app, sale string) string {
	t.Helper()
	eng, rdb := a.svc.Engine(), a.svc.Redis()
	st, err := eng.Stock(a.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	bought, err1 := rdb.HGetAll(a.ctx, eng.Key(sale, "bought")).Result()
	orders, err2 := redisOrders(a.ctx, rdb, eng.Key(sale, "orders"))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("stock %+v, bought %v, %d orders", st.Items, bought, len(orders))
}

// mustContractError fails unless r is an error answer of the contract with
// one of the statuses.
func mustContractError(t *testing.T, r reply, statuses ...int) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("status %d with a body that is no error of the contract: %q", r.status, r.body)
	}
	for _, s := range statuses {
		if r.status == s {
			return
		}
	}
	t.Fatalf("status %d (%s), want one of %v", r.status, r.body, statuses)
}

// FuzzBuyRequest: POST /v1/sales/fz/orders with any body and any
// Idempotency-Key. It answers 201 (a new order), 200 (a repeat of a key
// with the same items), or a 400, 404, 409 or 422 (the key with other
// items) of the contract, never anything else. A 201's
// order holds exactly the lines the body asked for and took exactly those
// units; every other answer changed nothing (stock, quotas, orders).
// Each new order is cancelled again, so the stock lasts.
func FuzzBuyRequest(f *testing.F) {
	for _, c := range []struct {
		body, key string
		hasKey    bool
	}{
		{`{"items":[{"sku":"A","qty":1}]}`, "", false},
		{`{"items":[{"sku":"A","qty":2},{"sku":"B","qty":3}]}`, "click-1", true},
		{`{"items":[{"sku":"A","qty":1}]}`, "click-1", true},
		{`{"items":[{"sku":"A","qty":0}]}`, "", false},
		{`{"items":[{"sku":"A","qty":1.5}]}`, "", false},
		{`{"items":[{"sku":"A","qty":1},{"sku":"A","qty":1}]}`, "", false},
		{`{"items":[{"sku":"Z","qty":1}]}`, "", false},
		{`{"items":[{"sku":"A","qty":1000000001}]}`, "", false},
		{`{"items":[{"sku":"A"}]}`, "", false},
		{`{"items":[]}`, "", false},
		{`{"items":[{"sku":"A","qty":1}],"x":1}`, "", false},
		{`{"items":[{"sku":"A","qty":1}]} {}`, "", false},
		{`{"items":[{"sku":"A","qty":1}]}`, "", true},
		{`{"items":[{"sku":"A","qty":1}]}`, strings.Repeat("k", 65), true},
		{`{"items":[{"sku":"A","qty":1}]}`, "with space", true},
		{`not json`, "", false},
	} {
		f.Add([]byte(c.body), c.key, c.hasKey)
	}
	a := fuzzApp(f)
	buyer := a.token("fuzzer")
	f.Fuzz(func(t *testing.T, body []byte, key string, hasKey bool) {
		var headers []string
		if hasKey {
			headers = []string{"Idempotency-Key", key}
		}
		before := fuzzState(t, a, "fz")
		st0, err := a.svc.Engine().Stock(a.ctx, "fz")
		if err != nil {
			t.Fatal(err)
		}
		r, err := send(a, "POST", "/v1/sales/fz/orders", buyer, body, headers...)
		if err != nil {
			return // the client would not send it
		}
		switch r.status {
		case http.StatusCreated:
		case http.StatusOK:
			if after := fuzzState(t, a, "fz"); after != before {
				t.Fatalf("a repeat (200 %s) changed\n%s\nto\n%s", r.body, before, after)
			}
			return
		default:
			mustContractError(t, r, http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity)
			if after := fuzzState(t, a, "fz"); after != before {
				t.Fatalf("refused %d (%s) but changed\n%s\nto\n%s", r.status, r.body, before, after)
			}
			return
		}
		var asked struct {
			Items []struct {
				SKU string `json:"sku"`
				Qty int64  `json:"qty"`
			} `json:"items"`
		}
		var got struct {
			OrderID string `json:"order_id"`
			UserID  string `json:"user_id"`
			Status  string `json:"status"`
			Items   []struct {
				SKU string `json:"sku"`
				Qty int64  `json:"qty"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &asked); err != nil {
			t.Fatalf("201 for a body encoding/json refuses: %v", err)
		}
		if err := json.Unmarshal(r.body, &got); err != nil || got.UserID != "fuzzer" || got.Status != "pending" ||
			!reflect.DeepEqual(got.Items, asked.Items) {
			t.Fatalf("201 %s for a buy of %+v", r.body, asked.Items)
		}
		st1, err := a.svc.Engine().Stock(a.ctx, "fz")
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range st1.Items {
			var took int64
			for _, l := range asked.Items {
				if l.SKU == it.SKU {
					took += l.Qty
				}
			}
			if it.Sold != st0.Items[i].Sold+took {
				t.Fatalf("a buy of %+v: %s sold %d, then %d", asked.Items, it.SKU, st0.Items[i].Sold, it.Sold)
			}
		}
		c, err := send(a, "POST", "/v1/orders/"+url.PathEscape(got.OrderID)+"/cancel", buyer, nil)
		if err != nil || c.status != http.StatusOK {
			t.Fatalf("cancel of %s: %d %s %v", got.OrderID, c.status, c.body, err)
		}
	})
}

// FuzzRestockRequest: POST /v1/admin/sales/fz/items/A/restock with any body.
// A 200 names the remaining stock, which grew by exactly the qty asked;
// any other answer is a 400 of the contract and changed nothing.
func FuzzRestockRequest(f *testing.F) {
	for _, s := range []string{`{"qty":5}`, `{"qty":0}`, `{"qty":-1}`, `{"qty":1.5}`, `{"qty":"5"}`, `{}`, `{"qty":5,"x":1}`,
		`{"qty":1000000001}`, `{"qty":5}{}`, `[5]`, ``} {
		f.Add([]byte(s))
	}
	a := fuzzApp(f)
	admin := a.svc.AdminToken()
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := a.svc.Engine().Stock(a.ctx, "fz")
		if err != nil {
			t.Fatal(err)
		}
		before := fuzzState(t, a, "fz")
		r, err := send(a, "POST", "/v1/admin/sales/fz/items/A/restock", admin, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK {
			mustContractError(t, r, http.StatusBadRequest)
			if after := fuzzState(t, a, "fz"); after != before {
				t.Fatalf("refused %d (%s) but changed\n%s\nto\n%s", r.status, r.body, before, after)
			}
			return
		}
		var asked struct{ Qty int64 }
		var got struct {
			SKU       string `json:"sku"`
			Remaining int64  `json:"remaining"`
		}
		if err := json.Unmarshal(body, &asked); err != nil {
			t.Fatalf("200 for a body encoding/json refuses: %v", err)
		}
		if err := json.Unmarshal(r.body, &got); err != nil || got.SKU != "A" || got.Remaining != st.Items[0].Remaining+asked.Qty {
			t.Fatalf("restock of %d from %d answered %s", asked.Qty, st.Items[0].Remaining, r.body)
		}
	})
}

// FuzzCreateSaleRequest: POST /v1/admin/sales with any body. A 201 is a
// sale that GET /v1/sales/{id} then shows exactly as created; a refusal is
// a 400 or 409 of the contract, after which no sale of the body's id
// exists that did not before.
func FuzzCreateSaleRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","per_user_limit":2,"items":[{"sku":"A","stock":10},{"sku":"B","stock":-1}]}`,
		`{"id":"c2","starts_at":"2026-11-21T12:00:00Z","ends_at":"2099-01-01T00:00:00+01:00","require_purchase_token":true,` +
			`"rate_limits":{"per_user":"5/s,burst=10","per_ip":"off"},"items":[{"sku":"A","stock":0}]}`,
		`{"id":"fz","items":[{"sku":"A","stock":1}]}`,
		`{"id":"c3","items":[{"sku":"A","stock":1}],"x":1}`,
		`{"id":"c 4","items":[{"sku":"A","stock":1}]}`,
		`{"id":"c5","per_user_limit":0,"items":[{"sku":"A","stock":1}]}`,
		`{"id":"c6","rate_limits":{"per_sale":"0/s"},"items":[{"sku":"A","stock":1}]}`,
		`{"id":"c7","items":[{"sku":"A","stock":1},{"sku":"A","stock":1}]}`,
		`{"id":"c8","ends_at":"2020-01-01T00:00:00Z","starts_at":"2021-01-01T00:00:00Z","items":[{"sku":"A","stock":1}]}`,
		`{"items":[{"sku":"A","stock":1}]}`,
	} {
		f.Add([]byte(s))
	}
	a := fuzzApp(f)
	admin := a.svc.AdminToken()
	f.Fuzz(func(t *testing.T, body []byte) {
		var probe struct {
			ID any `json:"id"`
		}
		_ = json.Unmarshal(body, &probe)
		id, _ := probe.ID.(string)
		existed := false
		if id != "" && !strings.ContainsAny(id, "/?#%") {
			g, err := send(a, "GET", "/v1/sales/"+url.PathEscape(id), "", nil)
			existed = err == nil && g.status == http.StatusOK
		}
		r, err := send(a, "POST", "/v1/admin/sales", admin, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusCreated {
			mustContractError(t, r, http.StatusBadRequest, http.StatusConflict)
			if id != "" && !existed && !strings.ContainsAny(id, "/?#%") {
				if g, err := send(a, "GET", "/v1/sales/"+url.PathEscape(id), "", nil); err == nil && g.status == http.StatusOK {
					t.Fatalf("create refused (%d %s), but sale %q exists now: %s", r.status, r.body, id, g.body)
				}
			}
			return
		}
		var created map[string]any
		if err := json.Unmarshal(r.body, &created); err != nil {
			t.Fatalf("201 with body %q", r.body)
		}
		cid, _ := created["id"].(string)
		if cid != id {
			t.Fatalf("body asked for sale %q, 201 names %q", id, cid)
		}
		g, err := send(a, "GET", "/v1/sales/"+url.PathEscape(cid), "", nil)
		if err != nil || g.status != http.StatusOK {
			t.Fatalf("created sale %q: GET %d %s %v", cid, g.status, g.body, err)
		}
		var shown map[string]any
		_ = json.Unmarshal(g.body, &shown)
		delete(created, "status") // may move on from upcoming in between
		delete(shown, "status")
		if !reflect.DeepEqual(created, shown) {
			t.Fatalf("created %s, GET shows %s", r.body, g.body)
		}
	})
}

// FuzzOrderPath: GET /v1/orders/{id} and POST /v1/orders/{id}/cancel with
// any id: an order that does not exist (malformed ids included) is a 404 of
// the contract, for its buyer and for an operator, and nothing changes.
func FuzzOrderPath(f *testing.F) {
	for _, id := range []string{"fz.01JD0000000000000000000000", "nope", "fz.", ".x", "a.b.c", strings.Repeat("x", 200), "fz.%00", "..", "fz.01JD0000000000000000000000x"} {
		f.Add(id, false)
		f.Add(id, true)
	}
	a := fuzzApp(f)
	buyer, admin := a.token("fuzzer"), a.svc.AdminToken()
	f.Fuzz(func(t *testing.T, id string, asAdmin bool) {
		if id == "" || id == "." || id == ".." {
			return // not a path segment
		}
		tok := buyer
		if asAdmin {
			tok = admin
		}
		before := fuzzState(t, a, "fz")
		start := time.Now()
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/orders/" + url.PathEscape(id)},
			{"POST", "/v1/orders/" + url.PathEscape(id) + "/cancel"},
		} {
			r, err := send(a, c.method, c.path, tok, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustContractError(t, r, http.StatusNotFound)
		}
		if after := fuzzState(t, a, "fz"); after != before {
			t.Fatalf("looking up %q changed\n%s\nto\n%s", id, before, after)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("looking up %q took %v", id, d)
		}
	})
}
