package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/faultnet"
	"github.com/seckill/seckill/internal/waitfor"
)

func quorumLocker(t *testing.T, clients []*redis.Client) *Locker {
	t.Helper()
	l, err := NewQuorum(asClients(clients), Options{Prefix: "q"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// With two of five nodes down the lock is taken, renewed past its TTL and
// released on the three that are up.
func TestQuorumMinorityDown(t *testing.T) {
	t.Parallel()
	servers, clients := startNodes(t, 5)
	l := quorumLocker(t, clients)
	servers[1].Kill()
	servers[3].Kill()
	ctx := context.Background()
	const ttl = 2 * time.Second

	ls := mustAcquire(t, l, "job", WithTTL(ttl))
	if ls.Fence() != 1 {
		t.Errorf("first fence %d, want 1", ls.Fence())
	}
	time.Sleep(3 * ttl / 2)
	stillHeld(t, ls, clients[0], clients[2], clients[4])
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 4} {
		if h := holder(t, clients[i], ls); h != "" {
			t.Errorf("node %d still holds the lock after Release", i)
		}
	}
}

// With three of five nodes down no lock is granted, and the nodes that
// said yes are released again.
func TestQuorumMajorityDown(t *testing.T) {
	t.Parallel()
	servers, clients := startNodes(t, 5)
	l := quorumLocker(t, clients)
	for _, i := range []int{0, 2, 4} {
		servers[i].Kill()
	}
	_, err := l.Acquire(context.Background(), "job", WithTTL(time.Second))
	if err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire with 2 of 5 nodes up: %v, want a failure that is not ErrNotAcquired", err)
	}
	key := keysFor("q", "job").lock()
	for _, i := range []int{1, 3} {
		if n, _ := clients[i].Exists(context.Background(), key).Result(); n != 0 {
			t.Errorf("node %d kept the lock of the failed attempt", i)
		}
	}
}

// Another owner holds two of three nodes: the attempt wins only the third,
// fails with ErrNotAcquired and leaves the third empty. The refusing nodes
// answer slowly, so the grant is always counted before the attempt fails.
func TestQuorumReleasesPartialAcquisition(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 3)
	slow := []*slowReplies{{Client: clients[0]}, {Client: clients[1]}}
	for _, s := range slow {
		s.delay.Store(int64(100 * time.Millisecond))
	}
	l, err := NewQuorum([]Client{slow[0], slow[1], clients[2]}, Options{Prefix: "q"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := keysFor("q", "job").lock()
	for _, i := range []int{0, 1} {
		clients[i].Set(ctx, key, "other", time.Minute)
	}
	if _, err := l.Acquire(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire: %v, want ErrNotAcquired", err)
	}
	if n, _ := clients[2].Exists(ctx, key).Result(); n != 0 {
		t.Error("node 2 kept the lock of the failed attempt")
	}
	for _, i := range []int{0, 1} {
		if v := clients[i].Get(ctx, key).Val(); v != "other" {
			t.Errorf("node %d: the other owner's lock became %q", i, v)
		}
	}
}

// A node that hangs (accepts, never answers) neither blocks Acquire nor
// keeps the watchdog from renewing on the other two.
func TestQuorumHungNode(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 2)
	hung := redis.NewClient(&redis.Options{Addr: blackHole(t), MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { hung.Close() })
	l, err := NewQuorum([]Client{clients[0], hung, clients[1]}, Options{Prefix: "q"})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	ls := mustAcquire(t, l, "job", WithTTL(ttl))
	time.Sleep(3 * ttl / 2)
	stillHeld(t, ls, clients...)
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Two releases are confirmed; the hung node's is cut off by rctx.
	if err := ls.Release(rctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A node that restarts empty denies holding the lock; that is one denial of
// three and the lease stands. When a majority is gone, it ends. The two
// healthy nodes answer slowly, so the denial is always counted first.
func TestQuorumLossWhileHeld(t *testing.T) {
	t.Parallel()
	servers, clients := startNodes(t, 3)
	slow := []*slowReplies{{Client: clients[1]}, {Client: clients[2]}}
	l, err := NewQuorum([]Client{clients[0], slow[0], slow[1]}, Options{Prefix: "q"})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	ls := mustAcquire(t, l, "job", WithTTL(ttl))
	everywhere(t, clients, ls)

	servers[0].Kill()
	if err := servers[0].Restart(); err != nil { // no persistence: comes back empty
		t.Fatal(err)
	}
	ctx := context.Background()
	// Each failed PING drops a pooled connection the kill broke.
	waitfor.Until(t, patience, "node 0 answers after its restart", func() error { return clients[0].Ping(ctx).Err() })
	for _, s := range slow {
		s.delay.Store(int64(50 * time.Millisecond))
	}
	if err := ls.Extend(ctx); err != nil {
		t.Fatalf("Extend with one node wiped: %v", err)
	}
	time.Sleep(3 * ttl / 2)
	stillHeld(t, ls, clients[1], clients[2])

	clients[1].Del(ctx, ls.keys.lock()) // a second node loses it: no majority left
	// Extend until a round gets its answers in (a starved round can time out).
	for err := ls.Extend(ctx); !errors.Is(err, ErrLost); err = ls.Extend(ctx) {
		if err == nil {
			t.Fatal("Extend succeeded with two of three nodes wiped")
		}
	}
	if cause := context.Cause(ls.Context()); !errors.Is(cause, ErrLost) || !strings.Contains(cause.Error(), "no longer hold") {
		t.Fatalf("cause %v, want ErrLost from the nodes' denials", cause)
	}
}

func TestQuorumMajorityKilledWhileHeld(t *testing.T) {
	t.Parallel()
	servers, clients := startNodes(t, 3)
	l := quorumLocker(t, clients)
	ls := mustAcquire(t, l, "job", WithTTL(600*time.Millisecond))
	servers[0].Kill()
	servers[2].Kill()
	if cause := ended(t, ls); !errors.Is(cause, ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
}

// Counters on independent nodes drift apart. The fence of a quorum lease is
// the highest counter of its majority, and that value is written back to
// the majority, so the next holder, whose majority overlaps, gets a higher
// one even if it never talks to the node that had the high counter.
func TestQuorumFencesIncrease(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 3)
	l := quorumLocker(t, clients)
	ctx := context.Background()
	keys := keysFor("q", "job")
	block := func(i int) { clients[i].Set(ctx, keys.lock(), "other", time.Minute) }
	unblock := func(i int) { clients[i].Del(ctx, keys.lock()) }

	clients[0].Set(ctx, keys[1], 10, 0) // node 0 has issued many fences before
	block(2)
	a := mustAcquire(t, l, "job") // granted by nodes 0 and 1: counters 11 and 1
	if a.Fence() != 11 {
		t.Fatalf("fence %d, want 11 (the highest counter of the majority)", a.Fence())
	}
	if n, _ := clients[1].Get(ctx, keys[1]).Int64(); n != 11 {
		t.Fatalf("node 1 counter %d after the acquire, want it raised to 11", n)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	unblock(2)
	block(0)
	b := mustAcquire(t, l, "job") // granted by nodes 1 and 2 only
	defer b.Release(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("next holder got fence %d after %d", b.Fence(), a.Fence())
	}
}

// everywhere waits until every node holds ls's lock: a node may grant it
// after Acquire returned with a quorum.
func everywhere(t *testing.T, clients []*redis.Client, ls *Lease) {
	t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(5 * time.Millisecond) {
		n := 0
		for _, c := range clients {
			if holder(t, c, ls) == ls.Token() {
				n++
			}
		}
		if n == len(clients) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes hold the lock after %v", n, len(clients), patience)
		}
	}
}

// One node wiped and one cut off leave no quorum to confirm a renewal, but
// only one denial: the lease is still valid until Until() and keeps trying.
// When the cut node comes back with its data, renewals succeed again.
func TestQuorumRidesOutTransientFailure(t *testing.T) {
	t.Parallel()
	servers, clients := startNodes(t, 3)
	proxy := faultnet.Start(t, servers[2].Addr())
	viaProxy := nodeClient(t, proxy.Addr())
	l, err := NewQuorum([]Client{clients[0], clients[1], viaProxy}, Options{Prefix: "q"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ls := mustAcquire(t, l, "job", WithTTL(5*time.Second), WithoutRenewal())
	everywhere(t, clients, ls)

	clients[0].Del(ctx, ls.keys.lock())
	proxy.Cut()
	err = ls.Extend(ctx)
	if err == nil || errors.Is(err, ErrLost) {
		t.Fatalf("Extend with one node wiped and one cut off: %v, want a non-ErrLost failure", err)
	}
	if ls.Context().Err() != nil {
		t.Fatalf("lease ended although no quorum denied it: %v", context.Cause(ls.Context()))
	}
	proxy.Restore()
	// Each failed PING drops a pooled connection the cut broke.
	waitfor.Until(t, patience, "node 2 answers after Restore", func() error { return viaProxy.Ping(ctx).Err() })
	if err := ls.Extend(ctx); err != nil {
		t.Fatalf("Extend after the node came back: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
