package segment_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// keysOf lists the keys matching pattern, on every master of a cluster.
func (r *rig) keysOf(pattern string) []string {
	r.t.Helper()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(r.ctx, scan)
	case *redis.Client:
		err = scan(r.ctx, c)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// TestCreateWithIsAllOrNothing: a segmented create whose last segment
// Redis refuses (a key of the wrong type in its way), or whose commit (the
// caller's record of the sale) fails, leaves no segment and no directory;
// the one whose commit succeeds makes the whole sale.
func TestCreateWithIsAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{}, segment.Options{})
		sale := inventory.Sale{ID: "hot", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		ids, err := r.sel.Place(r.ctx, "hot", 3)
		if err != nil {
			t.Fatal(err)
		}
		left := func() []string {
			var keys []string
			for _, id := range append([]string{"hot"}, ids...) {
				keys = append(keys, r.keysOf(r.eng.Key(id, "*"))...)
			}
			return keys
		}
		obstacle := r.eng.Key(ids[2], "events")
		if err := r.rdb.Set(r.ctx, obstacle, "in the way", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.sel.Create(r.ctx, sale, ids); err == nil {
			t.Fatal("Create with a key in the way succeeded")
		}
		if keys := left(); len(keys) != 1 || keys[0] != obstacle {
			t.Errorf("a failed Create left %v", keys)
		}
		if err := r.rdb.Del(r.ctx, obstacle).Err(); err != nil {
			t.Fatal(err)
		}
		refused := errors.New("refused")
		if err := r.sel.CreateWith(r.ctx, sale, ids, func(context.Context) error { return refused }); !errors.Is(err, refused) {
			t.Fatalf("CreateWith whose commit failed: %v", err)
		}
		if keys := left(); len(keys) != 0 {
			t.Errorf("a CreateWith whose commit failed left %v", keys)
		}
		committed := false
		if err := r.sel.CreateWith(r.ctx, sale, ids, func(context.Context) error { committed = true; return nil }); err != nil || !committed {
			t.Fatalf("CreateWith: %v (committed %v)", err, committed)
		}
		if tot := r.totals("hot")["A"]; tot.Stocked != 10 || tot.Remaining != 10 {
			t.Errorf("the sale reads %+v", tot)
		}
	})
}
