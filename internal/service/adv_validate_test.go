package service_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/golden"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// badBuy is a buy the service refuses before it sells anything.
type badBuy struct {
	name, sale, user string
	body             any
	headers          []string
}

// badBuys are the refused buys of sale (s1, a plain sale, or hot, a
// segmented one) by user: each input the service checks.
func badBuys(sale, user string) []badBuy {
	item := func(sku string, qty int64) map[string]any { return map[string]any{"sku": sku, "qty": qty} }
	items := func(l ...map[string]any) map[string]any { return map[string]any{"items": l} }
	var many []map[string]any
	for i := range 129 {
		many = append(many, item(fmt.Sprintf("A%d", i), 1))
	}
	ok := items(item("A", 1))
	return []badBuy{
		{name: "bad sku", sale: sale, user: user, body: items(item("a b", 1))},
		{name: "long sku", sale: sale, user: user, body: items(item(strings.Repeat("A", 200), 1))},
		{name: "qty 0", sale: sale, user: user, body: items(item("A", 0))},
		{name: "qty -1", sale: sale, user: user, body: items(item("A", -1))},
		{name: "qty 10^18", sale: sale, user: user, body: `{"items":[{"sku":"A","qty":1000000000000000000}]}`},
		{name: "129 lines", sale: sale, user: user, body: items(many...)},
		{name: "duplicate sku", sale: sale, user: user, body: items(item("A", 1), item("A", 1))},
		{name: "no items", sale: sale, user: user, body: items()},
		{name: "no items member", sale: sale, user: user, body: `{}`},
		{name: "sku null", sale: sale, user: user, body: `{"items":[{"sku":null,"qty":1}]}`},
		{name: "malformed json", sale: sale, user: user, body: `{"items":[`},
		{name: "unknown member", sale: sale, user: user, body: `{"items":[{"sku":"A","qty":1}],"x":1}`},
		{name: "empty idempotency key", sale: sale, user: user, body: ok, headers: []string{"Idempotency-Key", ""}},
		{name: "long idempotency key", sale: sale, user: user, body: ok, headers: []string{"Idempotency-Key", strings.Repeat("k", 65)}},
		{name: "idempotency key with a space", sale: sale, user: user, body: ok, headers: []string{"Idempotency-Key", "k 1"}},
		{name: "bad sale in path", sale: "a%20b", user: user, body: ok},
		{name: "long sale in path", sale: strings.Repeat("s", 300), user: user, body: ok},
		{name: "unknown sale", sale: "nosuch", user: user, body: ok},
		{name: "bad user", sale: sale, user: "u 1", body: ok},
		{name: "no token", sale: sale, user: "", body: ok},
	}
}

// TestRefusedBuysAnswerAsBeforeAndChangeNothing: every bad input of a buy
// gets the status, code and message it got before the buy was checked
// once at the edge (inventory.CheckBuy; recorded from 1a98f90), from
// Redis and from the database (degraded mode), for a plain and a
// segmented sale; and changes nothing: the stock, the throttle's credit
// (the per-user limit allows one buy a minute: the good buy after the bad
// ones must pass) and a purchase token (still spendable after a refused
// buy that carried it), while the throttle still counts good buys, in
// degraded mode too. (Fails if a check moves after the throttle or the
// token, or answers otherwise: checked by letting qty 0 through
// ValidateBuy, which then spends the buyer's minute and the token.)
func TestRefusedBuysAnswerAsBeforeAndChangeNothing(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), DegradedTick: 50 * time.Millisecond, DegradedGrace: 200 * time.Millisecond}
	a := startApp(t, cfg)
	perMinute := map[string]any{"per_user": "1/m"}
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "per_user_limit": 5, "rate_limits": perMinute,
		"items": []map[string]any{{"sku": "A", "stock": 10}}}), http.StatusCreated)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "hot", "per_user_limit": 5, "rate_limits": perMinute,
		"items": []map[string]any{{"sku": "A", "stock": 40, "segments": 4}}}), http.StatusCreated)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "t1", "per_user_limit": 5, "require_purchase_token": true,
		"items": []map[string]any{{"sku": "A", "stock": 10}}}), http.StatusCreated)

	var got []string
	answer := func(mode string, b badBuy, r reply) {
		t.Helper()
		e, _ := r.json(t)["error"].(map[string]any)
		got = append(got, fmt.Sprintf("%s|%s|%s|%d|%v|%v", mode, b.sale[:min(len(b.sale), 8)], b.name, r.status, e["code"], e["message"]))
	}
	stock := func(sale string) string {
		t.Helper()
		r := a.call("GET", "/v1/sales/"+sale, "", nil)
		mustStatus(t, r, http.StatusOK)
		return fmt.Sprint(r.json(t)["items"])
	}
	send := func(b badBuy) reply {
		t.Helper()
		tok := ""
		if b.user != "" {
			tok = a.token(b.user)
		}
		return a.call("POST", "/v1/sales/"+b.sale+"/orders", tok, b.body, b.headers...)
	}
	good := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}

	for _, mode := range []string{"redis", "db"} {
		if mode == "db" {
			a.forceDegraded()
			mustStatus(t, a.buyUntil("s1", "warm"), http.StatusCreated) // past the grace period
		}
		for _, sale := range []string{"s1", "hot"} {
			user := mode + "-" + sale
			before := stock(sale)
			for _, b := range badBuys(sale, user) {
				r := send(b)
				answer(mode, b, r)
				if r.status < 400 || r.status >= 500 {
					t.Errorf("%s: %s of %s: %d %s, want a 4xx", mode, b.name, sale, r.status, r.body)
				}
				if now := stock(sale); now != before {
					t.Fatalf("%s: %s of %s changed the stock: %s, was %s", mode, b.name, sale, now, before)
				}
			}
			// The bad buys spent none of the buyer's one buy a minute.
			if r := a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user), good); r.status != http.StatusCreated {
				t.Errorf("%s: the buy of %s after the refused ones: %d %s, want 201", mode, sale, r.status, r.body)
			}
			// And the throttle holds, in degraded mode too.
			if r := a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user), good); r.status != http.StatusTooManyRequests {
				t.Errorf("%s: a second buy of %s within the minute: %d %s, want 429", mode, sale, r.status, r.body)
			}
		}
		// A refused buy that carries a purchase token leaves it unspent.
		user := mode + "-t1"
		ptok := a.call("POST", "/v1/sales/t1/purchase-tokens", a.token(user), nil)
		mustStatus(t, ptok, http.StatusCreated)
		{
			header := []string{"X-Purchase-Token", ptok.json(t)["token"].(string)}
			for _, b := range []badBuy{
				{name: "qty 0 with a token", sale: "t1", user: user, body: map[string]any{"items": []map[string]any{{"sku": "A", "qty": 0}}}, headers: header},
				{name: "129 lines with a token", sale: "t1", user: user, body: badBuys("t1", user)[5].body, headers: header},
				{name: "token of another buyer", sale: "t1", user: user + "x", body: good, headers: header},
			} {
				answer(mode, b, send(b))
			}
			r := a.call("POST", "/v1/sales/t1/orders", a.token(user), good, header...)
			answer(mode, badBuy{name: "the good buy with the token", sale: "t1"}, r)
			// The database sells no buy with a token (a clear 503).
			if want := map[string]int{"redis": http.StatusCreated, "db": http.StatusServiceUnavailable}[mode]; r.status != want {
				t.Errorf("%s: the token's buy after refused ones: %d %s, want %d", mode, r.status, r.body, want)
			}
		}
		for _, b := range []badBuy{
			{name: "no token header", sale: "t1", user: user, body: good},
			{name: "garbage token", sale: "t1", user: user, body: good, headers: []string{"X-Purchase-Token", "garbage"}},
		} {
			answer(mode, b, send(b))
		}
	}
	// testdata/refused_buys.golden: the answers of 1a98f90, before the
	// buy was checked once at the edge.
	golden.Compare(t, "testdata/refused_buys.golden", got)
}
