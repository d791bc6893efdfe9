package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lock"
)

// exampleRedis returns a client for the local Redis, a fresh key prefix, and
// a function that deletes the prefix's keys.
func exampleRedis() (*redis.Client, string, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	prefix := "example" + strconv.FormatUint(rand.Uint64(), 36)
	return rdb, prefix, func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	}
}

func ExampleLocker_Acquire() {
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()
	ctx := context.Background()
	locker, _ := lock.New(rdb, lock.Options{Prefix: prefix})

	lease, err := locker.Acquire(ctx, "rebuild:sale42", lock.WithTTL(5*time.Second), lock.WithRetry(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	// Somebody else tries meanwhile.
	_, err = locker.Acquire(ctx, "rebuild:sale42")
	fmt.Println("second acquire:", errors.Is(err, lock.ErrNotAcquired))

	// Work under lease.Context(): it is cancelled if the lock is lost, and
	// the watchdog renews the lock every TTL/3 while the work goes on.
	work := func(ctx context.Context, fence lock.Fence) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx) // wraps lock.ErrLost
		default:
			fmt.Println("working, fence > 0:", fence > 0)
			return nil
		}
	}
	if err := work(lease.Context(), lease.Fence()); err != nil {
		fmt.Println(err)
	}
	fmt.Println("release:", lease.Release(ctx))
	fmt.Println("cause:", context.Cause(lease.Context()))
	// Output:
	// second acquire: true
	// working, fence > 0: true
	// release: <nil>
	// cause: lock: released
}

// A holder that stalls past its TTL (GC pause, SIGSTOP) may wake up and
// write after its successor did. The lock cannot stop that; the fence can.
func ExampleGuard() {
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()
	ctx := context.Background()
	locker, _ := lock.New(rdb, lock.Options{Prefix: prefix})
	guard, _ := lock.NewGuard(rdb, prefix)

	slow, err := locker.Acquire(ctx, "restock:sale42",
		lock.WithTTL(200*time.Millisecond), lock.WithoutRenewal(), lock.WithRetry(5*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	<-slow.Context().Done() // slow stalls; its lock expires

	next, err := locker.Acquire(ctx, "restock:sale42", lock.WithRetry(5*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer next.Release(ctx)
	fmt.Println("next fence is larger:", next.Fence() > slow.Fence())
	fmt.Println("next writes:", guard.Set(ctx, "stock:sale42:phone", next.Fence(), "100"))

	err = guard.Set(ctx, "stock:sale42:phone", slow.Fence(), "90") // slow wakes up
	fmt.Println("slow writes:", errors.Is(err, lock.ErrStaleFence))

	value, fence, _ := guard.Get(ctx, "stock:sale42:phone")
	fmt.Println("stored:", value, fence == next.Fence())
	// Output:
	// next fence is larger: true
	// next writes: <nil>
	// slow writes: true
	// stored: 100 true
}

// Quorum mode over independent Redis nodes (Redlock). Not run: it needs
// three servers.
func ExampleNewQuorum() {
	var nodes []lock.Client
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 200 * time.Millisecond}))
	}
	locker, err := lock.NewQuorum(nodes, lock.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "reconcile", lock.WithTTL(10*time.Second), lock.WithRetry(100*time.Millisecond))
	if err != nil {
		return // held elsewhere, or no majority of nodes reachable
	}
	defer lease.Release(ctx)
	_ = lease.Fence() // the highest counter of the majority; see the package doc
}
