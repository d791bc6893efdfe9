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

// TestRedisKilledMidSaleWithPayments is the oversell check with a payment
// step: a sale whose orders must be paid within a second, half of the
// buyers never paying, units going round from expired reservations to
// later buyers; the service's Redis (AOF, appendfsync always) is killed
// with SIGKILL in the middle and restarted. At the end every acknowledged
// order is in the database once: paid and confirmed if its buyer's pay was
// answered 200, else cancelled and expired; the units sold are exactly the
// paid ones, every other unit is back in stock; nothing is oversold and the
// books reconcile.
func TestRedisKilledMidSaleWithPayments(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	a := startApp(t, service.Config{RedisURL: "redis://" + srv.Addr() + "/0", DatabaseURL: dbtest.PostgresURL(t),
		RateLimitUser: "off"})
	const stock = 40
	a.createPaySale("s1", stock, 1)

	var (
		mu     sync.Mutex
		acked  = map[string]bool{} // order -> its buyer pays
		paid   = map[string]bool{} // pay answered 200
		closed = map[string]bool{} // pay answered 409 order_closed
		wg     sync.WaitGroup
	)
	ctx, stop := context.WithTimeout(context.Background(), 6*time.Second)
	defer stop()
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				user := fmt.Sprintf("g%d-%d", g, i)
				r := a.buyOne("s1", user)
				if r.status != http.StatusCreated {
					time.Sleep(10 * time.Millisecond) // sold out or Redis away: units come back
					continue
				}
				id := r.json(t)["order_id"].(string)
				pays := i%2 == 0
				mu.Lock()
				acked[id] = pays
				mu.Unlock()
				if !pays {
					continue
				}
				for { // pay, through the outage, until Redis says yes or too late
					p := a.pay(user, id, "ref-"+id)
					if p.status == http.StatusOK || p.status == http.StatusConflict {
						mu.Lock()
						if p.status == http.StatusOK {
							paid[id] = true
						} else {
							closed[id] = true
						}
						mu.Unlock()
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	for { // kill once a good number of orders went through
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= stock || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("%d orders acknowledged, %d paid, %d too late to pay", len(acked), len(paid), len(closed))

	// Every reservation is decided (paid or expired), then stored.
	eng := a.svc.Engine()
	waitfor.Until(t, waitfor.Patience, "every reservation paid or expired", func() error {
		n, err := a.svc.Redis().ZCard(a.ctx, eng.Key("s1", "deadlines")).Result()
		if err == nil && n != 0 {
			err = fmt.Errorf("%d awaiting payment", n)
		}
		return err
	})
	a.settle("s1")
	db := a.svc.Store()
	for id := range acked {
		o, err := db.Order(a.ctx, id)
		switch {
		case err != nil:
			t.Errorf("acknowledged order %s: %v", id, err)
		case paid[id] && (o.Status != inventory.OrderConfirmed || o.Payment != inventory.PaymentPaid):
			t.Errorf("paid order %s: %s, %s", id, o.Status, o.Payment)
		case !paid[id] && (o.Status != inventory.OrderCancelled || o.Payment != inventory.PaymentExpired):
			t.Errorf("unpaid order %s: %s, %s", id, o.Status, o.Payment)
		}
	}
	counts, err := db.CountOrders(a.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if n := counts[inventory.OrderConfirmed]; n != len(paid) || n > stock {
		t.Errorf("%d confirmed orders in the database, %d paid, stock %d", n, len(paid), stock)
	}
	st, err := eng.Stock(a.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if it := st.Items[0]; it.Sold != int64(len(paid)) || it.Remaining != stock-int64(len(paid)) || it.Awaiting != 0 {
		t.Errorf("at the end: %+v; %d paid", it, len(paid))
	}
	held, err := a.svc.Redis().HGetAll(a.ctx, eng.Key("s1", "bought")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(paid) {
		t.Errorf("%d buyers hold units, %d paid", len(held), len(paid))
	}
}
