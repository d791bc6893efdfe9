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

// TestNodeCheckOnAOneConnectionPool: a client whose pool holds one
// connection per node (the service's probe) opens its connection for a
// command whose context has no deadline (go-redis looks a Cluster's
// command policies up so, under a lock every later command waits for).
// The connection's set-up (HELLO, then OnConnect's INFO) goes through the
// node hook; were the hook to check the node there, it would ask the
// client for a second connection while the pool's only one is being made,
// and wait the pool's timeout (here an hour): the degraded mode's ping
// behind it took Redis for down long after it was back
// (TestClusterMasterKilledMidSale). OnConnect checks a new connection
// itself; the hook checks the node on its next command.
func TestNodeCheckOnAOneConnectionPool(t *testing.T) {
	ctx := context.Background()
	master, node := redistest.StartServer(t), redistest.StartServer(t)
	// A replica: every check of it fails (OnConnect refuses the connection
	// its INFO would go over), so the hook checks again on the next
	// command, the set-up's HELLO included.
	host, port, _ := strings.Cut(master.Addr(), ":")
	if err := node.Client(t).Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	f := failover.New(failover.Config{Tick: time.Hour, Recheck: time.Hour})
	c := redis.NewClient(&redis.Options{Addr: node.Addr(), PoolSize: 1, MaxActiveConns: 1, PoolTimeout: time.Hour,
		OnConnect: f.OnConnect})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(f.NodeHook(c))

	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	select {
	case err := <-done:
		if !errors.Is(err, failover.ErrReplicaConnection) {
			t.Fatalf("a command on a replica: %v, want ErrReplicaConnection", err)
		}
	case <-time.After(waitfor.Patience): // a bound for a command that would wait an hour, not a timing
		t.Fatal("the command waits for a second connection of a one-connection pool")
	}
}
