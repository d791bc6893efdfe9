package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
)

// TestRebuildAfterStreamTrimmed: every order is stored and acknowledged,
// and the consumer has trimmed them all from the stream. Applied reports
// the stream's last generated id (the stream has no entry left to name), so
// a sale lost from Redis now is rebuilt from the database at once, with
// the units of its orders sold.
func TestRebuildAfterStreamTrimmed(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(5)
		r.consumer("c1", r.db, pipeline.Options{BatchSize: 50})
		r.settled(ids) // stored, acknowledged and trimmed

		info, err := r.rdb.XInfoStream(r.ctx, r.eng.EventsKey("s1")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := pipeline.Applied(r.ctx, r.rdb, r.eng, "s1"); err != nil || got != info.LastGeneratedID {
			t.Errorf("Applied = %q, %v; want the last generated id %q", got, err, info.LastGeneratedID)
		}

		eng := r.rebuildingEngine(2 * time.Second)
		var lost []string
		for _, k := range []string{"sale", "bought", "orders", "idem"} {
			lost = append(lost, eng.Key("s1", k))
		}
		if err := r.rdb.Del(r.ctx, lost...).Err(); err != nil {
			t.Fatal(err)
		}
		st, err := eng.Stock(r.ctx, "s1")
		if err != nil {
			t.Fatalf("Stock of the lost sale: %v", err)
		}
		if rem := st.Items[0].Remaining; rem != 100_000-5 {
			t.Errorf("remaining %d after rebuild, want %d", rem, 100_000-5)
		}
	})
}

// rebuildingEngine is an engine like the rig's (same key prefix) that
// rebuilds a lost sale from the database, as the service's Loader does:
// the database's snapshot, with the stream position pipeline.Applied reads.
func (r *rig) rebuildingEngine(initTimeout time.Duration) *inventory.Engine {
	loader := inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
		applied, err := pipeline.Applied(ctx, r.rdb, r.eng, saleID)
		if err != nil {
			return inventory.Snapshot{}, err
		}
		snap, err := r.db.Snapshot(ctx, saleID)
		snap.EventsApplied = applied
		return snap, err
	})
	prefix := strings.TrimSuffix(r.eng.StockChannel(), ":stock")
	return inventory.New(r.rdb, inventory.Options{Prefix: prefix, Loader: loader, InitTimeout: initTimeout})
}
