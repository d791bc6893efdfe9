package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/waitfor"
)

// The waiting room (docs/api.md, admission), end to end on Redis and
// PostgreSQL: every rule of the contract, two instances serving one room,
// the admission tokens, degraded mode, the archive.

// roomSale creates a sale of stock units of A with a room; admission holds
// the room's fields, sale more of the sale's.
func (a *app) roomSale(id string, stock int64, admission, sale map[string]any) reply {
	a.t.Helper()
	body := map[string]any{"id": id, "items": []map[string]any{{"sku": "A", "stock": stock}}, "admission": admission}
	for k, v := range sale {
		body[k] = v
	}
	return a.admin("POST", "/v1/admin/sales", body)
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// join joins user to the sale's room and returns the place.
func (a *app) join(sale, user string) map[string]any {
	a.t.Helper()
	for {
		r := a.call("POST", "/v1/sales/"+sale+"/queue", a.token(user), nil)
		if r.status == http.StatusTooManyRequests { // joins share the read limit
			time.Sleep(100 * time.Millisecond)
			continue
		}
		mustStatus(a.t, r, http.StatusOK)
		return r.json(a.t)
	}
}

// place reads user's place (waiting out the read limit's 429s).
func (a *app) place(sale, user string) map[string]any {
	a.t.Helper()
	for {
		r := a.call("GET", "/v1/sales/"+sale+"/queue", a.token(user), nil)
		if r.status == http.StatusTooManyRequests {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		mustStatus(a.t, r, http.StatusOK)
		return r.json(a.t)
	}
}

// waitAdmitted waits until user is admitted and returns the admission.
func (a *app) waitAdmitted(sale, user string) string {
	a.t.Helper()
	var token string
	waitfor.Until(a.t, waitfor.Patience, user+" admitted", func() error {
		p := a.place(sale, user)
		if p["status"] != "admitted" {
			return fmt.Errorf("%s: %v", user, p)
		}
		token = p["admission"].(string)
		return nil
	})
	return token
}

// buyWith buys one A for user with the admission token, and key as the
// idempotency key ("": none).
func (a *app) buyWith(sale, user, token, key string) reply {
	a.t.Helper()
	var headers []string
	if token != "" {
		headers = append(headers, "X-Purchase-Token", token)
	}
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return a.call("POST", "/v1/sales/"+sale+"/orders", a.token(user), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}, headers...)
}

func mustCode(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status || r.code(t) != code {
		t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, code)
	}
}

// TestRoomCreate: the "admission" object's rules and defaults, kept in the
// sale's settings and shown by GET; a refused create leaves nothing.
func TestRoomCreate(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	for name, c := range map[string]struct {
		adm  map[string]any
		sale map[string]any
	}{
		"draw after start":      {map[string]any{"draw_until": rfc(start.Add(time.Second))}, map[string]any{"starts_at": rfc(start)}},
		"opens after draw":      {map[string]any{"opens_at": rfc(start), "draw_until": rfc(start.Add(-time.Minute))}, nil},
		"rate over":             {map[string]any{"rate_per_s": 1_000_001}, nil},
		"rate negative":         {map[string]any{"rate_per_s": -1}, nil},
		"capacity 0":            {map[string]any{"capacity_per_s": 0}, nil},
		"capacity over":         {map[string]any{"capacity_per_s": 1_000_001}, nil},
		"ttl short":             {map[string]any{"admit_ttl_s": 9}, nil},
		"ttl long":              {map[string]any{"admit_ttl_s": 601}, nil},
		"ttl 0":                 {map[string]any{"admit_ttl_s": 0}, nil},
		"max waiting 0":         {map[string]any{"max_waiting": 0}, nil},
		"unknown field":         {map[string]any{"seats": 1}, nil},
		"bad time":              {map[string]any{"opens_at": "tomorrow"}, nil},
		"with purchase tokens":  {map[string]any{}, map[string]any{"require_purchase_token": true}},
		"with segments":         {map[string]any{}, map[string]any{"items": []map[string]any{{"sku": "A", "stock": 10, "segments": 2}}}},
		"not an object":         {nil, map[string]any{"admission": 5}},
		"draw after start only": {map[string]any{"opens_at": rfc(start.Add(time.Minute))}, map[string]any{"starts_at": rfc(start)}},
	} {
		t.Run(name, func(t *testing.T) {
			r := a.roomSale("bad", 10, c.adm, c.sale)
			mustCode(t, r, http.StatusBadRequest, "invalid_argument")
			if g := a.call("GET", "/v1/sales/bad", "", nil); g.status != http.StatusNotFound {
				t.Fatalf("a refused create left the sale: %d %s", g.status, g.body)
			}
		})
	}

	before := time.Now().Add(-time.Second)
	r := a.roomSale("r", 10, map[string]any{}, map[string]any{"starts_at": rfc(start)})
	mustStatus(t, r, http.StatusCreated)
	adm, _ := r.json(t)["admission"].(map[string]any)
	if adm == nil {
		t.Fatalf("the created sale shows no admission: %s", r.body)
	}
	opens, _ := time.Parse(time.RFC3339, adm["opens_at"].(string))
	if opens.Before(before) || opens.After(time.Now()) || adm["draw_until"] != rfc(start) || adm["rate_per_s"] != 0.0 ||
		adm["capacity_per_s"] != 1000.0 || adm["admit_ttl_s"] != 120.0 || adm["max_waiting"] != 1_000_000.0 {
		t.Errorf("defaults: %v", adm)
	}
	g := a.call("GET", "/v1/sales/r", "", nil)
	mustStatus(t, g, http.StatusOK)
	if !strings.Contains(string(g.body), `"admission"`) || strings.Contains(string(g.body), "secret") {
		t.Errorf("GET shows %s", g.body)
	}
	// Without starts_at, the draw ends when the room opens: first come,
	// first served from the start.
	mustStatus(t, a.roomSale("fcfs", 10, map[string]any{"opens_at": rfc(start)}, nil), http.StatusCreated)
	if d := a.call("GET", "/v1/sales/fcfs", "", nil).json(t)["admission"].(map[string]any); d["draw_until"] != rfc(start) {
		t.Errorf("draw_until of a sale without starts_at = %v, want opens_at", d["draw_until"])
	}
	mustCode(t, a.roomSale("r", 10, map[string]any{}, nil), http.StatusConflict, "already_exists")

	// All or nothing: a room Redis holds already of other settings (left by
	// an earlier database) refuses the create, which leaves no sale, in
	// the database or in Redis, and no room row.
	leftover := a.svc.Engine().Key("x", "room:cfg")
	if err := a.svc.Redis().HSet(a.ctx, leftover, "fp", "other settings").Err(); err != nil {
		t.Fatal(err)
	}
	mustCode(t, a.roomSale("x", 10, map[string]any{}, nil), http.StatusConflict, "already_exists")
	if g := a.call("GET", "/v1/sales/x", "", nil); g.status != http.StatusNotFound {
		t.Errorf("a create the room refused left the sale: %d %s", g.status, g.body)
	}
	if keys := a.saleKeys("x"); !slices.Equal(keys, []string{leftover}) {
		t.Errorf("keys of x after the refused create: %v", keys)
	}
	if _, err := a.svc.Store().Room(a.ctx, "x"); err == nil {
		t.Error("the refused create left its room row")
	}
	if err := a.svc.Redis().Del(a.ctx, leftover).Err(); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, a.roomSale("x", 10, map[string]any{}, nil), http.StatusCreated)
}

// TestRoomRules: the queue's answers, each in the contract's terms.
func TestRoomRules(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	a.createSale("plain", 1, "A", 10)
	mustCode(t, a.call("POST", "/v1/sales/plain/queue", a.token("u1"), nil), http.StatusConflict, "admission_not_enabled")
	mustCode(t, a.call("GET", "/v1/sales/plain/queue/draw", "", nil), http.StatusConflict, "admission_not_enabled")
	mustCode(t, a.admin("GET", "/v1/admin/sales/plain/queue", nil), http.StatusConflict, "admission_not_enabled")
	mustCode(t, a.call("POST", "/v1/sales/nope/queue", a.token("u1"), nil), http.StatusNotFound, "not_found")
	mustCode(t, a.call("GET", "/v1/sales/nope/queue/draw", "", nil), http.StatusNotFound, "not_found")

	mustStatus(t, a.roomSale("later", 10, map[string]any{"opens_at": rfc(time.Now().Add(time.Hour))}, nil), http.StatusCreated)
	mustCode(t, a.call("POST", "/v1/sales/later/queue", a.token("u1"), nil), http.StatusConflict, "sale_not_active")

	mustStatus(t, a.roomSale("r", 10, map[string]any{"max_waiting": 2},
		map[string]any{"starts_at": rfc(time.Now().Add(time.Hour))}), http.StatusCreated)
	mustCode(t, a.call("POST", "/v1/sales/r/queue", "", nil), http.StatusUnauthorized, "unauthenticated")
	mustCode(t, a.call("GET", "/v1/sales/r/queue", a.token("u1"), nil), http.StatusNotFound, "not_found")
	mustCode(t, a.call("POST", "/v1/sales/r/purchase-tokens", a.token("u1"), nil), http.StatusConflict, "admission_required")
	p := a.join("r", "u1")
	if p["status"] != "drawing" || p["in_draw"] != true || p["sale_id"] != "r" || p["poll_after_ms"].(float64) < 1000 || p["joined_at"] == nil {
		t.Errorf("a join before the draw: %v", p)
	}
	if again := a.join("r", "u1"); again["joined_at"] != p["joined_at"] || again["status"] != "drawing" {
		t.Errorf("joined again: %v, first %v", again, p)
	}
	a.join("r", "u2")
	full := a.call("POST", "/v1/sales/r/queue", a.token("u3"), nil)
	mustCode(t, full, http.StatusTooManyRequests, "room_full")
	if full.header.Get("Retry-After") == "" {
		t.Error("room_full without Retry-After")
	}
	a.join("r", "u1") // a member joins again, full or not

	// Before the draw: the commitment alone.
	d := a.call("GET", "/v1/sales/r/queue/draw", "", nil)
	mustStatus(t, d, http.StatusOK)
	if m := d.json(t); len(m) != 1 || len(m["commitment"].(string)) != 64 {
		t.Errorf("the draw before it ran: %s", d.body)
	}
	st := a.admin("GET", "/v1/admin/sales/r/queue", nil)
	mustStatus(t, st, http.StatusOK)
	if m := st.json(t); m["drawing"] != 2.0 || m["waiting"] != 0.0 || m["admitted"] != 0.0 || m["draw_size"] != 0.0 {
		t.Errorf("stats: %s", st.body)
	}
	mustCode(t, a.call("GET", "/v1/admin/sales/r/queue", a.token("u1"), nil), http.StatusForbidden, "permission_denied")
	mustCode(t, a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{"rate_per_s": -1}), http.StatusBadRequest, "invalid_argument")
	mustCode(t, a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{}), http.StatusBadRequest, "invalid_argument")
	rr := a.admin("POST", "/v1/admin/sales/r/queue/rate", map[string]any{"rate_per_s": 7})
	mustStatus(t, rr, http.StatusOK)
	if rr.json(t)["rate_per_s"] != 7.0 {
		t.Errorf("rate set: %s", rr.body)
	}

	// A buy without an admission of a sale not started: 409 before 403.
	mustCode(t, a.buyWith("r", "u1", "", ""), http.StatusConflict, "sale_not_active")

	// More than 10 reads a second are refused.
	limited := 0
	for range 30 {
		r := a.call("GET", "/v1/sales/r/queue", a.token("u2"), nil)
		if r.status == http.StatusTooManyRequests {
			if r.code(t) != "rate_limited" || r.header.Get("Retry-After") == "" {
				t.Fatalf("a limited read: %d %s", r.status, r.body)
			}
			limited++
		}
	}
	if limited == 0 {
		t.Error("30 reads at once were all answered")
	}
}

// TestRoomTwoInstances: two instances serve one room. Buyers join on
// either; after the draw, admissions follow the published order, then the
// arrivals, exactly (one unit at a time: each admitted buyer buys it, the
// operator restocks one, the next is admitted within a second); an
// instance restarted loses no place; the published draw verifies.
func TestRoomTwoInstances(t *testing.T) {
	cfg := stacks[0].start(t)
	a, b := startApp(t, cfg), startApp(t, cfg)
	drawUntil := time.Now().Add(2 * time.Second)
	mustStatus(t, a.roomSale("r", 1, map[string]any{"draw_until": rfc(drawUntil)},
		map[string]any{"starts_at": rfc(drawUntil), "per_user_limit": 1}), http.StatusCreated)
	var drawn []string
	for i := range 8 {
		u := "d" + strconv.Itoa(i)
		on := []*app{a, b}[i%2]
		if p := on.join("r", u); p["status"] != "drawing" {
			t.Fatalf("%s joined before the draw: %v", u, p)
		}
		drawn = append(drawn, u)
	}
	time.Sleep(time.Until(drawUntil) + 100*time.Millisecond)
	var late []string
	for i := range 3 {
		u := "late" + strconv.Itoa(i)
		p := []*app{b, a}[i%2].join("r", u)
		if p["in_draw"] != false {
			t.Fatalf("%s joined after the draw: %v", u, p)
		}
		late = append(late, u)
	}

	// The draw is published, and checks.
	var rec admission.Draw
	waitfor.Until(t, waitfor.Patience, "the draw", func() error {
		r := b.call("GET", "/v1/sales/r/queue/draw", "", nil)
		if r.status != http.StatusOK {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		rec = admission.Draw{}
		if err := json.Unmarshal(r.body, &rec); err != nil {
			return err
		}
		if rec.Secret == "" {
			return fmt.Errorf("not drawn: %s", r.body)
		}
		return nil
	})
	if err := admission.Verify(rec); err != nil {
		t.Fatalf("the published draw does not verify: %v", err)
	}
	byEntry := map[string]string{}
	for _, u := range drawn {
		byEntry[admission.Entry("r", u)] = u
	}
	var want []string
	for _, e := range rec.Order {
		u, ok := byEntry[e]
		if !ok {
			t.Fatalf("the draw has an entry of nobody who joined: %s", e)
		}
		want = append(want, u)
	}
	if len(want) != len(drawn) {
		t.Fatalf("the draw has %d entries, %d joined before it", len(want), len(drawn))
	}
	want = append(want, late...)

	// Every waiting buyer's position is its rank in that order.
	for i, u := range want[1:] {
		p := a.place("r", u)
		if p["status"] == "waiting" && p["position"].(float64) < float64(i+1) {
			t.Errorf("%s: position %v, want at least %d", u, p["position"], i+1)
		}
	}

	// One instance restarts: nothing of the room is lost.
	before := b.place("r", want[len(want)-1])
	if err := b.svc.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	b = startApp(t, cfg)
	if after := b.place("r", want[len(want)-1]); after["joined_at"] != before["joined_at"] || after["in_draw"] != false {
		t.Errorf("after a restart: %v, before %v", after, before)
	}

	for i, u := range want {
		on := []*app{a, b}[i%2]
		token := on.waitAdmitted("r", u)
		for _, other := range want[i+1:] {
			if p := on.place("r", other); p["status"] == "admitted" {
				t.Fatalf("%s admitted with %s, before its turn (order %v)", other, u, want)
			}
		}
		r := on.buyWith("r", u, token, "k-"+u)
		mustStatus(t, r, http.StatusCreated)
		order := r.json(t)["order_id"]
		waitfor.Until(t, waitfor.Patience, u+" used", func() error {
			if p := on.place("r", u); p["status"] != "used" || p["order_id"] != order {
				return fmt.Errorf("%v", p)
			}
			return nil
		})
		if i < len(want)-1 {
			mustStatus(t, a.admin("POST", "/v1/admin/sales/r/items/A/restock", map[string]any{"qty": 1}), http.StatusOK)
		}
	}
	st := b.admin("GET", "/v1/admin/sales/r/queue", nil).json(t)
	if st["admitted"] != float64(len(want)) || st["used"] != float64(len(want)) || st["waiting"] != 0.0 || st["draw_size"] != float64(len(drawn)) {
		t.Errorf("stats at the end: %v", st)
	}
	m := a.scrape()
	if _, ok := m[`seckill_room_used{sale="r"}`]; !ok {
		t.Errorf("no room metrics: %v", keysWith(m, "seckill_room"))
	}
}

func keysWith(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestRoomAdmissions: only a live admission of the buyer and the sale
// buys, once; a repeat of an accepted buy is answered 200 after its
// admission is spent, with it or without it.
func TestRoomAdmissions(t *testing.T) {
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 10, map[string]any{}, nil), http.StatusCreated)
	mustStatus(t, a.roomSale("r2", 10, map[string]any{}, nil), http.StatusCreated)
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "pt", "require_purchase_token": true,
		"items": []map[string]any{{"sku": "A", "stock": 10}}}), http.StatusCreated)
	a.join("r", "u1")
	a.join("r", "u2")
	a.join("r2", "u1")
	adm1, adm2 := a.waitAdmitted("r", "u1"), a.waitAdmitted("r", "u2")
	other := a.waitAdmitted("r2", "u1")
	pt := a.call("POST", "/v1/sales/pt/purchase-tokens", a.token("u1"), nil)
	mustStatus(t, pt, http.StatusCreated)
	ptoken := pt.json(t)["token"].(string)
	a.settle("r") // its creation's event in the database: a state to compare

	for name, token := range map[string]string{
		"none":             "",
		"forged":           "eyJhZG0ifQ.AAAA",
		"another buyer's":  adm2,
		"another sale's":   other,
		"a purchase token": ptoken,
		"tampered":         adm1[:len(adm1)-2] + "AA",
	} {
		t.Run(name, func(t *testing.T) {
			before := a.state("r")
			mustCode(t, a.buyWith("r", "u1", token, ""), http.StatusForbidden, "permission_denied")
			if after := a.state("r"); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("a refused buy changed the sale: %v -> %v", before, after)
			}
		})
	}
	// An admission is no purchase token either.
	mustCode(t, a.call("POST", "/v1/sales/pt/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}},
		"X-Purchase-Token", adm1), http.StatusForbidden, "permission_denied")
	// An unknown sku comes before the admission (404), with or without one.
	r := a.call("POST", "/v1/sales/r/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "Z", "qty": 1}}})
	mustCode(t, r, http.StatusNotFound, "not_found")

	first := a.buyWith("r", "u1", adm1, "k1")
	mustStatus(t, first, http.StatusCreated)
	id := first.json(t)["order_id"]
	for name, token := range map[string]string{"its admission": adm1, "no admission": "", "another's": adm2} {
		again := a.buyWith("r", "u1", token, "k1")
		if again.status != http.StatusOK || again.json(t)["order_id"] != id {
			t.Errorf("a repeat with %s: %d %s", name, again.status, again.body)
		}
	}
	// Spent: another buy with it is refused, whoever sends it.
	mustCode(t, a.buyWith("r", "u1", adm1, "k2"), http.StatusForbidden, "permission_denied")
	mustCode(t, a.buyWith("r", "u1", adm1, ""), http.StatusForbidden, "permission_denied")
	if p := a.place("r", "u1"); p["status"] != "used" || p["order_id"] != id {
		t.Errorf("u1 after buying: %v", p)
	}
	mustStatus(t, a.buyWith("r", "u2", adm2, ""), http.StatusCreated)

	// Redis loses the sale and its room: the sale is rebuilt from the
	// database with its spent admissions and orders, the room made again
	// empty (the places are lost). The spent admission still buys nothing;
	// the repeat is still answered.
	a.settle("r")
	if err := a.svc.Redis().Del(a.ctx, a.saleKeys("r")...).Err(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the room made again", func() error {
		if r := a.call("GET", "/v1/sales/r/queue", a.token("u1"), nil); r.status != http.StatusNotFound {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	mustCode(t, a.buyWith("r", "u1", adm1, ""), http.StatusForbidden, "permission_denied")
	if again := a.buyWith("r", "u1", "", "k1"); again.status != http.StatusOK || again.json(t)["order_id"] != id {
		t.Errorf("a repeat after the loss: %d %s", again.status, again.body)
	}
	if p := a.join("r", "u1"); p["status"] != "waiting" && p["status"] != "admitted" {
		t.Errorf("u1 joins the room made again: %v", p)
	}
}

// TestRoomLapse: an admission not used in time lapses on its own, is
// refused, and its place goes to the next buyer; the lapsed buyer who
// joins again is at the back.
func TestRoomLapse(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an admission to lapse (10 s)")
	}
	a := startApp(t, stacks[0].start(t))
	mustStatus(t, a.roomSale("r", 1, map[string]any{"admit_ttl_s": 10}, nil), http.StatusCreated)
	a.join("r", "u1")
	a.join("r", "u2")
	adm := a.waitAdmitted("r", "u1")
	if p := a.place("r", "u2"); p["status"] != "waiting" || p["position"] != 1.0 || p["ahead"] != 0.0 {
		t.Fatalf("u2 behind u1 with one unit: %v", p)
	}
	a.waitAdmitted("r", "u2") // within 1 s of u1's lapse
	if p := a.place("r", "u1"); p["status"] != "lapsed" {
		t.Errorf("u1 after its admission's time: %v", p)
	}
	mustCode(t, a.buyWith("r", "u1", adm, ""), http.StatusForbidden, "permission_denied")
	if p := a.join("r", "u1"); p["status"] != "waiting" || p["in_draw"] != false {
		t.Errorf("u1 joined again after a lapse: %v", p)
	}
}

// TestRoomDegraded: while the database sells, a sale with a room sells
// nothing (503) and admits nobody; its places are kept.
func TestRoomDegraded(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.DegradedTick = 100 * time.Millisecond
	a := startApp(t, cfg)
	mustStatus(t, a.roomSale("r", 10, map[string]any{}, nil), http.StatusCreated)
	a.join("r", "u1")
	adm := a.waitAdmitted("r", "u1")
	a.forceDegraded()
	mustCode(t, a.buyWith("r", "u1", adm, ""), http.StatusServiceUnavailable, "unavailable")
	a.join("r", "u2")
	time.Sleep(200 * time.Millisecond)
	if p := a.place("r", "u2"); p["status"] != "waiting" {
		t.Errorf("u2 while the database sells: %v", p)
	}
	mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
	a.waitMode("redis")
	mustStatus(t, a.buyWith("r", "u1", adm, ""), http.StatusCreated)
	a.waitAdmitted("r", "u2")
}

// TestRoomArchive: the room's keys go with the sale's; its draw stays
// published, and verifies.
func TestRoomArchive(t *testing.T) {
	cfg := stacks[0].start(t)
	cfg.ArchiveEvery = 100 * time.Millisecond
	a := startApp(t, cfg)
	drawUntil := time.Now().Add(time.Second)
	mustStatus(t, a.roomSale("r", 10, map[string]any{"draw_until": rfc(drawUntil)}, map[string]any{"starts_at": rfc(drawUntil)}), http.StatusCreated)
	a.join("r", "u1")
	a.join("r", "u2")
	mustStatus(t, a.buyWith("r", "u1", a.waitAdmitted("r", "u1"), ""), http.StatusCreated)
	var before map[string]any
	waitfor.Until(t, waitfor.Patience, "the draw", func() error {
		before = a.call("GET", "/v1/sales/r/queue/draw", "", nil).json(t)
		if before["secret"] == nil {
			return fmt.Errorf("%v", before)
		}
		return nil
	})
	if !slices.ContainsFunc(a.saleKeys("r"), func(k string) bool { return strings.Contains(k, "room") }) {
		t.Fatalf("no room keys before the archive: %v", a.saleKeys("r"))
	}
	mustStatus(t, a.admin("POST", "/v1/admin/sales/r/close", nil), http.StatusOK)
	a.waitArchived("r")
	if keys := a.saleKeys("r"); len(keys) != 0 {
		t.Errorf("keys left after the archive: %v", keys)
	}
	time.Sleep(2 * roomListEveryForTests) // the loop would make the room again if it could
	if keys := a.saleKeys("r"); len(keys) != 0 {
		t.Errorf("keys made again after the archive: %v", keys)
	}
	after := a.call("GET", "/v1/sales/r/queue/draw", "", nil)
	mustStatus(t, after, http.StatusOK)
	var rec admission.Draw
	if err := json.Unmarshal(after.body, &rec); err != nil || admission.Verify(rec) != nil || len(rec.Entries) != 2 {
		t.Errorf("the draw after the archive: %s (%v)", after.body, err)
	}
	mustCode(t, a.call("POST", "/v1/sales/r/queue", a.token("u3"), nil), http.StatusConflict, "sale_not_active")
}

// roomListEveryForTests is how often the rooms' loop lists the rooms.
const roomListEveryForTests = time.Second
