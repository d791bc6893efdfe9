package failover_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestUnansweredNodeCheckDoesNotCountAsPassed: a node check (NodeHook)
// whose INFO goes unanswered checked nothing, so it must not hold for
// Recheck as a check that passed. The first command due a check comes with
// its context already ended (a buyer who hung up: an HTTP request's
// context), so its INFO fails before it is sent. The node, a master
// reached over a connection of the client's pool, is then made a replica
// and promoted again (a master with a new replication id, maybe behind the
// one it took over from). The next command over that connection must be
// refused until a recovery repairs the node; had the failed check counted,
// nothing checks the node again for an hour (Recheck) and a buy would be
// sold from it.
func TestUnansweredNodeCheckDoesNotCountAsPassed(t *testing.T) {
	ctx := context.Background()
	node, other := redistest.StartServer(t), redistest.StartServer(t)
	f := failover.New(failover.Config{Tick: time.Hour, Recheck: time.Hour})
	c := redis.NewClient(&redis.Options{Addr: node.Addr(), PoolSize: 1, OnConnect: f.OnConnect})
	t.Cleanup(func() { _ = c.Close() })
	// The pool's connection, opened and checked (OnConnect) while the node
	// is a plain master; the node hook has not checked it yet.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.AddHook(f.NodeHook(c))

	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Ping(gone).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("ping with an ended context: %v, want context.Canceled", err)
	}

	promote(t, node.Client(t), other.Addr())

	if err := c.Ping(ctx).Err(); !errors.Is(err, failover.ErrRedisRestarted) {
		t.Errorf("a command on the promoted node over its old connection: %v, want ErrRedisRestarted", err)
	}
	if !f.HeldBack() {
		t.Error("the seller does not hold Redis back after its node was promoted")
	}
}

// promote makes the node rc talks to a replica of master, then a master
// again: a master promoted from a replica (second_repl_offset set).
func promote(t *testing.T, rc *redis.Client, master string) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := strings.Cut(master, ":")
	if err := rc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the node replicates "+master, func() error {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = errors.New("link not up")
		}
		return err
	})
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	info, err := rc.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") || strings.Contains(info, "second_repl_offset:-1") {
		t.Fatalf("the node is not a promoted master: %v\n%s", err, info)
	}
}
