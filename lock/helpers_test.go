package lock

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redistest"
)

// patience bounds every wait for something that must happen eventually
// (a context cancelled, a key expired). It is never a claim about speed:
// the tests fail only if the event does not happen at all.
//
// The tests that hold a lock across several TTLs use TTLs of seconds: on a
// loaded machine a starved watchdog correctly gives a short lease up.
const patience = 15 * time.Second

// sharedLocker returns a Locker on the shared Redis under a fresh prefix
// whose keys are removed after the test, and the client it uses.
func sharedLocker(t *testing.T) (*Locker, *redis.Client) {
	t.Helper()
	c := redistest.Standalone(t)
	l, err := New(c, Options{Prefix: redistest.Prefix(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// ownLocker returns a Locker on a redis-server of the test's own: for tests
// whose outcome depends on renewals arriving within a TTL, which the shared
// Redis cannot promise while other packages benchmark against it.
func ownLocker(t *testing.T) (*Locker, *redis.Client) {
	t.Helper()
	c := nodeClient(t, redistest.StartServer(t).Addr())
	l, err := New(c, Options{Prefix: "own"})
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// nodeClient is a client for a throwaway redis-server that fails fast once
// the server is gone: no retries, short timeouts.
func nodeClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:               addr,
		MaxRetries:         -1,
		DialerRetries:      1,
		DialerRetryTimeout: 10 * time.Millisecond,
		DialTimeout:        300 * time.Millisecond,
		ReadTimeout:        time.Second,
		WriteTimeout:       time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startNodes starts n independent redis-servers and returns them with a
// client for each.
func startNodes(t *testing.T, n int) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	servers := make([]*redistest.Server, n)
	clients := make([]*redis.Client, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i] = redistest.StartServer(t) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, s := range servers {
		clients[i] = nodeClient(t, s.Addr())
	}
	return servers, clients
}

func asClients(cs []*redis.Client) []Client {
	out := make([]Client, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// blackHole listens on loopback, accepts connections and never answers:
// a Redis node that hangs (SIGSTOP, a dead network path without RST).
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// ended waits until the lease's context is done and returns its cause.
func ended(t *testing.T, ls *Lease) error {
	t.Helper()
	select {
	case <-ls.Context().Done():
		return context.Cause(ls.Context())
	case <-time.After(patience):
		t.Fatalf("lease %q still not ended after %v", ls.Name(), patience)
		return nil
	}
}

// gone waits until key no longer exists on c.
func gone(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(patience); ; {
		n, err := c.Exists(ctx, key).Result()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still there after %v (err %v)", key, patience, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holder returns the owner token in the lock's key on c ("" if none).
func holder(t *testing.T, c *redis.Client, ls *Lease) string {
	t.Helper()
	v, err := c.Get(context.Background(), ls.keys.lock()).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mustAcquire takes a lock that is free, retrying (the machine may be so
// loaded that an attempt outlasts a short TTL, which correctly fails it).
func mustAcquire(t *testing.T, l *Locker, name string, opts ...Option) *Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ls, err := l.Acquire(ctx, name, append(opts, WithRetry(10*time.Millisecond))...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return ls
}

// stillHeld fails the test unless ls is alive and every node in clients
// holds its token. If a key is gone while the lease still claims to be
// valid, the lease lied, which is reported as such.
func stillHeld(t *testing.T, ls *Lease, clients ...*redis.Client) {
	t.Helper()
	for i, c := range clients {
		if h := holder(t, c, ls); h != ls.Token() {
			if time.Now().Before(ls.Until()) {
				t.Fatalf("node %d holds %q while the lease claims the lock until %v: the lease lies", i, h, ls.Until())
			}
			t.Fatalf("node %d holds %q: lease lost (%v)", i, h, context.Cause(ls.Context()))
		}
	}
	if err := ls.Context().Err(); err != nil {
		t.Fatalf("lease ended: %v", context.Cause(ls.Context()))
	}
}
