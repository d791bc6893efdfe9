package service_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/buycheck"
	"github.com/seckill/seckill/internal/waitfor"
)

func init() { buycheck.Count() }

var validatedOnceRuns atomic.Int64

// TestBuyIsValidatedOnceOverHTTP: a buy over HTTP is validated once on its
// way, by the service at its edge (inventory.CheckBuy), whoever sells it:
// Redis, for a plain sale and for a segmented one (moved to the buyer's
// home segment), or the database in degraded mode. The seller, the router,
// the engine and the store take the checked buy as it is. An order Redis
// sold is checked once more where the database reads it back from the
// stream (another edge: Redis holds what any client wrote); the test waits
// for that. (Fails if the seller, the router, the engine or the store
// validates a buy again: before inventory.CheckedBuy, the engine did.)
func TestBuyIsValidatedOnceOverHTTP(t *testing.T) {
	run := validatedOnceRuns.Add(1) // buycheck counts per user for the whole process (-count=N)
	for i, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			cfg.DegradedTick, cfg.DegradedGrace = 50*time.Millisecond, 200*time.Millisecond
			a := startApp(t, cfg)
			a.createSale("s1", 1, "A", 100)
			mustStatus(t, a.createSegmented("hot", 1, "A", int64(100), 4), http.StatusCreated)
			body := map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}
			// buy sends one buyer's buy until it is answered otherwise
			// than 503 (a switch's grace period), waits until its order is
			// in the database, and returns how many requests it sent and
			// how many times a buy of the buyer was validated.
			buy := func(sale, user string) (sent, validated int64) {
				t.Helper()
				user = fmt.Sprintf("%s%d-%d-%s", buycheck.Prefix, run, i, user) // one buyer per run and stack
				tok := a.token(user)
				for {
					sent++
					r := a.call("POST", "/v1/sales/"+sale+"/orders", tok, body, "Idempotency-Key", "k1")
					if r.status == http.StatusServiceUnavailable {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					mustStatus(t, r, http.StatusCreated)
					id := r.json(t)["order_id"].(string)
					waitfor.Until(t, waitfor.Patience, "order "+id+" in the database", func() error {
						if _, err := a.svc.Store().Order(a.ctx, id); err != nil {
							return err
						}
						return nil
					})
					return sent, buycheck.Of(user)
				}
			}
			for _, sale := range []string{"s1", "hot"} {
				if sent, n := buy(sale, "redis-"+sale); n != sent+1 {
					t.Errorf("%d buy of %s sold by redis: validated %d times, want %d (the service's check, the stream's)", sent, sale, n, sent+1)
				}
			}
			a.forceDegraded()
			for _, sale := range []string{"s1", "hot"} {
				if sent, n := buy(sale, "db-"+sale); n != sent {
					t.Errorf("%d buys of %s sold by the database: validated %d times, want %d (the service's check of each)", sent, sale, n, sent)
				}
			}
		})
	}
}
