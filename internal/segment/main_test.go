package segment_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
)

func TestMain(m *testing.M) { redistest.Main(m, "segment") }

// backend is a Redis the tests run on: backends[0] the machine's, [1]
// miniredis, [2] a 3-master cluster.
type backend = redistest.Backend

var backends = redistest.Backends()

// forEachBackend runs f as a subtest on every backend.
var forEachBackend = redistest.ForEachBackend

// rig is one test's engine and seller on a backend, under a key prefix of
// its own.
type rig struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	eng    *inventory.Engine
	sel    *segment.Seller
}

func newRig(t testing.TB, b backend, eo inventory.Options, so segment.Options) *rig {
	t.Helper()
	rdb := b.Client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: redistest.Prefix(t, rdb)}
	eo.Prefix = r.prefix
	r.eng = inventory.New(rdb, eo)
	r.sel = segment.New(r.eng, rdb, so)
	return r
}

// create places and creates a segmented sale of k segments, or fails the
// test, and returns its segment ids.
func (r *rig) create(s inventory.Sale, k int) []string {
	r.t.Helper()
	ids, err := r.sel.Place(r.ctx, s.ID, k)
	if err != nil {
		r.t.Fatalf("Place(%s, %d): %v", s.ID, k, err)
	}
	if err := r.sel.Create(r.ctx, s, ids); err != nil {
		r.t.Fatalf("Create(%s): %v", s.ID, err)
	}
	return ids
}

// totals returns the sale's counters summed over its segments, by sku.
func (r *rig) totals(sale string) map[string]inventory.ItemState {
	r.t.Helper()
	sum, _, err := r.sel.Stock(r.ctx, sale)
	if err != nil {
		r.t.Fatalf("Stock(%s): %v", sale, err)
	}
	out := map[string]inventory.ItemState{}
	for _, it := range sum.Items {
		out[it.SKU] = it
	}
	return out
}

// ordered returns the units of each sku in the order records of every
// segment of the sale.
func (r *rig) ordered(sale string) map[string]int64 {
	r.t.Helper()
	segs, err := r.sel.Segments(r.ctx, sale)
	if err != nil {
		r.t.Fatalf("Segments(%s): %v", sale, err)
	}
	out := map[string]int64{}
	for _, id := range segs {
		units, err := r.eng.UnitsInOrders(r.ctx, id)
		if err != nil {
			r.t.Fatalf("UnitsInOrders(%s): %v", id, err)
		}
		for sku, n := range units {
			out[sku] += n
		}
	}
	return out
}
