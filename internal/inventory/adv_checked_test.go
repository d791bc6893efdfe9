package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestCheckedBuyZeroStaysNoBuy: the zero CheckedBuy is no buy whatever is
// done to it: moved to a sale (InSale), given an order id, a throttle or a
// token, the engine still refuses it as invalid, and nothing is sold (no
// order without a buyer or lines reaches Redis). (Fails if InSale makes a
// buy of the zero value: buy.lua then writes an order of user "" with no
// lines.)
func TestCheckedBuyZeroStaysNoBuy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		var zero inventory.CheckedBuy
		moved, err := zero.InSale("s1")
		if err == nil {
			tok, _ := moved.WithToken("t1", time.Minute)
			th, _ := moved.WithThrottle(&inventory.Throttle{Rate: 10, Period: time.Second})
			for name, c := range map[string]inventory.CheckedBuy{"moved": moved, "with an order id": moved.WithNewOrderID("s1"),
				"with a token": tok, "with a throttle": th} {
				if rc, err := r.eng.BuyChecked(r.ctx, c); !errors.Is(err, inventory.ErrInvalid) {
					t.Errorf("BuyChecked of the zero CheckedBuy %s = %+v, %v; want ErrInvalid", name, rc, err)
				}
			}
		} else if !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("InSale of the zero CheckedBuy = %v, want ErrInvalid or a buy the engine refuses", err)
		}
		st, err := r.eng.Stock(r.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Items[0].Remaining != 10 {
			t.Fatalf("remaining %d after refused buys, want 10", st.Items[0].Remaining)
		}
		if n, err := r.rdb.HLen(r.ctx, r.eng.Key("s1", "orders")).Result(); err != nil || n != 0 {
			t.Fatalf("%d orders in Redis after refused buys (%v), want 0", n, err)
		}
	})
}

// TestCheckedBuyLinesCannotChangeAfterTheCheck: what a CheckedBuy sells is
// what was checked: neither the caller's slice of lines (changed after
// CheckBuy) nor the slice Lines returns (changed by whoever holds the buy:
// a BeforeDatabaseBuy hook, a library caller), nor the lines of a receipt
// BuyChecked returned, changes it. (Fails if the
// buy shares its lines: a qty of -3 set after the check reaches buy.lua,
// which gives units back to the stock.)
func TestCheckedBuyLinesCannotChangeAfterTheCheck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "B", Stock: 10}}})
		req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)}
		c, err := inventory.CheckBuy(req)
		if err != nil {
			t.Fatal(err)
		}
		req.Lines[0] = inventory.Line{SKU: "B", Qty: -3} // the caller's slice, after the check
		got := c.Lines()
		if len(got) != 1 || got[0] != (inventory.Line{SKU: "A", Qty: 1}) {
			t.Fatalf("Lines after the caller changed its slice = %v, want [{A 1}]", got)
		}
		got[0].Qty = -3 // the slice Lines returned
		if l := c.Lines(); l[0].Qty != 1 {
			t.Fatalf("Lines after a holder changed what Lines returned = %v, want [{A 1}]", l)
		}
		rc, err := r.eng.BuyChecked(r.ctx, c)
		if err != nil || len(rc.Order.Items) != 1 || rc.Order.Items[0] != (inventory.Line{SKU: "A", Qty: 1}) {
			t.Fatalf("BuyChecked = %+v, %v; want the checked line A×1", rc, err)
		}
		rc.Order.Items[0].Qty = -3 // the receipt's lines: the buy is sold again as checked
		rc, err = r.eng.BuyChecked(r.ctx, c)
		if err != nil || len(rc.Order.Items) != 1 || rc.Order.Items[0] != (inventory.Line{SKU: "A", Qty: 1}) {
			t.Fatalf("BuyChecked again after its receipt was changed = %+v, %v; want the checked line A×1", rc, err)
		}
		if rem := r.remaining("s1"); rem["A"] != 8 || rem["B"] != 10 {
			t.Fatalf("remaining %v, want A 8, B 10", rem)
		}
	})
}
