package store

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestMovingUnits: a move out of one segment applied without its in half
// counts as moving between the segments, until the in half is applied; a
// move to a sale not asked about does not count.
func TestMovingUnits(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a, b := newEvents("mv:0"), newEvents("mv:1")
		out := a.moved(t, "A", -3, "mv:1")
		away := a.moved(t, "A", -2, "elsewhere")
		must(t, s.Apply(ctx, "mv:0", []inventory.Event{a.created(2, inventory.Item{SKU: "A", Stock: 10}), out, away}))
		must(t, s.Apply(ctx, "mv:1", []inventory.Event{b.created(2, inventory.Item{SKU: "A", Stock: 10})}))
		segs := []string{"mv:0", "mv:1"}
		got, err := s.MovingUnits(ctx, segs)
		must(t, err)
		check(t, "moving with the in half not applied", got, map[string]int64{"A": 3})

		in := b.moved(t, "A", 3, "mv:0")
		in.MoveID = out.MoveID
		must(t, s.Apply(ctx, "mv:1", []inventory.Event{in}))
		got, err = s.MovingUnits(ctx, segs)
		must(t, err)
		check(t, "moving once the in half is applied", got, map[string]int64{})
	})
}
