package inventory_test

import (
	"fmt"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestAdvGroupsOrderCountsCountOrders: OrderCounts is "how many orders each
// sale's Redis record holds" (the service's /live orders and pending): the
// orders of one call, one group, are still each an order.
func TestAdvGroupsOrderCountsCountOrders(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	var reqs []inventory.BuyRequest
	for i := range 10 {
		reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1)})
	}
	for i, br := range r.eng.BuyMany(r.ctx, reqs) {
		if br.Err != nil {
			t.Fatalf("buy %d: %v", i, br.Err)
		}
	}
	counts, errs := r.eng.OrderCounts(r.ctx, []string{"s1"})
	if errs[0] != nil || counts[0] != 10 {
		t.Errorf("OrderCounts = %d, %v; want the 10 orders Redis holds", counts[0], errs[0])
	}
}
