package service_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/waitfor"
)

// createSegmented creates a sale through the API whose items carry
// segments: items are sku, stock, segments (0: no segments field).
func (a *app) createSegmented(id string, limit int64, items ...any) reply {
	a.t.Helper()
	var list []map[string]any
	for i := 0; i+2 < len(items); i += 3 {
		it := map[string]any{"sku": items[i], "stock": items[i+1]}
		if k := items[i+2].(int); k != 0 {
			it["segments"] = k
		}
		list = append(list, it)
	}
	return a.admin("POST", "/v1/admin/sales", map[string]any{"id": id, "per_user_limit": limit, "items": list})
}

// saleItems reads GET /v1/sales/{sale}: sku -> remaining, stocked, sold.
func saleItems(t testing.TB, a *app, sale string) map[string][3]int64 {
	t.Helper()
	r := a.call("GET", "/v1/sales/"+sale, "", nil)
	mustStatus(t, r, http.StatusOK)
	out := map[string][3]int64{}
	for _, it := range r.json(t)["items"].([]any) {
		m := it.(map[string]any)
		sku := m["sku"].(string)
		if _, dup := out[sku]; dup {
			t.Fatalf("sku %s listed twice: %s", sku, r.body)
		}
		out[sku] = [3]int64{int64(m["remaining"].(float64)), int64(m["stocked"].(float64)), int64(m["sold"].(float64))}
	}
	return out
}

// TestSegmentedSaleSellsOutExactly: a sale whose hot item is on 4 segments
// is sold out by many concurrent buyers over HTTP: exactly its stock is
// sold, nobody holds more than the per-user limit, every order reaches the
// database (under the sale's segments) and reads back under the sale's id,
// and the sale reads as one sale with one item everywhere: GET, the list,
// reconcile.
func TestSegmentedSaleSellsOutExactly(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		const stock, limit, buyers = 120, 2, 90
		mustStatus(t, a.createSegmented("hot", limit, "A", int64(stock), 4, "B", int64(-1), 0), http.StatusCreated)
		segs, err := a.svc.Store().Segments(a.ctx, "hot")
		if err != nil || len(segs) != 4 {
			t.Fatalf("segments in the database: %v %v", segs, err)
		}
		if got := saleItems(t, a, "hot"); got["A"] != [3]int64{stock, stock, 0} || len(got) != 2 {
			t.Fatalf("new sale reads %v", got)
		}
		// A segment is no sale to buyers: bought from directly, a buyer
		// would pass the limit kept in the buyer's home segment.
		for _, seg := range segs {
			if r := a.buyOne(seg, "sneaky"); r.status != http.StatusNotFound {
				t.Fatalf("a buy of segment %s: %d %s", seg, r.status, r.body)
			}
			if r := a.call("GET", "/v1/sales/"+seg, "", nil); r.status != http.StatusNotFound {
				t.Fatalf("GET of segment %s: %d %s", seg, r.status, r.body)
			}
		}

		var mu sync.Mutex
		orders := map[string]string{} // order id -> user
		perUser := map[string]int64{}
		var wg sync.WaitGroup
		for u := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := fmt.Sprintf("u%03d", u)
				for range limit + 1 {
					r := a.call("POST", "/v1/sales/hot/orders", a.token(user), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
					switch r.status {
					case http.StatusCreated:
						m := r.json(t)
						if m["sale_id"] != "hot" {
							t.Errorf("order of sale %v, want hot", m["sale_id"])
						}
						mu.Lock()
						orders[m["order_id"].(string)] = user
						perUser[user]++
						mu.Unlock()
					case http.StatusConflict:
						if c := r.code(t); c != "sold_out" && c != "limit_exceeded" {
							t.Errorf("buy refused with %s", r.body)
						}
					default:
						t.Errorf("buy: %d %s", r.status, r.body)
					}
				}
			}()
		}
		wg.Wait()
		if len(orders) != stock {
			t.Fatalf("%d units sold, stock %d", len(orders), stock)
		}
		for user, n := range perUser {
			if n > limit {
				t.Errorf("%s holds %d, limit %d", user, n, limit)
			}
		}
		// Sold out everywhere: one more buyer finds nothing in any segment.
		if r := a.buyOne("hot", "late"); r.status != http.StatusConflict || r.code(t) != "sold_out" {
			t.Fatalf("buy after sell-out: %d %s", r.status, r.body)
		}
		a.settle("hot")
		for id, user := range orders {
			o, err := a.svc.Store().Order(a.ctx, id)
			if err != nil || o.Status != inventory.OrderConfirmed || o.UserID != user || !slices.Contains(segs, o.SaleID) {
				t.Fatalf("order %s in the database: %+v %v", id, o, err)
			}
		}
		if got := saleItems(t, a, "hot"); got["A"] != [3]int64{0, stock, stock} {
			t.Fatalf("sold-out sale reads %v", got)
		}
		rep := a.admin("GET", "/v1/admin/sales/hot/reconcile", nil)
		mustStatus(t, rep, http.StatusOK)
		m := rep.json(t)
		items := m["items"].([]any)
		if m["consistent"] != true || m["sale"] != "hot" || len(items) != 2 {
			t.Fatalf("reconcile: %s", rep.body)
		}
		if a0 := items[0].(map[string]any); a0["sold"] != float64(stock) || a0["orders_in_db"] != float64(stock) || a0["stocked"] != float64(stock) {
			t.Fatalf("reconcile item A: %v", a0)
		}

		// An order reads and cancels under the sale's id; its unit is for sale again.
		var id, owner string
		for id, owner = range orders {
			break
		}
		r := a.call("GET", "/v1/orders/"+id, a.token(owner), nil)
		mustStatus(t, r, http.StatusOK)
		if r.json(t)["sale_id"] != "hot" || r.json(t)["status"] != "confirmed" {
			t.Fatalf("order reads %s", r.body)
		}
		r = a.call("POST", "/v1/orders/"+id+"/cancel", a.token(owner), nil)
		mustStatus(t, r, http.StatusOK)
		if r.json(t)["sale_id"] != "hot" || r.json(t)["status"] != "cancelled" {
			t.Fatalf("cancel reads %s", r.body)
		}
		if got := saleItems(t, a, "hot"); got["A"][0] != 1 {
			t.Fatalf("after a cancel the sale reads %v", got)
		}
		mustStatus(t, a.buyOne("hot", "late"), http.StatusCreated)

		// The list shows the sale once, and none of its segments.
		list := a.call("GET", "/v1/sales", "", nil)
		mustStatus(t, list, http.StatusOK)
		n := 0
		for _, s := range list.json(t)["sales"].([]any) {
			sid := s.(map[string]any)["id"].(string)
			if sid == "hot" {
				n++
			}
			if strings.HasPrefix(sid, "hot:") {
				t.Errorf("the list shows segment %s", sid)
			}
		}
		if n != 1 {
			t.Fatalf("the list shows hot %d times: %s", n, list.body)
		}
	})
}

// TestSegmentedMultiItemBuyIsAllOrNothing: a buy naming a segmented item
// and an unsegmented one takes both or neither, wherever the units are.
func TestSegmentedMultiItemBuyIsAllOrNothing(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		// One unit of A per segment: most buyers' homes run short and are
		// refilled from the others.
		mustStatus(t, a.createSegmented("mix", 1, "A", int64(4), 4, "B", int64(10), 0), http.StatusCreated)
		both := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}, {"sku": "B", "qty": 1}}}
		sold := 0
		for u := range 8 {
			r := a.call("POST", "/v1/sales/mix/orders", a.token(fmt.Sprintf("m%d", u)), both)
			switch {
			case r.status == http.StatusCreated:
				sold++
			case r.status == http.StatusConflict && r.code(t) == "sold_out":
			default:
				t.Fatalf("buy: %d %s", r.status, r.body)
			}
		}
		if sold != 4 {
			t.Fatalf("%d buys of A+B sold, 4 units of A", sold)
		}
		if got := saleItems(t, a, "mix"); got["A"] != [3]int64{0, 4, 4} || got["B"] != [3]int64{6, 10, 4} {
			t.Fatalf("after A sold out, a buy of A+B took B: %v", got)
		}
		// B sold out (by buyers of B alone), A restocked: A+B takes no A.
		for u := range 6 {
			mustStatus(t, a.call("POST", "/v1/sales/mix/orders", a.token(fmt.Sprintf("b%d", u)),
				map[string]any{"items": []map[string]any{{"sku": "B", "qty": 1}}}), http.StatusCreated)
		}
		mustStatus(t, a.admin("POST", "/v1/admin/sales/mix/items/A/restock", map[string]any{"qty": 3}), http.StatusOK)
		r := a.call("POST", "/v1/sales/mix/orders", a.token("late"), both)
		if r.status != http.StatusConflict || r.code(t) != "sold_out" {
			t.Fatalf("A+B with B sold out: %d %s", r.status, r.body)
		}
		if got := saleItems(t, a, "mix"); got["A"] != [3]int64{3, 7, 4} || got["B"] != [3]int64{0, 10, 10} {
			t.Fatalf("after B sold out, a buy of A+B took A: %v", got)
		}
		a.settle("mix")
		rep := a.admin("GET", "/v1/admin/sales/mix/reconcile", nil)
		if rep.json(t)["consistent"] != true {
			t.Fatalf("reconcile: %s", rep.body)
		}
	})
}

// TestSegmentsBadInput: segments outside 1..64, or not an integer, are
// refused (400) and create nothing.
func TestSegmentsBadInput(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		for i, k := range []string{"0", "65", "-1", "2.5", `"4"`, "null"} {
			id := fmt.Sprintf("bad%d", i)
			body := `{"id": "` + id + `", "items": [{"sku": "A", "stock": 10, "segments": ` + k + `}, {"sku": "B", "stock": 1}]}`
			r := a.call("POST", "/v1/admin/sales", a.svc.AdminToken(), body)
			if k == "null" { // absent: the default, one segment
				mustStatus(t, r, http.StatusCreated)
				continue
			}
			if r.status != http.StatusBadRequest || r.code(t) != "invalid_argument" {
				t.Errorf("segments %s: %d %s", k, r.status, r.body)
			}
			if g := a.call("GET", "/v1/sales/"+id, "", nil); g.status != http.StatusNotFound {
				t.Errorf("segments %s: the sale exists: %d %s", k, g.status, g.body)
			}
			for _, seg := range []string{id, id + ":0", id + ":1"} {
				if _, err := a.svc.Store().Sale(a.ctx, seg); err == nil {
					t.Errorf("segments %s: sale %s in the database", k, seg)
				}
				if n, _ := a.svc.Redis().Exists(a.ctx, a.svc.Engine().Key(seg, "sale"), a.svc.Engine().Key(seg, "segments")).Result(); n != 0 {
					t.Errorf("segments %s: keys of %s in redis", k, seg)
				}
			}
			if segs, _ := a.svc.Store().Segments(a.ctx, id); segs != nil {
				t.Errorf("segments %s: a directory %v", k, segs)
			}
		}
		// 64 is allowed; a sale of that id exists after, as one sale.
		mustStatus(t, a.createSegmented("wide", 1, "A", int64(100), segment.MaxSegments), http.StatusCreated)
		if got := saleItems(t, a, "wide"); got["A"] != [3]int64{100, 100, 0} {
			t.Fatalf("64 segments read %v", got)
		}
		// The id is taken, as one sale or the other.
		if r := a.createSegmented("wide", 1, "A", int64(1), 0); r.status != http.StatusConflict {
			t.Fatalf("plain sale over a segmented one: %d %s", r.status, r.body)
		}
		a.createSale("plain", 1, "A", 5)
		if r := a.createSegmented("plain", 1, "A", int64(8), 2); r.status != http.StatusConflict {
			t.Fatalf("segmented sale over a plain one: %d %s", r.status, r.body)
		}
	})
}

// TestSegmentedSaleInMetrics: the live view behind the dashboard and the
// per-sale metrics shows a segmented sale once, under its id, with its
// item's units summed over the segments.
func TestSegmentedSaleInMetrics(t *testing.T) {
	a := liveApp(t)
	mustStatus(t, a.createSegmented("hotm", 1, "A", int64(20), 4), http.StatusCreated)
	for u := range 7 {
		mustStatus(t, a.buyOne("hotm", fmt.Sprintf("u%d", u)), http.StatusCreated)
	}
	want := []string{`seckill_stock_remaining{sale="hotm",sku="A"} 13`, `seckill_stock_sold{sale="hotm",sku="A"} 7`,
		`seckill_stock_stocked{sale="hotm",sku="A"} 20`, `seckill_orders_confirmed{sale="hotm"} 7`}
	var body string
	for deadline := time.Now().Add(waitfor.Patience); ; time.Sleep(50 * time.Millisecond) {
		body = string(a.call("GET", "/metrics", "", nil).body)
		missing := false
		for _, w := range want {
			missing = missing || !strings.Contains(body, w)
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed %v", want)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, `sale="hotm:`) && strings.HasPrefix(line, "seckill_stock_") {
			t.Errorf("a segment in the metrics: %s", line)
		}
	}
}

// TestSegmentedSaleWithPurchaseTokens: a segmented sale keeps its settings
// (purchase tokens, here): a token is issued for the sale, spent once by
// a buy, and refused the second time.
func TestSegmentedSaleWithPurchaseTokens(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "tok", "per_user_limit": 2, "require_purchase_token": true,
			"items": []map[string]any{{"sku": "A", "stock": 10, "segments": 3}}}), http.StatusCreated)
		if r := a.call("GET", "/v1/sales/tok", "", nil); r.json(t)["require_purchase_token"] != true {
			t.Fatalf("sale reads %s", r.body)
		}
		alice := a.token("alice")
		one := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
		if r := a.call("POST", "/v1/sales/tok/orders", alice, one); r.status != http.StatusForbidden {
			t.Fatalf("buy without a token: %d %s", r.status, r.body)
		}
		r := a.call("POST", "/v1/sales/tok/purchase-tokens", alice, nil)
		mustStatus(t, r, http.StatusCreated)
		tok := r.json(t)["token"].(string)
		mustStatus(t, a.call("POST", "/v1/sales/tok/orders", alice, one, "X-Purchase-Token", tok), http.StatusCreated)
		if r := a.call("POST", "/v1/sales/tok/orders", alice, one, "X-Purchase-Token", tok); r.status != http.StatusForbidden || r.code(t) != "permission_denied" {
			t.Fatalf("token spent twice: %d %s", r.status, r.body)
		}
	})
}
