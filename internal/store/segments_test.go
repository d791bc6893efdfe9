package store

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

func segmentRows(sale string, ids ...string) []Sale {
	rows := make([]Sale, len(ids))
	for i, id := range ids {
		rows[i] = Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: 5}}}, Settings: `{"require_purchase_token":true}`}
	}
	return rows
}

// TestSegmentedSales: a segmented sale is its segments (ordinary sales)
// and its directory, in order; its id is taken for a plain sale and the
// other way round; a create that conflicts writes nothing; a create undone
// removes it all.
func TestSegmentedSales(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.CreateSegmentedSale(ctx, "hot", segmentRows("hot", "hot:2", "hot:0", "hot:1")); err != nil {
			t.Fatal(err)
		}
		segs, err := s.Segments(ctx, "hot")
		if err != nil || !reflect.DeepEqual(segs, []string{"hot:2", "hot:0", "hot:1"}) {
			t.Fatalf("Segments: %v %v", segs, err)
		}
		if seg, err := s.Sale(ctx, "hot:0"); err != nil || seg.Settings == "" || seg.PerUserLimit != 1 {
			t.Fatalf("a segment's row: %+v %v", seg, err)
		}
		if _, err := s.Sale(ctx, "hot"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("the segmented sale has a row of its own: %v", err)
		}
		for id, want := range map[string][2]any{"hot": {3, true}, "hot:0": {0, true}, "nope": {0, false}} {
			segs, exists, err := s.SaleKind(ctx, id)
			if err != nil || len(segs) != want[0].(int) || exists != want[1].(bool) {
				t.Errorf("SaleKind(%s) = %v %v %v", id, segs, exists, err)
			}
		}
		if all, err := s.SegmentedSales(ctx); err != nil || len(all) != 1 || len(all["hot"]) != 3 {
			t.Fatalf("SegmentedSales: %v %v", all, err)
		}

		// The id is taken both ways, and a conflicting create writes nothing.
		if err := s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "hot", Items: []inventory.Item{{SKU: "A", Stock: 1}}}}); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("a plain sale over a segmented one: %v", err)
		}
		if err := s.CreateSegmentedSale(ctx, "hot", segmentRows("hot", "hot:5")); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("a segmented sale created twice: %v", err)
		}
		if err := s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "plain", Items: []inventory.Item{{SKU: "A", Stock: 1}}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSegmentedSale(ctx, "plain", segmentRows("plain", "plain:0")); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("a segmented sale over a plain one: %v", err)
		}
		if err := s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "x:1", Items: []inventory.Item{{SKU: "A", Stock: 1}}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSegmentedSale(ctx, "x", segmentRows("x", "x:0", "x:1")); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("a segment over a plain sale: %v", err)
		}
		for _, id := range []string{"plain:0", "x:0", "hot:5"} {
			if _, err := s.Sale(ctx, id); !errors.Is(err, inventory.ErrNotFound) {
				t.Errorf("a refused create left sale %s: %v", id, err)
			}
		}
		if segs, _ := s.Segments(ctx, "x"); segs != nil {
			t.Errorf("a refused create left a directory: %v", segs)
		}

		// Creates of one id racing: exactly one wins.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					errs[i] = s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "race", Items: []inventory.Item{{SKU: "A", Stock: 1}}}})
				} else {
					errs[i] = s.CreateSegmentedSale(ctx, "race", segmentRows("race", "race:0", "race:1"))
				}
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, inventory.ErrExists) && s.Dialect() == Postgres:
				t.Errorf("a racing create: %v", err)
			}
		}
		_, plainErr := s.Sale(ctx, "race")
		raceSegs, _ := s.Segments(ctx, "race")
		if won != 1 || (plainErr == nil) == (raceSegs != nil) {
			t.Fatalf("%d racing creates won; plain %v, segments %v (%v)", won, plainErr == nil, raceSegs, errs)
		}
	})
}
