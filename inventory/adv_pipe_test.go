package inventory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
