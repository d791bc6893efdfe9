package lock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redistest"
)

// Many goroutines on several Lockers (one client each, like separate
// processes) increment a counter in Redis with a read-then-write that is
// only correct under mutual exclusion. Without the lock both checks fail:
// two holders inside at once, and lost increments.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t)
	prefix := redistest.Prefix(t, c)
	counterKey := "{" + prefix + ":data}:counter"
	const lockers, workers, rounds = 4, 16, 5

	ls := make([]*Locker, lockers)
	for i := range ls {
		var err error
		if ls[i], err = New(redistest.Standalone(t), Options{Prefix: prefix}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var inside atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			l := ls[w%lockers]
			for range rounds {
				lease, err := l.Acquire(ctx, "counter", WithRetry(2*time.Millisecond))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside the critical section at once", n)
				}
				v, err := c.Get(ctx, counterKey).Int()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Error(err)
				}
				time.Sleep(time.Millisecond) // widen the window a second holder would use
				if err := c.Set(ctx, counterKey, v+1, 0).Err(); err != nil {
					t.Error(err)
				}
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if got, _ := c.Get(ctx, counterKey).Int(); got != workers*rounds {
		t.Errorf("counter = %d after %d locked increments", got, workers*rounds)
	}
}

func TestAcquireHeldByAnother(t *testing.T) {
	t.Parallel()
	l, _ := ownLocker(t)
	ctx := context.Background()
	a := mustAcquire(t, l, "job")
	defer a.Release(ctx)

	if _, err := l.Acquire(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second Acquire: %v, want ErrNotAcquired", err)
	}
	// With retry, the wait ends with ctx, still saying why.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(wctx, "job", WithRetry(20*time.Millisecond))
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with retry until deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	// A waiter gets the lock once the holder releases it.
	got := make(chan *Lease)
	go func() {
		ls, err := l.Acquire(ctx, "job", WithRetry(10*time.Millisecond))
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	time.Sleep(50 * time.Millisecond)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	defer b.Release(ctx)
	if b.Fence() <= a.Fence() {
		t.Errorf("fence %d after %d", b.Fence(), a.Fence())
	}
}

// A release with the wrong token leaves the lock alone; a holder whose lock
// expired and passed to someone else gets ErrLost from Release and does not
// delete its successor's lock.
func TestReleaseByNonOwnerRefused(t *testing.T) {
	t.Parallel()
	l, c := sharedLocker(t)
	ctx := context.Background()

	a := mustAcquire(t, l, "job")
	if r := run(ctx, c, 0, releaseScript, a.keys.slice()[:1], newToken()); !r.refused() {
		t.Fatalf("release.lua with a stranger's token: %+v, want refused", r)
	}
	if holder(t, c, a) != a.Token() {
		t.Fatal("a stranger's release deleted the lock")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	old := mustAcquire(t, l, "job", WithTTL(100*time.Millisecond), WithoutRenewal())
	if err := ended(t, old); !errors.Is(err, ErrLost) {
		t.Fatalf("lease without renewal ended with %v, want ErrLost", err)
	}
	gone(t, c, old.keys.lock())
	next := mustAcquire(t, l, "job")
	defer next.Release(ctx)
	if err := old.Release(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("late Release: %v, want ErrLost", err)
	}
	if holder(t, c, next) != next.Token() {
		t.Error("the expired holder's Release deleted its successor's lock")
	}
}

// Once a lock has expired, extending it with the old token changes nothing,
// whether the key is gone or belongs to a new holder.
func TestExtendAfterExpiryRefused(t *testing.T) {
	t.Parallel()
	l, c := sharedLocker(t)
	ctx := context.Background()
	old := mustAcquire(t, l, "job", WithTTL(100*time.Millisecond), WithoutRenewal())
	gone(t, c, old.keys.lock())

	extend := func() reply {
		return run(ctx, c, 0, extendScript, old.keys.slice(), old.Token(), int64(60_000), 0)
	}
	if r := extend(); !r.refused() {
		t.Fatalf("extend.lua after expiry: %+v, want refused", r)
	}
	if n, _ := c.Exists(ctx, old.keys.lock()).Result(); n != 0 {
		t.Fatal("extend.lua revived an expired lock")
	}

	next := mustAcquire(t, l, "job", WithTTL(10*time.Second))
	defer next.Release(ctx)
	if r := extend(); !r.refused() {
		t.Fatalf("extend.lua on a successor's lock: %+v, want refused", r)
	}
	if pttl := c.PTTL(ctx, next.keys.lock()).Val(); pttl > 10*time.Second {
		t.Errorf("successor's lock TTL became %v: extended by the old owner", pttl)
	}
	if err := old.Extend(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("Lease.Extend after expiry: %v, want ErrLost", err)
	}
	if old.Context().Err() == nil {
		t.Error("lease context alive after its lock expired")
	}
}

// The watchdog keeps the lock for several TTLs while work goes on; nobody
// else gets it meanwhile.
func TestWatchdogKeepsLockPastTTL(t *testing.T) {
	t.Parallel()
	l, c := ownLocker(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	ls := mustAcquire(t, l, "job", WithTTL(ttl))
	first := ls.Until()

	for end := time.Now().Add(3 * ttl / 2); time.Now().Before(end); time.Sleep(ttl / 8) {
		stillHeld(t, ls, c)
	}
	if _, err := l.Acquire(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire by another after %v: %v, want ErrNotAcquired", 3*ttl/2, err)
	}
	if !ls.Until().After(first) {
		t.Error("Until did not move forward")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(ls.Context()), ErrReleased) {
		t.Errorf("cause after Release: %v, want ErrReleased", context.Cause(ls.Context()))
	}
	if holder(t, c, ls) != "" {
		t.Error("lock still there after Release")
	}
}

// When the lock disappears or changes hands behind the holder's back, the
// next renewal cancels the lease's context: not the TTL deadline.
func TestWatchdogCancelsOnLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steal func(c *redis.Client, key string) error
		after string // the lock's value afterwards
	}{
		{"deleted", func(c *redis.Client, key string) error {
			return c.Del(context.Background(), key).Err()
		}, ""},
		{"overwritten", func(c *redis.Client, key string) error {
			return c.Set(context.Background(), key, "intruder", time.Minute).Err()
		}, "intruder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := ownLocker(t)
			ctx := context.Background()
			ls := mustAcquire(t, l, "job", WithTTL(3*time.Second))
			if err := tc.steal(c, ls.keys.lock()); err != nil {
				t.Fatal(err)
			}
			cause := ended(t, ls)
			if !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), "no longer hold") {
				t.Fatalf("cause %v, want ErrLost from a renewal that found another owner", cause)
			}
			if err := ls.Release(ctx); !errors.Is(err, ErrLost) {
				t.Errorf("Release after loss: %v, want ErrLost", err)
			}
			if h := holder(t, c, ls); h != tc.after {
				t.Errorf("lock holds %q after the loser's cleanup, want %q", h, tc.after)
			}
		})
	}

	t.Run("extend", func(t *testing.T) {
		l, c := ownLocker(t)
		ls := mustAcquire(t, l, "job", WithoutRenewal())
		c.Del(context.Background(), ls.keys.lock())
		if err := ls.Extend(context.Background()); !errors.Is(err, ErrLost) {
			t.Fatalf("Extend: %v, want ErrLost", err)
		}
		if ls.Context().Err() == nil {
			t.Fatal("Extend found the lock gone but the context is alive")
		}
	})
}

// When Redis dies, renewals fail and the lease is given up once the TTL
// could have run out.
func TestWatchdogCancelsWhenRedisKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := nodeClient(t, srv.Addr())
	l, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ls := mustAcquire(t, l, "job", WithTTL(600*time.Millisecond))
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	cause := ended(t, ls)
	if !errors.Is(cause, ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	if now := time.Now(); now.Before(ls.Until()) {
		t.Errorf("lease given up at %v, before its Until %v", now, ls.Until())
	}
	if err := ls.Release(context.Background()); !errors.Is(err, ErrLost) {
		t.Errorf("Release: %v, want ErrLost", err)
	}
}

// Fences grow with every acquisition, across Lockers, and a Guard refuses a
// write from a holder that was superseded.
func TestFences(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t)
	prefix := redistest.Prefix(t, c)
	ctx := context.Background()
	var ls [2]*Locker
	for i := range ls {
		var err error
		if ls[i], err = New(redistest.Standalone(t), Options{Prefix: prefix}); err != nil {
			t.Fatal(err)
		}
	}
	var last Fence
	for i := range 20 {
		lease := mustAcquire(t, ls[i%2], "job")
		if lease.Fence() <= last {
			t.Fatalf("acquisition %d got fence %d after %d", i, lease.Fence(), last)
		}
		last = lease.Fence()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	g, err := NewGuard(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// old is paused past its TTL (simulated: no renewal); next takes over.
	old := mustAcquire(t, ls[0], "job", WithTTL(50*time.Millisecond), WithoutRenewal())
	gone(t, c, old.keys.lock())
	next := mustAcquire(t, ls[1], "job")
	defer next.Release(ctx)
	if err := g.Set(ctx, "stock", next.Fence(), "100"); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "stock", next.Fence(), "99"); err != nil {
		t.Fatalf("second write with the same fence: %v", err)
	}
	err = g.Set(ctx, "stock", old.Fence(), "0") // old wakes up
	var stale *StaleFenceError
	if !errors.Is(err, ErrStaleFence) || !errors.As(err, &stale) || stale.Highest != next.Fence() || stale.Fence != old.Fence() {
		t.Fatalf("stale write: %v, want StaleFenceError{Fence: %d, Highest: %d}", err, old.Fence(), next.Fence())
	}
	v, f, err := g.Get(ctx, "stock")
	if err != nil || v != "99" || f != next.Fence() {
		t.Fatalf("Get = %q, %d, %v; want 99, %d", v, f, err, next.Fence())
	}
	if v, f, err := g.Get(ctx, "never-written"); err != nil || v != "" || f != 0 {
		t.Errorf("Get of an unwritten resource = %q, %d, %v", v, f, err)
	}
	if !next.Fence().Admits(old.Fence()) || old.Fence().Admits(next.Fence()) || Fence(0).Admits(0) {
		t.Error("Fence.Admits disagrees with the guard")
	}
}

// A retried acquire whose first reply was lost finds its own token and
// reports the fence it got, without taking a second one.
func TestAcquireScriptIdempotent(t *testing.T) {
	t.Parallel()
	l, c := sharedLocker(t)
	ctx := context.Background()
	ls := mustAcquire(t, l, "job", WithoutRenewal())
	defer ls.Release(ctx)
	r := run(ctx, c, 0, acquireScript, ls.keys.slice(), ls.Token(), int64(60_000))
	if !r.ok() || Fence(r.num) != ls.Fence() {
		t.Fatalf("repeated acquire.lua: %+v, want ok with fence %d", r, ls.Fence())
	}
	if n, _ := c.Get(ctx, ls.keys[1]).Int64(); Fence(n) != ls.Fence() {
		t.Errorf("counter %d after a repeated acquire, want %d", n, ls.Fence())
	}
}

// A corrupt counter is reported and the lock is not taken.
func TestCorruptCounter(t *testing.T) {
	t.Parallel()
	l, c := sharedLocker(t)
	ctx := context.Background()
	keys := keysFor(l.prefix, "job")
	c.Set(ctx, keys[1], "not a number", 0)
	_, err := l.Acquire(ctx, "job")
	var ne *NodeError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "integer") {
		t.Fatalf("Acquire with a corrupt counter: %v", err)
	}
	if n, _ := c.Exists(ctx, keys.lock()).Result(); n != 0 {
		t.Error("lock taken although the fence could not be issued")
	}
}

// After SCRIPT FLUSH (a restart, a failover) the scripts are sent again.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := nodeClient(t, srv.Addr())
	l, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ls := mustAcquire(t, l, "job")
	c.ScriptFlush(ctx)
	if err := ls.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	c.ScriptFlush(ctx)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.ScriptFlush(ctx)
	mustAcquire(t, l, "job").Release(ctx)
}

// Bad input is refused with ErrInvalid before anything reaches Redis.
func TestInvalidInput(t *testing.T) {
	t.Parallel()
	l, c := sharedLocker(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"", nil},
		{"has space", nil},
		{"has{brace}", nil},
		{"tab\there", nil},
		{"\xff\xfe", nil},
		{strings.Repeat("x", 201), nil},
		{"ok", []Option{WithTTL(0)}},
		{"ok", []Option{WithTTL(-time.Second)}},
		{"ok", []Option{WithTTL(9 * time.Millisecond)}},
		{"ok", []Option{WithRetry(0)}},
		{"ok", []Option{WithTTL(time.Second), WithRetry(-1)}},
	} {
		if _, err := l.Acquire(ctx, tc.name, tc.opts...); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire(%q, %d options): %v, want ErrInvalid", tc.name, len(tc.opts), err)
		}
	}
	if keys, _, _ := c.Scan(ctx, 0, "*{"+l.prefix+":*", 1000).Result(); len(keys) != 0 {
		t.Errorf("invalid calls wrote %v", keys)
	}

	for i, err := range []error{
		func() error { _, err := New(nil, Options{}); return err }(),
		func() error { _, err := NewQuorum(nil, Options{}); return err }(),
		func() error { _, err := NewQuorum([]Client{c, nil, c}, Options{}); return err }(),
		func() error { _, err := New(c, Options{Prefix: "a}b"}); return err }(),
		func() error { _, err := New(c, Options{DriftFactor: -0.1}); return err }(),
		func() error { _, err := New(c, Options{DriftFactor: 0.9}); return err }(),
		func() error { _, err := NewGuard(nil, ""); return err }(),
		func() error { _, err := NewGuard(c, "white space"); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("constructor case %d: %v, want ErrInvalid", i, err)
		}
	}

	g, _ := NewGuard(c, l.prefix)
	for _, f := range []Fence{0, -1} {
		if err := g.Set(ctx, "stock", f, "x"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Guard.Set with fence %d: %v, want ErrInvalid", f, err)
		}
	}
	if err := g.Set(ctx, "", 1, "x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Guard.Set with empty resource: %v", err)
	}
	if keys, _, _ := c.Scan(ctx, 0, "*{"+l.prefix+":*", 1000).Result(); len(keys) != 0 {
		t.Errorf("invalid guard calls wrote %v", keys)
	}
}

func TestReleaseTwice(t *testing.T) {
	t.Parallel()
	l, _ := sharedLocker(t)
	ctx := context.Background()
	ls := mustAcquire(t, l, "job")
	for i := range 2 {
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	if err := ls.Extend(ctx); !errors.Is(err, ErrReleased) {
		t.Errorf("Extend after Release: %v, want ErrReleased", err)
	}
}
