package service

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
)

// TestPoolTimeoutIsNotRedisDown: a pool timeout (every connection of the
// pool busy, the command never sent) is answered 503, and is not taken
// for an unreachable Redis.
func TestPoolTimeoutIsNotRedisDown(t *testing.T) {
	err := fmt.Errorf("seckill: buy: %w", redis.ErrPoolTimeout)
	if failover.RedisDown(err) {
		t.Error("a pool timeout is taken for Redis down")
	}
	if api := toAPI(err); api.Status != http.StatusServiceUnavailable || api.RetryAfter == 0 {
		t.Errorf("a pool timeout is answered %+v, want 503 with Retry-After", api)
	}
}

// TestBusyPoolDoesNotStartDegradedMode: while every connection of the
// API's pool is held (here by blocking reads, as the order consumer's
// reads once held them), degraded mode's probe still reaches Redis on its
// own connection, and the database never starts selling.
func TestBusyPoolDoesNotStartDegradedMode(t *testing.T) {
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := context.Background()
	s := startForTest(t, Config{Addr: "127.0.0.1:0", RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: prefix,
		DatabaseURL: dbtest.PostgresURL(t), ReconcileEvery: -1, SampleEvery: -1,
		DegradedTick: 50 * time.Millisecond, DegradedGrace: 150 * time.Millisecond})
	// Hold every connection of the pool for ten grace periods.
	size := s.rdb.(*redis.Client).Options().PoolSize
	var wg sync.WaitGroup
	for range size {
		wg.Go(func() { _ = s.rdb.BLPop(ctx, 1500*time.Millisecond, prefix+":{nothing}").Err() })
	}
	wg.Wait()
	m, err := s.db.SellMode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode != store.ModeRedis || m.Epoch != 0 {
		t.Errorf("sell mode after the pool was busy: %+v, want redis (epoch 0)", m)
	}
	if _, redisSells := s.seller.Sells(); !redisSells {
		t.Error("redis does not sell after the pool was busy")
	}
}

// TestReplicaConnectionIsUnavailable: a command refused a connection to a
// replica (a master demoted under a slot map not reloaded yet) never ran:
// answered 503, retry, as a pool timeout is, not 500.
func TestReplicaConnectionIsUnavailable(t *testing.T) {
	err := fmt.Errorf("seckill: buy: %w", failover.ErrReplicaConnection)
	if api := toAPI(err); api.Status != http.StatusServiceUnavailable || api.RetryAfter == 0 {
		t.Errorf("a refused replica connection is answered %+v, want 503 with Retry-After", api)
	}
}
