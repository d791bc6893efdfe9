package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestServiceKilledWithReservations: `seckill serve` is SIGKILLed in the
// middle of a sale whose orders must be paid within a second, and
// restarted; half the buyers never pay, the others pay (a pay or buy whose
// answer was lost is sent again, same key, same ref), units go round from
// expired reservations to later buyers. Afterwards every acknowledged
// order is in the database once: paid and confirmed if its buyer's pay was
// answered 200, else cancelled and expired; the units sold are exactly the
// paid ones, the rest back in stock; the books reconcile.
func TestServiceKilledWithReservations(t *testing.T) {
	t.Parallel()
	seckillBinary(t)
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	dbURL := dbtest.PostgresURL(t)
	const (
		sale   = "killpay"
		stock  = 30
		buyers = 6
		admin  = "kill-admin-token"
		secret = "kill-jwt-secret"
	)
	env := map[string]string{
		"SECKILL_REDIS_URL":       "redis://" + srv.Addr() + "/0",
		"SECKILL_DATABASE_URL":    dbURL,
		"SECKILL_ADMIN_TOKEN":     admin,
		"SECKILL_JWT_SECRET":      secret,
		"SECKILL_KEY_PREFIX":      "killpay",
		"SECKILL_RATE_LIMIT_USER": "off",
		"SECKILL_DEGRADED_GRACE":  "300ms",
	}
	rdb := srv.Client(t)
	eng := inventory.New(rdb, inventory.Options{Prefix: "killpay"})
	sqldb, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * buyers}}
	defer client.CloseIdleConnections()

	proc := startReady(t, env, freeAddr(t))
	var base atomic.Pointer[string] // the buyers' (the restarted process listens on the same address)
	b := proc.base()
	base.Store(&b)
	noDegradedSwitch(t, client, proc.base(), admin)
	r, err := call(context.Background(), client, "POST", proc.base()+"/v1/admin/sales", admin, nil, map[string]any{
		"id": sale, "per_user_limit": 1, "payment_timeout_s": 1, "items": []map[string]any{{"sku": "A", "stock": stock}}})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create sale: %d %s %v", r.status, r.body, err)
	}

	var (
		mu    sync.Mutex
		acked = map[string]bool{} // order -> answered 201 or 200
		paid  = map[string]bool{} // pay answered 200
		n     atomic.Int64
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	// until sends a request until it gets an HTTP answer that is not a 5xx.
	until := func(method, path, tok string, hdr map[string]string, body any) (apiReply, bool) {
		for ctx.Err() == nil {
			r, err := call(ctx, client, method, *base.Load()+path, tok, hdr, body)
			if err == nil && r.status < 500 {
				return r, true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return apiReply{}, false
	}
	for g := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				user := fmt.Sprintf("g%d-u%d", g, i)
				tok, err := service.SignUser(secret, user, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
				if err != nil {
					panic(err)
				}
				r, ok := until("POST", "/v1/sales/"+sale+"/orders", tok, map[string]string{"Idempotency-Key": "buy-" + user},
					map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}})
				if !ok {
					return
				}
				if r.status != http.StatusCreated && r.status != http.StatusOK {
					time.Sleep(20 * time.Millisecond) // sold out for now: units come back
					continue
				}
				var o struct {
					OrderID string `json:"order_id"`
				}
				_ = json.Unmarshal(r.body, &o)
				mu.Lock()
				acked[o.OrderID] = true
				mu.Unlock()
				n.Add(1)
				if i%2 == 1 {
					continue // never pays
				}
				p, ok := until("POST", "/v1/orders/"+o.OrderID+"/pay", tok, nil, map[string]any{"payment_ref": "ref-" + user})
				if ok && p.status == http.StatusOK {
					mu.Lock()
					paid[o.OrderID] = true
					mu.Unlock()
				}
			}
		}()
	}
	for n.Load() < stock/2 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	proc.kill(t)
	proc = startReady(t, env, proc.addr)
	wg.Wait()
	if n.Load() < stock {
		t.Fatalf("only %d orders acknowledged", n.Load())
	}

	waitfor.Until(t, waitfor.Patience, "every reservation paid or expired", func() error {
		n, err := rdb.ZCard(context.Background(), eng.Key(sale, "deadlines")).Result()
		if err == nil && n != 0 {
			err = fmt.Errorf("%d awaiting payment", n)
		}
		return err
	})
	settle(t, client, proc.base(), admin, sale, 45*time.Second)
	mu.Lock()
	defer mu.Unlock()
	rows, err := sqldb.Query("SELECT id, status, payment_status FROM orders WHERE sale_id = $1", sale)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	inDB, confirmed := map[string]string{}, 0
	for rows.Next() {
		var id, status, payment string
		if err := rows.Scan(&id, &status, &payment); err != nil {
			t.Fatal(err)
		}
		inDB[id] = status + "/" + payment
		if status == "confirmed" {
			confirmed++
		}
	}
	for id := range acked {
		want := "cancelled/expired"
		if paid[id] {
			want = "confirmed/paid"
		}
		if inDB[id] != want {
			t.Errorf("acknowledged order %s (paid %v): %q in the database, want %q", id, paid[id], inDB[id], want)
		}
	}
	if confirmed != len(paid) || confirmed > stock {
		t.Errorf("%d confirmed orders, %d paid, stock %d", confirmed, len(paid), stock)
	}
	st, err := eng.Stock(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	if it := st.Items[0]; it.Sold != int64(len(paid)) || it.Remaining != stock-int64(len(paid)) || it.Awaiting != 0 {
		t.Errorf("at the end: %+v; %d paid", it, len(paid))
	}
	t.Logf("%d orders acknowledged, %d paid; %d orders in the database", len(acked), len(paid), len(inDB))
	runReconcileCmd(t, env, sale)
}
