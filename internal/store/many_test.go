package store

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestCountOrdersOfAndSaleEnds: CountOrdersOf counts several sales' orders
// in one go as CountOrders does each (an unknown sale counts nothing), and
// SaleEnds lists every sale's end.
func TestCountOrdersOfAndSaleEnds(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		must(t, s.Apply(ctx, "h", history("h")))
		must(t, s.Apply(ctx, "k", history("k")[:3]))
		end := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli()).UTC()
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "e", EndsAt: end, Items: []inventory.Item{{SKU: "A", Stock: 1}}}}))
		counts, err := s.CountOrdersOf(ctx, []string{"h", "k", "e", "nobody"})
		must(t, err)
		for _, id := range []string{"h", "k", "e", "nobody"} {
			one, err := s.CountOrders(ctx, id)
			must(t, err)
			check(t, "CountOrdersOf "+id, counts[id], one)
		}
		check(t, "CountOrdersOf k", counts["k"], map[inventory.OrderStatus]int{inventory.OrderConfirmed: 2, inventory.OrderCancelled: 0})
		ends, err := s.SaleEnds(ctx)
		must(t, err)
		check(t, "SaleEnds", ends, map[string]time.Time{"h": {}, "k": {}, "e": end})
	})
}
