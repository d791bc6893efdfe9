package service_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// createHot asks for sale "hot": sku A, stock units on k segments, limit 1,
// and a payment timeout of payS seconds (0: none).
func (a *app) createHot(stock int64, k int, payS int64) reply {
	a.t.Helper()
	body := map[string]any{"id": "hot", "per_user_limit": 1, "items": []map[string]any{{"sku": "A", "stock": stock, "segments": k}}}
	if payS > 0 {
		body["payment_timeout_s"] = payS
	}
	return a.admin("POST", "/v1/admin/sales", body)
}

// keysOfSegmented lists the Redis keys of a segmented sale and of its
// segments ids, but the keys in keep.
func (a *app) keysOfSegmented(sale string, ids []string, keep ...string) []string {
	a.t.Helper()
	var out []string
	for _, id := range append([]string{sale}, ids...) {
		for _, k := range a.saleKeys(id) {
			if !slices.Contains(keep, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// TestFailedSegmentedCreateLeavesNothing: a key of the wrong type is in the
// way of the second segment's sale, so Redis refuses it after the first was
// made. The create fails and leaves nothing: no row in the database, no
// directory and no segment in Redis. Once the key is gone, a create of the
// same id with another stock and no payment timeout makes exactly that sale:
// it sells its 10 units, not the 50 the first segment of the failed one had,
// and files no payment deadline.
func TestFailedSegmentedCreateLeavesNothing(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		ids := []string{"hot:0", "hot:1"}
		obstacle := a.svc.Engine().Key(ids[1], "sale")
		if err := a.svc.Redis().Set(a.ctx, obstacle, "in the way", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if r := a.createHot(100, 2, 60); r.status == http.StatusCreated {
			t.Fatalf("a create Redis refused half way answered %d %s", r.status, r.body)
		}
		if left := a.keysOfSegmented("hot", ids, obstacle); len(left) > 0 {
			t.Errorf("the failed create left keys in Redis: %v", left)
		}
		if segs, exists, err := a.svc.Store().SaleKind(a.ctx, "hot"); err != nil || exists || segs != nil {
			t.Errorf("the failed create left the sale in the database: %v %v %v", segs, exists, err)
		}
		for _, id := range ids {
			if _, err := a.svc.Store().Sale(a.ctx, id); !errors.Is(err, inventory.ErrNotFound) {
				t.Errorf("the failed create left segment %s in the database: %v", id, err)
			}
		}
		if r := a.call("GET", "/v1/sales/hot", "", nil); r.status != http.StatusNotFound {
			t.Errorf("GET of the sale whose create failed: %d %s", r.status, r.body)
		}

		if err := a.svc.Redis().Del(a.ctx, obstacle).Err(); err != nil {
			t.Fatal(err)
		}
		mustStatus(t, a.createHot(10, 2, 0), http.StatusCreated)
		for _, id := range ids {
			if pay, err := a.svc.Redis().HGet(a.ctx, a.svc.Engine().Key(id, "sale"), "pay").Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("segment %s has a payment timeout %q (%v): none was asked for", id, pay, err)
			}
		}
		sold := 0
		for u := range 40 {
			r := a.buyOne("hot", fmt.Sprintf("u%02d", u))
			switch {
			case r.status == http.StatusCreated:
				sold++
				if ps := r.json(t)["payment_status"]; ps != nil && ps != "not_required" {
					t.Fatalf("an order of a sale without a payment step reads payment_status %v", ps)
				}
			case r.status == http.StatusConflict && r.code(t) == "sold_out":
			default:
				t.Fatalf("buy: %d %s", r.status, r.body)
			}
		}
		if sold != 10 {
			t.Fatalf("%d units sold by the sale created with stock 10", sold)
		}
		for _, id := range ids {
			if n, err := a.svc.Redis().ZCard(a.ctx, a.svc.Engine().Key(id, "deadlines")).Result(); err != nil || n != 0 {
				t.Errorf("segment %s files %d payment deadlines (%v)", id, n, err)
			}
		}
		a.settle(ids[0])
		a.settle(ids[1])
		if rep := a.admin("GET", "/v1/admin/sales/hot/reconcile", nil).json(t); rep["consistent"] != true {
			t.Fatalf("reconcile: %v", rep)
		}
	})
}

// TestSegmentedCreateAdoptsOnlyTheSameSale: a create died half way, after
// the directory and the first segment (stock 50 of 100, a payment timeout
// of 60 s). A create of the same id that differs in anything that create
// writes (here: no payment timeout; then another stock) does not take
// that segment over: it is refused and changes nothing. The very same
// create does take it over, and makes the rest.
func TestSegmentedCreateAdoptsOnlyTheSameSale(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		ids := []string{"hot:0", "hot:1"}
		eng, rdb := a.svc.Engine(), a.svc.Redis()
		died := inventory.Sale{ID: "hot", PerUserLimit: 1, PaymentTimeout: time.Minute, Items: []inventory.Item{{SKU: "A", Stock: 100}}}
		plan, err := segment.Plan(died, ids)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(a.ctx, eng.Key("hot", "segments"), strings.Join(ids, ","), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := eng.CreateSale(a.ctx, plan[0]); err != nil {
			t.Fatal(err)
		}
		before, err := rdb.HGetAll(a.ctx, eng.Key(ids[0], "sale")).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			create func() reply
		}{
			{"no payment timeout", func() reply { return a.createHot(100, 2, 0) }},
			{"another stock", func() reply { return a.createHot(10, 2, 60) }},
		} {
			name, r := c.name, c.create()
			if r.status != http.StatusConflict || r.code(t) != "already_exists" {
				t.Errorf("a create with %s over a piece of another: %d %s", name, r.status, r.body)
			}
			if after, err := rdb.HGetAll(a.ctx, eng.Key(ids[0], "sale")).Result(); err != nil || !sameMap(before, after) {
				t.Errorf("a create with %s changed the piece: %v, %v (%v)", name, before, after, err)
			}
			if left := a.keysOfSegmented("hot", []string{ids[1]}); len(left) > 0 && !slices.Equal(left, []string{eng.Key("hot", "segments")}) {
				t.Errorf("a create with %s left keys: %v", name, left)
			}
			if _, exists, _ := a.svc.Store().SaleKind(a.ctx, "hot"); exists {
				t.Errorf("a create with %s is in the database", name)
			}
		}
		mustStatus(t, a.createHot(100, 2, 60), http.StatusCreated)
		if got := saleItems(t, a, "hot")["A"]; got != [3]int64{100, 100, 0} {
			t.Fatalf("the sale made of the piece and the rest reads %v", got)
		}
	})
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
