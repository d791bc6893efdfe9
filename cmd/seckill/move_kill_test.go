//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestServiceKilledBetweenAMovesHalves: two `seckill serve` processes sell
// a sale of 4 units on 2 segments; 2 are sold from segment 0. A buyer at
// home in segment 0 asks process A, which moves a unit from segment 1:
// its move's out half runs in Redis, and A is SIGKILLed before it sees the
// reply (a proxy between A and Redis holds every reply from the out half
// on), so its in half is never sent. Process B finishes the move by itself:
// later buyers through B get both units left, and B's reconcile reads 4
// stocked at every look, and consistent only with every unit in a segment
// or sold. Before, the unit was in neither segment for good: 1 of the 2
// sold, and reconcile read 3 stocked and consistent.
func TestServiceKilledBetweenAMovesHalves(t *testing.T) {
	t.Parallel()
	seckillBinary(t)
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	dbURL := dbtest.PostgresURL(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	const admin, secret = "move-kill-admin", "move-kill-secret"
	env := func(redisAddr string) map[string]string {
		return map[string]string{
			"SECKILL_REDIS_URL": "redis://" + redisAddr + "/0", "SECKILL_DATABASE_URL": dbURL,
			"SECKILL_ADMIN_TOKEN": admin, "SECKILL_JWT_SECRET": secret, "SECKILL_KEY_PREFIX": prefix,
			"SECKILL_RECONCILE_EVERY": "200ms", "SECKILL_RATE_LIMIT_USER": "off",
			// The killed process's consumer stops ticking: B takes its
			// entries over after three grace periods.
			"SECKILL_DEGRADED_GRACE": "300ms",
		}
	}
	a := startReady(t, env(proxy.Addr()), freeAddr(t))
	b := startReady(t, env(rdb.Options().Addr), freeAddr(t))
	client := &http.Client{Timeout: 10 * time.Second}
	ctx := context.Background()
	buy := func(ctx context.Context, p *serveProc, user string) (apiReply, error) {
		tok, err := service.SignUser(secret, user, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		return call(ctx, client, "POST", p.base()+"/v1/sales/hot/orders", tok, nil,
			map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
	}

	r, err := call(ctx, client, "POST", b.base()+"/v1/admin/sales", admin, nil, map[string]any{
		"id": "hot", "per_user_limit": 1, "items": []map[string]any{{"sku": "A", "stock": 4, "segments": 2}}})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create: %d %s %v", r.status, r.body, err)
	}
	segs := []string{"hot:0", "hot:1"} // Place's ids on one node
	userAtHome := func(n int) string { // the n-th user at home in segment 0
		for u := 0; ; u++ {
			if user := fmt.Sprintf("h%d", u); segment.Home(segs, user) == segs[0] {
				if n == 0 {
					return user
				}
				n--
			}
		}
	}
	for n := range 2 {
		if r, err := buy(ctx, b, userAtHome(n)); err != nil || r.status != http.StatusCreated {
			t.Fatalf("buy by %s: %d %s %v", userAtHome(n), r.status, r.body, err)
		}
	}

	proxy.HoldRepliesAfter([]byte("$3\r\nout\r\n")) // move.lua's half "out"
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan string, 100)
	go func() {
		// Until one is not answered: A answers only what it could not
		// sell at all (a 503 while it wonders whether Redis sells, say).
		for n := 2; dctx.Err() == nil; n++ {
			r, err := buy(dctx, a, userAtHome(n))
			if dctx.Err() == nil {
				answers <- fmt.Sprintf("%d %s %v", r.status, r.body, err)
			}
		}
	}()
	left := fmt.Sprintf("{%s:%s}:sale", prefix, segs[1])
	var answered []string
	waitfor.Until(t, waitfor.Patience, "A's move takes a unit out of segment 1", func() error {
		if n, err := rdb.HGet(ctx, left, "r:A").Int64(); err != nil || n != 1 {
			for len(answers) > 0 {
				answered = append(answered, <-answers)
			}
			return fmt.Errorf("segment 1 has %d left (%v); A answered %q", n, err, answered)
		}
		return nil
	})
	a.kill(t)
	cancel()
	proxy.HoldReplies(false)

	type item struct {
		Stocked, Remaining, Sold, Moving int64
	}
	reported := false
	check := func() {
		r, err := call(ctx, client, "GET", b.base()+"/v1/admin/sales/hot/reconcile", admin, nil, nil)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("reconcile: %d %s %v", r.status, r.body, err)
		}
		var rep struct {
			Consistent bool   `json:"consistent"`
			Items      []item `json:"items"`
		}
		if err := json.Unmarshal(r.body, &rep); err != nil || len(rep.Items) != 1 {
			t.Fatalf("reconcile: %s", r.body)
		}
		it := rep.Items[0]
		if !reported && (it.Stocked != 4 || rep.Consistent && it.Remaining+it.Sold != 4) {
			reported = true
			t.Errorf("reconcile with a move cut by a kill: %s", r.body)
		}
	}
	bought := 0
	waitfor.Until(t, waitfor.Patience, "buyers through B get the 2 units left", func() error {
		check()
		for _, user := range []string{"late0", "late1", "late2", "late3"} {
			r, err := buy(ctx, b, user)
			switch {
			case err != nil:
				t.Fatalf("buy through B: %v", err)
			case r.status == http.StatusCreated:
				bought++
			case r.status == http.StatusConflict && (r.errorCode() == "sold_out" || r.errorCode() == "limit_exceeded"):
			default:
				t.Fatalf("buy through B: %d %s", r.status, r.body)
			}
		}
		if bought < 2 {
			return fmt.Errorf("%d of 2 bought", bought)
		}
		return nil
	})
	if bought != 2 {
		t.Fatalf("%d units bought through B, 2 were left", bought)
	}
	settle(t, client, b.base(), admin, "hot", waitfor.Patience)
	check()
	r, _ = call(ctx, client, "GET", b.base()+"/v1/admin/sales/hot/reconcile", admin, nil, nil)
	if m := r.json(t); m["consistent"] != true || fmt.Sprint(m["items"]) != fmt.Sprint([]any{map[string]any{
		"sku": "A", "stocked": 4.0, "remaining": 0.0, "sold": 4.0, "orders_in_db": 4.0, "in_flight": 0.0, "drift": 0.0,
		"stock_drift": 0.0, "stocked_in_db": 4.0, "stocked_in_flight": 0.0, "stocked_drift": 0.0, "held": 4.0,
		"held_drift": 0.0, "moving": 0.0}}) {
		t.Fatalf("reconcile at the end: %s", r.body)
	}
}
