package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestArchivedSalesPages: ArchivedSales walks the archived sales a page at
// a time, each once, a segmented sale under its own id once every segment
// is archived (never a segment's id); Gone names the archived sales and
// the unknown ones.
func TestArchivedSalesPages(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		sale := func(id string) Sale {
			return Sale{Sale: inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}}, CreatedAt: time.Now()}
		}
		archive := func(id string) {
			must(t, s.BeginArchive(ctx, id, time.Now()))
			must(t, s.FinishArchive(ctx, id, time.Now()))
		}
		var want []string
		for i := range 9 {
			id := fmt.Sprintf("a%d", i)
			must(t, s.CreateSale(ctx, sale(id)))
			if i%3 != 1 {
				archive(id)
				want = append(want, id)
			}
		}
		// b: every segment archived; c: one of two.
		must(t, s.CreateSegmentedSale(ctx, "b", []Sale{sale("b:0"), sale("b:1")}))
		must(t, s.CreateSegmentedSale(ctx, "c", []Sale{sale("c:0"), sale("c:1")}))
		archive("b:0")
		archive("b:1")
		archive("c:0")
		want = append(want, "b")
		var got []string
		after := ""
		for range 10 {
			page, err := s.ArchivedSales(ctx, after, 4)
			must(t, err)
			got = append(got, page...)
			if len(page) < 4 {
				break
			}
			after = page[len(page)-1]
		}
		check(t, "archived sales", got, want)
		gone, err := s.Gone(ctx, []string{"a0", "a1", "b:0", "c:0", "c:1", "nosuch"})
		must(t, err)
		check(t, "gone", gone, []string{"a0", "b:0", "c:0", "nosuch"})
	})
}
