package ratelimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/ratelimit"
)

func ExampleLimiter_Allow() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	prefix := "example" + strconv.FormatUint(rand.Uint64(), 36)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	lim := ratelimit.New(rdb, ratelimit.Options{
		Prefix: prefix,
		// A frozen clock, for the example's output; in production the
		// scripts read the Redis server's clock.
		ScriptClock: ratelimit.ClockFunc(func() time.Time { return now }),
	})

	limit := ratelimit.PerSecond(2, 1) // one token every 500ms, two at once
	for range 3 {
		res, err := lim.Allow(ctx, "user:alice", limit)
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter, err)
	}
	now = now.Add(500 * time.Millisecond)
	res, _ := lim.Allow(ctx, "user:alice", limit)
	fmt.Println(res.Allowed, res.Remaining)

	rdb.Del(ctx, "{"+prefix+":rl:user:alice}:gcra:2:1000000:1")
	// Output:
	// true 1 0s <nil>
	// true 0 0s <nil>
	// false 0 500ms <nil>
	// true 0
}
