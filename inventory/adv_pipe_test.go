package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"

	"github.com/seckill/seckill/internal/waitfor"
	"github.com/seckill/seckill/inventory"
)

// TestRebuildOfALoneCallHoldsNoPipeline: a sale missing from Redis is
// rebuilt through the Loader, which may take long (the database is slow,
// another instance holds the rebuild lock, orders are in flight: up to
// InitTimeout). A buy of it that went to Redis as a lone call must not hold
// a pipeline while it waits, or every other sale's buys queue behind the
// rebuild: here both pipelines (the default) are taken by lone calls of two
// missing sales whose Loader is stuck, and a buy of a live sale must still
// be answered.
func TestRebuildOfALoneCallHoldsNoPipeline(t *testing.T) {
	entered := make(chan string, 2)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	loader := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
		entered <- id
		<-release
		return inventory.Snapshot{}, &inventory.NotFoundError{Kind: "sale", IDs: []string{id}}
	})
	r := newRig(t, backends[0], inventory.Options{Loader: loader})
	r.create(inventory.Sale{ID: "live", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})

	gone := make(chan error, 2)
	for i, id := range []string{"gone1", "gone2"} {
		go func() {
			_, err := r.eng.Buy(r.ctx, id, "u1", lines("A", 1), "")
			gone <- err
		}()
		// One at a time: each finds a pipeline free and goes alone.
		if got := <-entered; got != id {
			t.Fatalf("loader entered for %s, want %s (%d)", got, id, i)
		}
	}
	live := make(chan error, 1)
	go func() {
		_, err := r.eng.Buy(r.ctx, "live", "u1", lines("A", 1), "")
		live <- err
	}()
	var err error
	answered := true
	select {
	case err = <-live:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		answered = false
	}
	unblock()
	if !answered {
		<-live
		t.Fatal("the live sale's buy waited for two other sales' rebuilds (both pipelines held by their Loader)")
	}
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-gone; !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("missing sale: %v, want ErrNotFound", err)
		}
	}
	if held := r.held("live"); held["u1|A"] != 1 {
		t.Errorf("live: held %v", held)
	}
}

// TestSlowClusterNodeStallsNoOtherNode: on a Redis Cluster, the sales of
// one master do not wait for another master. Before cross-sale pipelines,
// each sale's calls went on their own; now every sale of the engine shares
// Coalesce.Pipelines pipelines, and a pipeline (or a lone call) to a master
// that does not answer (paused here with CLIENT PAUSE WRITE: a fork, a long
// script, a saturated link) holds one until it times out. Two calls to the
// stuck master take both pipelines (the default), and a buy of a sale on a
// healthy master must still be answered while they wait.
func TestSlowClusterNodeStallsNoOtherNode(t *testing.T) {
	r := newRig(t, backends[2], inventory.Options{})
	cc := r.rdb.(*redis.ClusterClient)
	// A client that waits for a reply as long as the node takes: the stall
	// is the node's, not cut short by the test's short read timeout.
	rdb := clusterclient.New(&redis.ClusterOptions{Addrs: cluster.Addrs(), ReadTimeout: 2 * time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	eng := inventory.New(rdb, inventory.Options{Prefix: r.prefix})
	if err := eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	var stuck *redis.Client
	var onStuck []string
	var healthy string
	for i := 0; len(onStuck) < 2 || healthy == ""; i++ {
		id := fmt.Sprintf("s%d", i)
		node, err := cc.MasterForKey(r.ctx, r.key(id, "sale"))
		if err != nil {
			t.Fatal(err)
		}
		if stuck == nil {
			stuck = node
		}
		switch {
		case node.Options().Addr == stuck.Options().Addr && len(onStuck) < 2:
			onStuck = append(onStuck, id)
		case node.Options().Addr != stuck.Options().Addr && healthy == "":
			healthy = id
		default:
			continue
		}
		r.create(inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
	}
	trips := countRoundTrips(rdb, r.prefix, "")
	if err := stuck.Do(r.ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause := func() {
		once.Do(func() {
			if err := stuck.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)

	stalled := make(chan error, 2)
	for _, id := range onStuck {
		go func() {
			_, err := eng.Buy(r.ctx, id, "u1", lines("A", 1), "")
			stalled <- err
		}()
		waitfor.Until(t, waitfor.Patience, "the buy sent to the paused master", func() error {
			if n := trips.aloneOf(id) + int(trips.pipelined.Load()); n < 1 {
				return fmt.Errorf("not sent yet")
			}
			return nil
		})
	}
	answered := make(chan error, 1)
	go func() {
		_, err := eng.Buy(r.ctx, healthy, "u1", lines("A", 1), "")
		answered <- err
	}()
	var err error
	ok := true
	select {
	case err = <-answered:
	case <-time.After(waitfor.Patience): // a liveness bound, not a timing
		ok = false
	}
	unpause()
	if !ok {
		err = <-answered
		t.Errorf("a buy of a sale on a healthy master waited for a paused master (both pipelines held by its calls)")
	}
	if err != nil {
		t.Error(err)
	}
	for range 2 {
		if err := <-stalled; err != nil {
			t.Errorf("a buy of the paused master, once unpaused: %v", err)
		}
	}
}
