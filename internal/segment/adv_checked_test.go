package segment_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// TestSegmentedBuyKeepsItsOrderInTheHomeSegment: a buy of a segmented
// sale that carries an order id is sold only under an id of the buyer's
// home segment, checked or not (Seller.BuyChecked, Seller.Buy): an id of
// the sale itself or of another segment is refused as invalid and sells
// nothing; an id of the home segment names the order made there. The zero
// CheckedBuy is refused. (Fails if the move to the home segment, InSale,
// skips the engine's order id rule, or re-targets the buy elsewhere.)
func TestSegmentedBuyKeepsItsOrderInTheHomeSegment(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{}, segment.Options{})
		ids := r.create(inventory.Sale{ID: "hot", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 40}}}, 4)
		home := segment.Home(ids, "u1")
		other := ids[0]
		if other == home {
			other = ids[1]
		}
		req := func(orderID string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "hot", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 1}}, OrderID: orderID}
		}
		checked := func(orderID string) inventory.CheckedBuy {
			t.Helper()
			c, err := inventory.CheckBuy(req(orderID))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		var inv *inventory.InvalidError
		for name, id := range map[string]string{"the sale's": inventory.NewOrderID("hot"), "another segment's": inventory.NewOrderID(other)} {
			if rc, err := r.sel.BuyChecked(r.ctx, checked(id)); !errors.As(err, &inv) || inv.Field != "order_id" {
				t.Errorf("BuyChecked with %s order id = %+v, %v; want an InvalidError of order_id", name, rc, err)
			}
			if rc, err := r.sel.Buy(r.ctx, req(id)); !errors.As(err, &inv) || inv.Field != "order_id" {
				t.Errorf("Buy with %s order id = %+v, %v; want an InvalidError of order_id", name, rc, err)
			}
		}
		if rc, err := r.sel.BuyChecked(r.ctx, inventory.CheckedBuy{}); err == nil {
			t.Errorf("BuyChecked of the zero CheckedBuy = %+v", rc)
		}
		if got := r.totals("hot")["A"]; got.Sold != 0 || got.Remaining != 40 {
			t.Fatalf("after refused buys: %+v, want nothing sold", got)
		}
		for name, buy := range map[string]func(id string) (inventory.Receipt, error){
			"BuyChecked": func(id string) (inventory.Receipt, error) { return r.sel.BuyChecked(r.ctx, checked(id)) },
			"Buy":        func(id string) (inventory.Receipt, error) { return r.sel.Buy(r.ctx, req(id)) },
		} {
			id := inventory.NewOrderID(home)
			if rc, err := buy(id); err != nil || rc.Order.ID != id || rc.Order.SaleID != home {
				t.Errorf("%s with an order id of the home segment %s = %+v, %v", name, home, rc, err)
			}
		}
		if got := r.totals("hot")["A"]; got.Sold != 2 {
			t.Fatalf("after two buys: %+v, want 2 sold", got)
		}
	})
}
