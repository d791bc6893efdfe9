package service_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestStartRecoversAPromotedRedisWithItsOwnConsumer: an instance starts on
// a Redis promoted from a replica, whose stream holds orders not yet in the
// database, and nobody else runs. Its first tick, before it serves, finds
// the promotion and repairs Redis from the database; the repair waits for
// the stream to drain into the database, and only this instance's consumer
// drains it. So the consumer must be reading by then: Start returns with
// Redis selling again, not with the repair given up (and the instance in
// "recovering", selling nothing, until its next tick). (eb648ca ran that
// first tick before the consumer started, so that the heartbeat names the
// consumer before it holds an entry.)
//
// The start-up itself must not trip over the promotion either: its first
// ping may use the held-back Redis, and so may the scripts' load after the
// database opens, however long that takes. With the node checked again
// before every command (NodeRecheck 1ns), the load always comes after the
// ping's check ran out, as it did in CI when opening the database took
// longer than the 100 ms tick ("load buy script: redis restarted or
// failed over").
func TestStartRecoversAPromotedRedisWithItsOwnConsumer(t *testing.T) {
	for _, recheck := range []time.Duration{0, time.Nanosecond} {
		t.Run(fmt.Sprint("recheck=", recheck), func(t *testing.T) { testStartRecoversAPromotedRedis(t, recheck) })
	}
}

func testStartRecoversAPromotedRedis(t *testing.T, recheck time.Duration) {
	ctx := context.Background()
	old, srv := redistest.StartServer(t), redistest.StartServer(t)
	rdb := srv.Client(t)
	promoteAfterSync(t, old, rdb)

	cfg := degradedConfig(srv.Addr())
	cfg.DatabaseURL = dbtest.PostgresURL(t)
	// The repair waits up to ten grace periods for the stream to drain:
	// ample for three orders when the consumer reads.
	cfg.DegradedGrace = time.Second
	cfg.NodeRecheck = recheck
	// An instance without degraded mode (no ticks, no repair) makes the
	// sale, its consumer group, and goes.
	off := cfg
	off.DegradedTick = -1
	a := startApp(t, off)
	a.createSale("s1", 1, "A", int64(10))
	a.settle("s1")
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.svc.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	// Orders that reach the stream while no consumer reads it.
	eng := inventory.New(rdb, inventory.Options{Prefix: "seckill"})
	for i := range 3 {
		if _, err := eng.Buy(ctx, "s1", fmt.Sprint("u", i), []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
	}

	b := startApp(t, cfg)
	if m := b.sellMode(); m["mode"] != "redis" {
		t.Errorf("right after Start: %v; want redis selling (repaired by the first tick)", m)
	}
	b.settle("s1")
	if st := b.state("s1"); st.stock[0].Remaining != 7 {
		t.Errorf("after the repair: %+v, want 7 left", st.stock)
	}
}

// promoteAfterSync makes replica (a client of another server) a replica of
// master, waits until it is in sync, and promotes it: a master with a
// previous replication id, as a failover leaves it.
func promoteAfterSync(t *testing.T, master *redistest.Server, replica *redis.Client) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(master.Addr())
	if err := replica.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the replica in sync", func() error {
		if info := replica.Info(ctx, "replication").Val(); !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("%s", info)
		}
		return nil
	})
	if err := replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}
