package service_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// confirmedUnits counts the units of A in confirmed orders of a segmented
// sale's segments in the database.
func confirmedUnits(t *testing.T, a *app, sale string) int64 {
	t.Helper()
	ctx := context.Background()
	segs, err := a.svc.Store().Segments(ctx, sale)
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments of %s: %v %v", sale, segs, err)
	}
	var units int64
	for _, seg := range segs {
		tot, err := a.svc.Store().Totals(ctx, seg)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range tot {
			if it.SKU == "A" {
				units += it.Sold
			}
		}
	}
	return units
}

// TestSegmentedSaleRebuiltAfterRedisLoss: every key of a segmented sale is
// lost from Redis (its segments, its directory) after part of it sold. The
// segments are rebuilt from the database on their next use, by this
// instance and by a new one that finds the directory in the database
// alone: buyers who bought before are still at their limit, and the rest
// sells out exactly, nothing sold twice.
func TestSegmentedSaleRebuiltAfterRedisLoss(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t)}
	a := startApp(t, cfg)
	const stock = 40
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(stock), 4), http.StatusCreated)
	for u := range 15 {
		mustStatus(t, a.buyOne("hot", fmt.Sprintf("u%d", u)), http.StatusCreated)
	}
	a.settle("hot")

	// Lose every key of the test's prefix (a Redis that restarted empty).
	ctx := context.Background()
	var keys []string
	iter := rdb.Scan(ctx, 0, "*{"+cfg.KeyPrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		t.Fatalf("keys of the sale: %d %v", len(keys), err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	b := startApp(t, cfg) // knows nothing of the sale but what the database says
	if got := saleItems(t, b, "hot"); got["A"] != [3]int64{stock - 15, stock, 15} {
		t.Fatalf("rebuilt sale reads %v", got)
	}
	for u := range 15 {
		for _, x := range []*app{a, b} {
			if r := x.buyOne("hot", fmt.Sprintf("u%d", u)); r.status != http.StatusConflict || r.code(t) != "limit_exceeded" {
				t.Fatalf("buyer u%d after the rebuild: %d %s", u, r.status, r.body)
			}
		}
	}
	sold := 15
	for u := 15; u < 60; u++ {
		r := []*app{a, b}[u%2].buyOne("hot", fmt.Sprintf("u%d", u))
		switch {
		case r.status == http.StatusCreated:
			sold++
		case r.status == http.StatusConflict && r.code(t) == "sold_out":
		default:
			t.Fatalf("buy after the rebuild: %d %s", r.status, r.body)
		}
	}
	if sold != stock {
		t.Fatalf("%d sold of %d after the rebuild", sold, stock)
	}
	a.settle("hot")
	if units := confirmedUnits(t, a, "hot"); units != stock {
		t.Fatalf("%d units confirmed in the database, stock %d", units, stock)
	}
	if rep := a.admin("GET", "/v1/admin/sales/hot/reconcile", nil); rep.json(t)["consistent"] != true {
		t.Fatalf("reconcile: %s", rep.body)
	}
}

// TestSegmentedSaleInDegradedMode: while the database sells (an operator
// forced degraded mode), a segmented sale sells from its buyers' home
// segments in the database, with the limit of the buys made in Redis
// before; it pauses, resumes and reads as one sale there; once Redis is
// repaired it sells the rest, and the whole sale never sells more than its
// stock.
func TestSegmentedSaleInDegradedMode(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
			a := startApp(t, cfg)
			const stock = 40
			mustStatus(t, a.createSegmented("hot", 1, "A", int64(stock), 4), http.StatusCreated)
			waitMode := func(mode string) {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for a.sellMode()["mode"] != mode {
					if time.Now().After(deadline) {
						t.Fatalf("mode never became %s: %v", mode, a.sellMode())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			sold := 0
			for u := range 10 {
				mustStatus(t, a.buyOne("hot", fmt.Sprintf("r%d", u)), http.StatusCreated)
				sold++
			}
			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "force"}), http.StatusOK)
			waitMode("db")
			var dbOrder, dbUser string
			for deadline := time.Now().Add(waitfor.Patience); dbOrder == ""; time.Sleep(10 * time.Millisecond) {
				r := a.buyOne("hot", "d0")
				switch {
				case r.status == http.StatusCreated && r.json(t)["status"] == "confirmed":
					dbOrder, dbUser = r.json(t)["order_id"].(string), "d0"
					if r.json(t)["sale_id"] != "hot" {
						t.Fatalf("database order of sale %v", r.json(t)["sale_id"])
					}
					sold++
				case r.status != http.StatusServiceUnavailable || time.Now().After(deadline):
					t.Fatalf("a buy while the database sells: %d %s", r.status, r.body)
				}
			}
			for u := range 10 {
				if r := a.buyOne("hot", fmt.Sprintf("r%d", u)); r.status != http.StatusConflict || r.code(t) != "limit_exceeded" {
					t.Fatalf("the database let Redis buyer r%d buy again: %d %s", u, r.status, r.body)
				}
			}
			for u := 1; u < 10; u++ {
				r := a.buyOne("hot", fmt.Sprintf("d%d", u))
				switch {
				case r.status == http.StatusCreated:
					sold++
				case r.status == http.StatusConflict && r.code(t) == "sold_out": // the home segment is empty
				default:
					t.Fatalf("a buy while the database sells: %d %s", r.status, r.body)
				}
			}
			if got := saleItems(t, a, "hot"); got["A"] != [3]int64{int64(stock - sold), stock, int64(sold)} {
				t.Fatalf("while the database sells, %d sold, the sale reads %v", sold, got)
			}
			mustStatus(t, a.admin("POST", "/v1/admin/sales/hot/pause", nil), http.StatusOK)
			if r := a.buyOne("hot", "p0"); r.status != http.StatusConflict || r.code(t) != "sale_not_active" {
				t.Fatalf("a buy of the paused sale: %d %s", r.status, r.body)
			}
			mustStatus(t, a.admin("POST", "/v1/admin/sales/hot/resume", nil), http.StatusOK)
			r := a.call("POST", "/v1/orders/"+dbOrder+"/cancel", a.token(dbUser), nil)
			mustStatus(t, r, http.StatusOK)
			if r.json(t)["sale_id"] != "hot" {
				t.Fatalf("cancel reads %s", r.body)
			}
			sold--

			mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
			waitMode("redis")
			for u := range 10 {
				if r := a.buyOne("hot", fmt.Sprintf("r%d", u)); r.status != http.StatusConflict || r.code(t) != "limit_exceeded" {
					t.Fatalf("repaired redis let r%d buy again: %d %s", u, r.status, r.body)
				}
			}
			for u := range 60 {
				r := a.buyOne("hot", fmt.Sprintf("n%d", u))
				switch {
				case r.status == http.StatusCreated:
					sold++
				case r.status == http.StatusConflict && r.code(t) == "sold_out":
				default:
					t.Fatalf("a buy after the repair: %d %s", r.status, r.body)
				}
			}
			if sold != stock {
				t.Fatalf("%d sold in all, stock %d", sold, stock)
			}
			a.settle("hot")
			if units := confirmedUnits(t, a, "hot"); units != stock {
				t.Fatalf("%d units confirmed in the database, stock %d", units, stock)
			}
			if got := saleItems(t, a, "hot"); got["A"] != [3]int64{0, stock, stock} {
				t.Fatalf("sold out, the sale reads %v", got)
			}
			if _, err := a.svc.Store().Order(context.Background(), dbOrder); err != nil {
				t.Fatal(err)
			}
			if o, _ := a.svc.Store().Order(context.Background(), dbOrder); o.Status != inventory.OrderCancelled {
				t.Fatalf("the database's order %s: %+v", dbOrder, o)
			}
		})
	}
}

// TestSegmentedSaleTwoInstances: two instances sell one segmented sale at
// once (each with its own segment seller, moving units between segments
// for its own buyers): exactly the stock is sold, nobody over the limit,
// every order confirmed once, and the books reconcile.
func TestSegmentedSaleTwoInstances(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off"}
	a, b := startApp(t, cfg), startApp(t, cfg)
	const stock, buyers = 50, 120
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(stock), 4), http.StatusCreated)
	var mu sync.Mutex
	orders := map[string]string{}
	var wg sync.WaitGroup
	for u := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("u%03d", u)
			for try := range 2 { // the second try is over the limit, from either instance
				r := []*app{a, b}[(u+try)%2].buyOne("hot", user)
				switch {
				case r.status == http.StatusCreated:
					mu.Lock()
					if prev, ok := orders[user]; ok {
						t.Errorf("%s bought twice (%s and %s)", user, prev, r.json(t)["order_id"])
					}
					orders[user] = r.json(t)["order_id"].(string)
					mu.Unlock()
				case r.status == http.StatusConflict && (r.code(t) == "sold_out" || r.code(t) == "limit_exceeded"):
				default:
					t.Errorf("buy: %d %s", r.status, r.body)
				}
			}
		}()
	}
	wg.Wait()
	// An instance may refuse a buyer as sold out for a moment while the
	// other moves units between segments (its seller sees only its own
	// moves, and flags the item for segment.Options.SoldOutTTL): late
	// buyers take what is left, until both instances say sold out after
	// that time has passed.
	for i, refused := 0, 0; refused < 4; i++ {
		if i > 200 {
			t.Fatalf("never sold out; %d sold", len(orders))
		}
		user := fmt.Sprintf("late%d", i)
		r := []*app{a, b}[i%2].buyOne("hot", user)
		switch {
		case r.status == http.StatusCreated:
			orders[user], refused = r.json(t)["order_id"].(string), 0
		case r.status == http.StatusConflict && r.code(t) == "sold_out":
			refused++
			time.Sleep(600 * time.Millisecond)
		default:
			t.Fatalf("late buy: %d %s", r.status, r.body)
		}
	}
	if len(orders) != stock {
		t.Fatalf("%d sold by two instances, stock %d", len(orders), stock)
	}
	a.settle("hot")
	for user, id := range orders {
		if o, err := a.svc.Store().Order(context.Background(), id); err != nil || o.Status != inventory.OrderConfirmed || o.UserID != user {
			t.Fatalf("order %s: %+v %v", id, o, err)
		}
	}
	if units := confirmedUnits(t, a, "hot"); units != stock {
		t.Fatalf("%d units confirmed, stock %d", units, stock)
	}
	for _, x := range []*app{a, b} {
		if got := saleItems(t, x, "hot"); got["A"] != [3]int64{0, stock, stock} {
			t.Fatalf("sold out, the sale reads %v", got)
		}
	}
	if rep := b.admin("GET", "/v1/admin/sales/hot/reconcile", nil); rep.json(t)["consistent"] != true {
		t.Fatalf("reconcile: %s", rep.body)
	}
}
