package service_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// The adversary's attacks on the waiting room (docs/admission.md, the
// contract's "Additions (2026-11-28): admission"): a hostile buyer, and
// bad luck. Each test fails if the rule it names breaks.

// admissionNonce is the nonce an admission token carries (its payload is
// "adm|<sale>|<user>|<until ms>|<nonce>").
func admissionNonce(t *testing.T, token string) string {
	t.Helper()
	enc, _, _ := strings.Cut(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("an admission token that is not base64: %q", token)
	}
	parts := strings.Split(string(raw), "|")
	return parts[len(parts)-1]
}

// roomStats reads the operators' counts of the sale's room.
func (a *app) roomStats(sale string) map[string]any {
	a.t.Helper()
	r := a.admin("GET", "/v1/admin/sales/"+sale+"/queue", nil)
	mustStatus(a.t, r, http.StatusOK)
	return r.json(a.t)
}

// remainingOf is the remaining of sku A of the sale.
func (a *app) remainingOf(sale string) float64 {
	a.t.Helper()
	r := a.call("GET", "/v1/sales/"+sale, "", nil)
	mustStatus(a.t, r, http.StatusOK)
	for _, it := range r.json(a.t)["items"].([]any) {
		if m := it.(map[string]any); m["sku"] == "A" {
			return m["remaining"].(float64)
		}
	}
	a.t.Fatalf("no item A: %s", r.body)
	return 0
}

// TestAdvRoomSpentAdmissionOutlivesItsMark: an admission that bought once
// must never buy again, for as long as the room lasts. No mark of the
// spent nonce ("ptoken:<nonce>", which expires) is what refuses it: the
// room's state of the buyer, used for ever after. (Once a mark like that
// expired, the same admission was let through to the buy again: a second
// order from one admission, with a per-user limit above 1 or after the
// first order was cancelled, its quota back.)
func TestAdvRoomSpentAdmissionOutlivesItsMark(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 10, map[string]any{"admit_ttl_s": 10}, map[string]any{"per_user_limit": 2}), http.StatusCreated)
	for _, u := range []string{"u1", "u2"} {
		a.join("r", u)
	}
	adm1, adm2 := a.waitAdmitted("r", "u1"), a.waitAdmitted("r", "u2")
	mustStatus(t, a.buyWith("r", "u1", adm1, "k1"), http.StatusCreated)
	first := a.buyWith("r", "u2", adm2, "")
	mustStatus(t, first, http.StatusCreated)
	// u2 cancels: the unit and the quota come back.
	mustStatus(t, a.call("POST", "/v1/orders/"+first.json(t)["order_id"].(string)+"/cancel", a.token("u2"), nil), http.StatusOK)

	for user, adm := range map[string]string{"u1": adm1, "u2": adm2} {
		mark := a.svc.Engine().Key("r", "ptoken:"+admissionNonce(t, adm))
		if n, err := a.svc.Redis().Exists(a.ctx, mark).Result(); err != nil || n != 0 {
			t.Fatalf("%s's admission left a spent mark (%d, %v): the room's state is what spends it", user, n, err)
		}
		if p := a.place("r", user); p["status"] != "used" {
			t.Fatalf("%s after buying: %v", user, p)
		}
		mustCode(t, a.buyWith("r", user, adm, ""), http.StatusForbidden, "permission_denied")
		mustCode(t, a.buyWith("r", user, adm, "other-key"), http.StatusForbidden, "permission_denied")
	}
	// A repeat of the accepted buy is still answered 200.
	if again := a.buyWith("r", "u1", adm1, "k1"); again.status != http.StatusOK {
		t.Errorf("a repeat of u1's buy: %d %s", again.status, again.body)
	}
}

// TestAdvRoomConcurrentJoinsOneUser: one user joins at once, many times,
// on two instances: one place.
func TestAdvRoomConcurrentJoinsOneUser(t *testing.T) {
	cfg := stacks[0].start(t)
	a, b := startApp(t, cfg), startApp(t, cfg)
	later := time.Now().Add(time.Hour)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(later)}, map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
	var mu sync.Mutex
	joined := map[any]int{}
	var wg sync.WaitGroup
	for i := range 16 {
		on := []*app{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := on.call("POST", "/v1/sales/r/queue", on.token("dup"), nil)
			mu.Lock()
			defer mu.Unlock()
			switch r.status {
			case http.StatusOK:
				joined[fmt.Sprint(r.json(t)["joined_at"], r.json(t)["status"])]++
			case http.StatusTooManyRequests: // the reads' limit
			default:
				t.Errorf("a join: %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if len(joined) != 1 {
		t.Errorf("concurrent joins of one user gave %d places: %v", len(joined), joined)
	}
	if st := a.roomStats("r"); st["drawing"] != 1.0 || st["waiting"] != 0.0 {
		t.Errorf("one user, counted: %v", st)
	}
}

// TestAdvRoomMaxWaitingRace: joins of many users at once, on two
// instances, against max_waiting: exactly max_waiting get a place.
func TestAdvRoomMaxWaitingRace(t *testing.T) {
	cfg := stacks[0].start(t)
	a, b := startApp(t, cfg), startApp(t, cfg)
	later := time.Now().Add(time.Hour)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(later), "max_waiting": 5},
		map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
	var mu sync.Mutex
	ok, full := 0, 0
	var wg sync.WaitGroup
	for i := range 40 {
		on := []*app{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := on.call("POST", "/v1/sales/r/queue", on.token(fmt.Sprint("m", i)), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.status == http.StatusOK:
				ok++
			case r.status == http.StatusTooManyRequests && strings.Contains(string(r.body), "room_full"):
				full++
			default:
				t.Errorf("a join: %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if ok != 5 || full != 35 {
		t.Errorf("%d joined, %d refused full; want 5 and 35", ok, full)
	}
	if st := a.roomStats("r"); st["drawing"] != 5.0 {
		t.Errorf("counts: %v", st)
	}
}

// TestAdvRoomPollingDoesNotStarveOthers: a client reading its place in a
// tight loop gets 429 rate_limited; another buyer reading politely (five
// times a second) is never refused meanwhile.
func TestAdvRoomPollingDoesNotStarveOthers(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	later := time.Now().Add(time.Hour)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(later)}, map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
	a.join("r", "bot")
	a.join("r", "polite")
	// Past the join's own count in the limiter.
	time.Sleep(1100 * time.Millisecond)
	stop := make(chan struct{})
	var limited, other int
	var mu sync.Mutex
	var wg sync.WaitGroup
	botToken := a.token("bot")
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := a.call("GET", "/v1/sales/r/queue", botToken, nil)
				mu.Lock()
				switch {
				case r.status == http.StatusTooManyRequests && strings.Contains(string(r.body), "rate_limited") && r.header.Get("Retry-After") != "":
					limited++
				case r.status != http.StatusOK:
					other++
					t.Errorf("the bot's read: %d %s", r.status, r.body)
				}
				mu.Unlock()
			}
		}()
	}
	for range 10 {
		r := a.call("GET", "/v1/sales/r/queue", a.token("polite"), nil)
		if r.status != http.StatusOK {
			t.Errorf("a polite read while a bot polls: %d %s", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if limited == 0 {
		t.Error("a client polling in a tight loop was never refused")
	}
}

// TestAdvRoomOddUserIDs: user ids the JWT allows but that look like the
// room's own separators (':', '.', '-', the longest) join, are admitted
// and buy like anyone.
func TestAdvRoomOddUserIDs(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 10, map[string]any{}, nil), http.StatusCreated)
	for _, u := range []string{"a:1:2", "w1:5", ":", "u.1-x_", strings.Repeat("z:", 32)} {
		a.join("r", u)
		adm := a.waitAdmitted("r", u)
		r := a.buyWith("r", u, adm, "")
		mustStatus(t, r, http.StatusCreated)
		if p := a.place("r", u); p["status"] != "used" || p["order_id"] != r.json(t)["order_id"] {
			t.Errorf("%q after buying: %v", u, p)
		}
	}
}

// TestAdvRoomJoinRefusesBadUserIDs: the verbs in Go take any string as a
// user id; one no JWT could carry (empty, with '|', the admission token's
// separator, or a newline, the draw's) must not take a place, which no
// buy could ever use (and which would hold a unit of the stock rule).
func TestAdvRoomJoinRefusesBadUserIDs(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 10, map[string]any{}, nil), http.StatusCreated)
	for _, u := range []string{"", "a|b", "a\nb", strings.Repeat("x", 65), "é"} {
		if _, err := a.svc.JoinQueue(a.ctx, "r", u); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("JoinQueue(%q): %v, want invalid", u, err)
		}
		if _, err := a.svc.QueuePlace(a.ctx, "r", u); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("QueuePlace(%q): %v, want invalid", u, err)
		}
	}
	if st := a.roomStats("r"); st["waiting"] != 0.0 || st["admitted"] != 0.0 {
		t.Errorf("bad user ids took places: %v", st)
	}
}

// TestAdvRoomAdmissionJSON: edge cases of the "admission" object.
func TestAdvRoomAdmissionJSON(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	now := time.Now()
	n := 0
	create := func(adm any, sale map[string]any) reply {
		n++
		body := map[string]any{"id": fmt.Sprint("j", n), "items": []map[string]any{{"sku": "A", "stock": 5}}, "admission": adm}
		for k, v := range sale {
			body[k] = v
		}
		return a.admin("POST", "/v1/admin/sales", body)
	}
	for name, c := range map[string]struct {
		adm  any
		sale map[string]any
	}{
		"draw_until without a zone": {map[string]any{"draw_until": now.Add(time.Hour).UTC().Format("2006-01-02T15:04:05")}, nil},
		"rate huge":                 {map[string]any{"rate_per_s": 1e30}, nil},
		"rate fractional":           {map[string]any{"rate_per_s": 1.5}, nil},
		"ttl as a string":           {map[string]any{"admit_ttl_s": "60"}, nil},
		"max_waiting over":          {map[string]any{"max_waiting": 10_000_001}, nil},
		"max_waiting negative":      {map[string]any{"max_waiting": -1}, nil},
		"an array":                  {[]any{}, nil},
		"draw after the end":        {map[string]any{"draw_until": rfc(now.Add(2 * time.Hour))}, map[string]any{"ends_at": rfc(now.Add(time.Hour))}},
		"opens after the end":       {map[string]any{"opens_at": rfc(now.Add(2 * time.Hour))}, map[string]any{"ends_at": rfc(now.Add(time.Hour))}},
	} {
		t.Run(name, func(t *testing.T) {
			r := create(c.adm, c.sale)
			mustCode(t, r, http.StatusBadRequest, "invalid_argument")
		})
	}
	// Nulls are absent fields: the defaults.
	r := create(map[string]any{"opens_at": nil, "draw_until": nil, "rate_per_s": nil, "capacity_per_s": nil,
		"admit_ttl_s": nil, "max_waiting": nil}, nil)
	mustStatus(t, r, http.StatusCreated)
	if adm, _ := r.json(t)["admission"].(map[string]any); adm == nil || adm["admit_ttl_s"] != 120.0 || adm["max_waiting"] != 1_000_000.0 {
		t.Errorf("nulls: %s", r.body)
	}
	// A time with an offset is kept as the same instant.
	at := now.Add(time.Hour).Truncate(time.Second)
	r = create(map[string]any{"draw_until": at.In(time.FixedZone("x", 5*3600+1800)).Format(time.RFC3339)}, map[string]any{"starts_at": rfc(at)})
	mustStatus(t, r, http.StatusCreated)
	if adm := r.json(t)["admission"].(map[string]any); adm["draw_until"] != rfc(at) {
		t.Errorf("draw_until with an offset: %v, want %s", adm["draw_until"], rfc(at))
	}
}

// TestAdvRoomCheckOrder: the buy of a sale with a room answers in the
// contract's order: 401, 400, 404, 409 sale_not_active, (replay), 403,
// 409 limit_exceeded / sold_out; and a refused buy leaves the admission
// live.
func TestAdvRoomCheckOrder(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 2, map[string]any{}, map[string]any{"per_user_limit": 1}), http.StatusCreated)
	a.join("r", "u1")
	adm := a.waitAdmitted("r", "u1")
	buy := func(user, token string, body any) reply {
		return a.call("POST", "/v1/sales/r/orders", a.token(user), body, "X-Purchase-Token", token)
	}
	one := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}

	mustCode(t, a.call("POST", "/v1/sales/r/orders", "", one, "X-Purchase-Token", adm), http.StatusUnauthorized, "unauthenticated")
	mustCode(t, buy("u1", adm, map[string]any{"items": []map[string]any{{"sku": "A", "qty": 0}}}), http.StatusBadRequest, "invalid_argument")
	mustCode(t, buy("u1", adm, "{"), http.StatusBadRequest, "invalid_argument")
	mustCode(t, a.call("POST", "/v1/sales/nope/orders", a.token("u1"), one, "X-Purchase-Token", adm), http.StatusNotFound, "not_found")
	mustCode(t, buy("u1", adm, map[string]any{"items": []map[string]any{{"sku": "Z", "qty": 1}}}), http.StatusNotFound, "not_found")
	mustCode(t, buy("u9", "", map[string]any{"items": []map[string]any{{"sku": "Z", "qty": 1}}}), http.StatusNotFound, "not_found")
	// Over the limit, or over the stock, with a live admission: 409, and
	// the admission is still live.
	mustCode(t, buy("u1", adm, map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}}), http.StatusConflict, "limit_exceeded")
	// Without an admission: 403, whatever else is wrong after it.
	mustCode(t, buy("u9", "", map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}}), http.StatusForbidden, "permission_denied")
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/pause", nil), http.StatusOK)
	mustCode(t, buy("u1", adm, one), http.StatusConflict, "sale_not_active")
	mustCode(t, buy("u9", "", one), http.StatusConflict, "sale_not_active")
	mustCode(t, buy("u9", adm, one), http.StatusConflict, "sale_not_active")
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/resume", nil), http.StatusOK)
	if p := a.place("r", "u1"); p["status"] != "admitted" || p["admission"] != adm {
		t.Fatalf("refused buys spent the admission: %v", p)
	}
	mustStatus(t, buy("u1", adm, one), http.StatusCreated)
}

// TestAdvRoomReplayWhilePaused: the contract puts 409 sale_not_active
// before the replay of an accepted buy; the engine answers a replay
// whatever the sale's state ("as today").
func TestAdvRoomReplayWhilePaused(t *testing.T) {
	t.Skip("known: api.md's order for a room sale (409 sale_not_active, then the replay 200) is not what " +
		"buy.lua does for every sale (a repeat first, whatever the sale's state, \"as today\"): a replay of an " +
		"accepted buy of a paused room sale answers 200; the contract's two phrases disagree, left to its owner")
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 2, map[string]any{}, nil), http.StatusCreated)
	a.join("r", "u1")
	adm := a.waitAdmitted("r", "u1")
	mustStatus(t, a.buyWith("r", "u1", adm, "k1"), http.StatusCreated)
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/pause", nil), http.StatusOK)
	mustCode(t, a.buyWith("r", "u1", adm, "k1"), http.StatusConflict, "sale_not_active")
}

// TestAdvRoomSoldOutAndBack: once nothing can be sold, a waiting buyer
// reads sold_out within a second; a cancel, then a restock, bring the
// units back: the buyer is waiting again at the same rank, then admitted.
func TestAdvRoomSoldOutAndBack(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 1, map[string]any{}, map[string]any{"per_user_limit": 1}), http.StatusCreated)
	for _, u := range []string{"u1", "u2", "u3"} {
		a.join("r", u)
	}
	adm := a.waitAdmitted("r", "u1")
	if p := a.place("r", "u3"); p["status"] != "waiting" || p["position"] != 2.0 {
		t.Fatalf("u3 behind u2: %v", p)
	}
	r := a.buyWith("r", "u1", adm, "")
	mustStatus(t, r, http.StatusCreated)
	soldOut := func(users ...string) {
		t.Helper()
		deadline := time.Now().Add(time.Second + 500*time.Millisecond) // a second, and a loaded machine's slack
		for _, u := range users {
			for {
				p := a.place("r", u)
				if p["status"] == "sold_out" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s a second after the last unit was sold: %v", u, p)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	soldOut("u2", "u3")
	// A cancel: the unit goes to u2, the first in line.
	mustStatus(t, a.call("POST", "/v1/orders/"+r.json(t)["order_id"].(string)+"/cancel", a.token("u1"), nil), http.StatusOK)
	adm2 := a.waitAdmitted("r", "u2")
	// u3 reads waiting again, at its rank, within a second (what every
	// place shares may be that old).
	for deadline := time.Now().Add(time.Second + 500*time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
		p := a.place("r", "u3")
		if p["status"] == "waiting" {
			if p["position"] != 1.0 {
				t.Fatalf("u3 after the cancel: %v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("u3 a second after the cancel: %v", p)
		}
	}
	mustStatus(t, a.buyWith("r", "u2", adm2, ""), http.StatusCreated)
	soldOut("u3")
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/items/A/restock", map[string]any{"qty": 1}), http.StatusOK)
	mustStatus(t, a.buyWith("r", "u3", a.waitAdmitted("r", "u3"), ""), http.StatusCreated)
}

// TestAdvRoomLapseFreesThePlaceInTime: an unused admission lapses on its
// own at admitted_until; its unit goes to the next buyer within a second
// of the grace (500 ms) after it.
func TestAdvRoomLapseFreesThePlaceInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an admission to lapse (10 s)")
	}
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 1, map[string]any{"admit_ttl_s": 10}, nil), http.StatusCreated)
	a.join("r", "u1")
	a.join("r", "u2")
	a.waitAdmitted("r", "u1")
	until, err := time.Parse(time.RFC3339, a.place("r", "u1")["admitted_until"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// The deadline: until + grace + 1 s, and a loaded machine's slack.
	deadline := until.Add(500*time.Millisecond + time.Second + 500*time.Millisecond)
	for {
		p := a.place("r", "u2")
		if p["status"] == "admitted" {
			if time.Now().Before(until) {
				t.Fatalf("u2 admitted while u1's admission was live (one unit): %v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("u2 %v after u1's admission lapsed at %v: %v", time.Since(until), until, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAdvRoomCorruptValues: a corrupt setting of the room or a corrupt
// place answers 500 "internal error" (no script's details), and admits
// nobody.
func TestAdvRoomCorruptValues(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	later := time.Now().Add(time.Hour)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(later)}, map[string]any{"starts_at": rfc(later)}), http.StatusCreated)
	a.join("r", "u1")
	rdb, cfgKey := a.svc.Redis(), a.svc.Engine().Key("r", "room:cfg")
	check := func(what string, r reply) {
		t.Helper()
		if r.status != http.StatusInternalServerError || r.code(t) != "internal" {
			t.Errorf("%s: %d %s, want 500 internal", what, r.status, r.body)
		}
		for _, leak := range []string{"lua", "room", "attempt", "nil", "script", "redis"} {
			if strings.Contains(strings.ToLower(string(r.body)), leak) {
				t.Errorf("%s leaks %q: %s", what, leak, r.body)
			}
		}
	}
	for _, f := range []string{"draw", "nb"} { // read by every script operation
		old, err := rdb.HGet(a.ctx, cfgKey, f).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(a.ctx, cfgKey, f, "x1").Err(); err != nil {
			t.Fatal(err)
		}
		if f == "nb" { // a place read reads no other setting: the draw's time is the script's
			check("a read with a corrupt "+f, a.call("GET", "/v1/sales/r/queue", a.token("u1"), nil))
		}
		check("a join with a corrupt "+f, a.call("POST", "/v1/sales/r/queue", a.token(fmt.Sprint("n-", f)), nil))
		if err := rdb.HSet(a.ctx, cfgKey, f, old).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt place: u1's state in its bucket.
	var bucket string
	iter := rdb.Scan(a.ctx, 0, a.svc.Engine().Key("r", "room:b:*"), 100).Iterator()
	for iter.Next(a.ctx) {
		if ok, _ := rdb.HExists(a.ctx, iter.Val(), "u1").Result(); ok {
			bucket = iter.Val()
		}
	}
	if bucket == "" {
		t.Fatal("u1's bucket not found")
	}
	for _, st := range []string{"wx:1", "a1:zz:2:1", "q", ""} {
		if err := rdb.HSet(a.ctx, bucket, "u1", st).Err(); err != nil {
			t.Fatal(err)
		}
		r := a.call("GET", "/v1/sales/r/queue", a.token("u1"), nil)
		if r.status == http.StatusOK {
			t.Errorf("a corrupt place %q read as %s", st, r.body)
			continue
		}
		check(fmt.Sprintf("a read of the corrupt place %q", st), r)
	}
	if st := a.roomStats("r"); st["admitted"] != 0.0 {
		t.Errorf("admitted with corrupt values: %v", st)
	}
}

// TestAdvRoomClosedMidRoom: the operator closes a sale while buyers wait
// and others hold admissions: the waiting read sold_out within a second,
// the admissions buy nothing, joins are refused; then the archive takes
// the room's keys with the sale's, and nothing makes them again.
func TestAdvRoomClosedMidRoom(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.ArchiveEvery = 100 * time.Millisecond
	a := startApp(t, cfg)
	mustStatus(t, a.roomSale("r", 2, map[string]any{}, nil), http.StatusCreated)
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		a.join("r", u)
	}
	adm := a.waitAdmitted("r", "u1")
	a.waitAdmitted("r", "u2")
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/close", nil), http.StatusOK)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for _, u := range []string{"u3", "u4"} {
		for {
			r := a.call("GET", "/v1/sales/r/queue", a.token(u), nil)
			if r.status == http.StatusOK && r.json(t)["status"] == "sold_out" {
				break
			}
			if r.status == http.StatusConflict && r.code(t) == "sale_not_active" {
				break // archived already
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s a second after the close: %d %s", u, r.status, r.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mustCode(t, a.buyWith("r", "u1", adm, ""), http.StatusConflict, "sale_not_active")
	mustCode(t, a.call("POST", "/v1/sales/r/queue", a.token("u5"), nil), http.StatusConflict, "sale_not_active")
	a.waitArchived("r")
	waitfor.Until(t, waitfor.Patience, "the room's keys gone", func() error {
		if keys := a.saleKeys("r"); len(keys) != 0 {
			return fmt.Errorf("left: %v", keys)
		}
		return nil
	})
	// Every route of the room, then the loop, after the archive.
	// (A buyer's joins and reads share the read limit, 10 a second: a 429
	// is waited out, as a client would.)
	queue := func(method, u string) reply {
		for {
			if r := a.call(method, "/v1/sales/r/queue", a.token(u), nil); r.status != http.StatusTooManyRequests {
				return r
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, u := range []string{"u1", "u3", "u6"} {
		mustCode(t, queue("GET", u), http.StatusConflict, "sale_not_active")
		mustCode(t, queue("POST", u), http.StatusConflict, "sale_not_active")
	}
	mustCode(t, a.buyWith("r", "u1", adm, ""), http.StatusConflict, "sale_not_active")
	if r := a.admin("GET", "/v1/admin/sales/r/queue", nil); r.status >= 500 {
		t.Errorf("stats of an archived room: %d %s", r.status, r.body)
	}
	if r := a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{"rate_per_s": 3}); r.status >= 500 {
		t.Errorf("rate of an archived room: %d %s", r.status, r.body)
	}
	mustStatus(t, a.call("GET", "/v1/sales/r/queue/draw", "", nil), http.StatusOK)
	time.Sleep(2 * roomListEveryForTests)
	if keys := a.saleKeys("r"); len(keys) != 0 {
		t.Errorf("keys made again after the archive: %v", keys)
	}
}

// TestAdvRoomRedisLoss: Redis restarts empty (no persistence). The spent
// admission still buys nothing, its buy's repeat is answered 200, an
// admission granted before the loss buys nothing; the buyer who joins
// again holds one place and one live admission; the stock rule holds.
func TestAdvRoomRedisLoss(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := degradedConfig(srv.Addr())
	cfg.DatabaseURL = dbtest.PostgresURL(t)
	a := startApp(t, cfg)
	mustStatus(t, a.roomSale("r", 3, map[string]any{}, map[string]any{"per_user_limit": 2}), http.StatusCreated)
	for _, u := range []string{"u1", "u2"} {
		a.join("r", u)
	}
	adm1, adm2 := a.waitAdmitted("r", "u1"), a.waitAdmitted("r", "u2")
	first := a.buyWith("r", "u1", adm1, "k1")
	mustStatus(t, first, http.StatusCreated)
	id := first.json(t)["order_id"]
	a.settle("r")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	a.waitMode("redis")
	waitfor.Until(t, waitfor.Patience, "the room made again", func() error {
		r := a.call("GET", "/v1/sales/r/queue", a.token("u1"), nil)
		if r.status != http.StatusNotFound {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	for name, c := range map[string]struct{ user, adm string }{"spent": {"u1", adm1}, "unused": {"u2", adm2}} {
		if r := a.buyUntil("r", c.user, "X-Purchase-Token", c.adm); r.status != http.StatusForbidden {
			t.Errorf("the %s admission after the loss: %d %s", name, r.status, r.body)
		}
	}
	if again := a.buyWith("r", "u1", adm1, "k1"); again.status != http.StatusOK || again.json(t)["order_id"] != id {
		t.Errorf("a repeat after the loss: %d %s", again.status, again.body)
	}
	for _, u := range []string{"u1", "u2"} {
		a.join("r", u)
		a.join("r", u)
	}
	n1 := a.waitAdmitted("r", "u1")
	a.waitAdmitted("r", "u2")
	if st := a.roomStats("r"); st["live"].(float64) > a.remainingOf("r") || st["live"].(float64) != 2 {
		t.Errorf("after the loss: %v, remaining %v", st, a.remainingOf("r"))
	}
	mustCode(t, a.buyWith("r", "u1", adm1, ""), http.StatusForbidden, "permission_denied")
	mustStatus(t, a.buyWith("r", "u1", n1, ""), http.StatusCreated)
	mustCode(t, a.buyWith("r", "u1", n1, ""), http.StatusForbidden, "permission_denied")
}

// TestAdvRoomLostAfterItsDraw: Redis loses the room after its draw was
// run and saved (a flush of the room's keys). The room made again has no
// entrants (the places were lost), so the saved draw can never be written
// to it: the room must still end up drawn, once, and not fail its draw
// every second for the rest of the sale (an error logged each time, and a
// database read). The published draw is the one saved.
func TestAdvRoomLostAfterItsDraw(t *testing.T) {
	logs := &syncBuffer{}
	cfg := stacks[0].start(t)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := startApp(t, cfg)
	drawUntil := time.Now().Add(time.Second)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(drawUntil)}, map[string]any{"starts_at": rfc(drawUntil)}), http.StatusCreated)
	a.join("r", "u1")
	a.join("r", "u2")
	a.waitAdmitted("r", "u1")
	before := a.call("GET", "/v1/sales/r/queue/draw", "", nil).body
	a.dropRoomKeys("r")
	waitfor.Until(t, waitfor.Patience, "the room made again and drawn", func() error {
		st, err := a.svc.QueueStats(a.ctx, "r")
		if err != nil || !st.Drawn {
			return fmt.Errorf("%+v %v", st, err)
		}
		return nil
	})
	mark := len(logs.String())
	time.Sleep(2500 * time.Millisecond) // the loop's retries of a draw are a second apart
	if l := logs.String()[mark:]; strings.Contains(l, "draw a waiting room") {
		t.Errorf("the draw still fails: %s", l)
	}
	a.join("r", "u3")
	a.waitAdmitted("r", "u3")
	if after := a.call("GET", "/v1/sales/r/queue/draw", "", nil).body; string(after) != string(before) {
		t.Errorf("the published draw changed: %s -> %s", before, after)
	}
}

// TestAdvRoomRateSurvivesALoss: a rate set during the sale is the one a
// room Redis lost is made again with.
func TestAdvRoomRateSurvivesALoss(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 10, map[string]any{"rate_per_s": 50}, nil), http.StatusCreated)
	a.join("r", "u1")
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{"rate_per_s": 7}), http.StatusOK)
	a.dropRoomKeys("r")
	waitfor.Until(t, waitfor.Patience, "the room made again", func() error {
		if st := a.roomStats("r"); st["rate_per_s"] != 7.0 {
			return fmt.Errorf("%v", st)
		}
		return nil
	})
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{"rate_per_s": 0}), http.StatusOK)
	if st := a.roomStats("r"); st["rate_per_s"] != 0.0 {
		t.Errorf("back to automatic: %v", st)
	}
}

// dropRoomKeys deletes every key of the sale's room, as a Redis that lost
// them (the sale's own keys stay).
func (a *app) dropRoomKeys(sale string) {
	a.t.Helper()
	var keys []string
	for _, k := range a.saleKeys(sale) {
		if strings.Contains(k, "room:") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		a.t.Fatalf("no room keys of %s", sale)
	}
	if err := a.svc.Redis().Del(a.ctx, keys...).Err(); err != nil {
		a.t.Fatal(err)
	}
}
