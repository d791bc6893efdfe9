package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/ratelimit"
)

// Shards enforces each key's limit on its own (a burst, then refusals
// until the clock moves), keys apart, and stays within its bound of keys.
func TestShards(t *testing.T) {
	clock := &testClock{now: t0}
	s := ratelimit.NewShards(8, ratelimit.LocalOptions{MaxKeys: 64, Clock: clock})
	ctx := context.Background()
	limit := ratelimit.PerSecond(10, 9) // 10 at once, then one a 100 ms
	allowed := func(key string) bool {
		t.Helper()
		res, err := s.Allow(ctx, key, limit)
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	for i := range 10 {
		if !allowed("q:alice") {
			t.Fatalf("hit %d of a burst of 10 refused", i+1)
		}
	}
	res, err := s.Allow(ctx, "q:alice", limit)
	if err != nil || res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("the 11th hit at once: %+v, %v", res, err)
	}
	if !allowed("q:bob") {
		t.Fatal("another key refused for alice's hits")
	}
	clock.Set(100 * time.Millisecond)
	if !allowed("q:alice") {
		t.Fatal("refused after a token came back")
	}
	if allowed("q:alice") {
		t.Fatal("two hits on one token")
	}
	for i := range 1000 {
		allowed("q:u" + strconv.Itoa(i))
	}
	if n := s.Len(); n > 64 || n < 8 {
		t.Fatalf("%d keys remembered, want at most 64 (8 shards of 8)", n)
	}
	if _, err := s.Allow(ctx, "", limit); err == nil {
		t.Fatal("an empty key taken")
	}
}
