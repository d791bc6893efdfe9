package service_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// TestAdvDegradedRateLimitSurvivesRedisFlap: while the database sells
// (forced), one buyer's limit (burst 3: 4 at once, then one a minute) is
// asked of Redis; when Redis stops answering the in-process fallback
// answers — and it knew nothing of the hits Redis counted, so the buyer
// had a whole new burst: 8 buys where 4 are allowed. This is what made
// TestDegradedModeKeepsTheBuyersRateLimit/forced fail now and then under
// load: a ping of the degraded tick that took longer than its timeout
// sent the next buys to the fallback.
func TestAdvDegradedRateLimitSurvivesRedisFlap(t *testing.T) {
	rdb := redistest.Standalone(t)
	proxy := faultnet.Start(t, rdb.Options().Addr)
	defer proxy.Cut()
	a := startApp(t, service.Config{
		RedisURL:  "redis://" + proxy.Addr() + "/0?max_retries=0&dial_timeout=200ms&read_timeout=200ms",
		KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "1/m,burst=3",
		DegradedTick: 50 * time.Millisecond, DegradedGrace: 200 * time.Millisecond,
	})
	a.createSale("s1", 1000, "A", 1000)
	a.forceDegraded()
	mustStatus(t, a.buyUntil("s1", "warm"), http.StatusCreated)
	began := time.Now()
	created := 0
	burst := func() {
		for range 10 {
			r := a.buyOne("s1", "u1")
			switch {
			case r.status == http.StatusCreated:
				created++
			case r.status == http.StatusTooManyRequests:
			default:
				t.Fatalf("a buy from the database: %d %s", r.status, r.body)
			}
		}
	}
	burst()
	proxy.Cut() // Redis stops answering; the database still sells
	burst()
	if limit := 4 + int(time.Since(began)/time.Minute); created > limit {
		t.Errorf("one buyer's 20 buys from the database, Redis gone half way: %d created, at most %d allowed", created, limit)
	}
}
