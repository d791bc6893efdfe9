package inventory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seckill/seckill/inventory"
)

// TestCounterPastExactIntegersIsCorrupt: a stored counter holds digits only,
// so int.lua's pattern takes it, but it is past 2^53 (Lua's doubles are no
// longer exact) or past int64 (HINCRBY refuses it). A buy reading it fails
// with ErrCorrupt before its first write; the other buys of its batch run,
// and no "bought" event goes out without its order record. On the old int
// (digits only) the batch's last write, HINCRBY on the unlimited sku's sold
// count, failed after the first buy's XADD: an event with no order, no
// deduction, and a retry that bought again.
func TestCounterPastExactIntegersIsCorrupt(t *testing.T) {
	for _, v := range []string{"9223372036854775807", "99999999999999999999", "-9223372036854775808", "9007199254740993"} {
		t.Run(v, func(t *testing.T) {
			r := newRig(t, backends[0], inventory.Options{})
			r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
				Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
			if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "s:U", v).Err(); err != nil {
				t.Fatal(err)
			}
			res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
				{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)},
				{SaleID: "s1", UserID: "u2", Lines: lines("U", 1)},
				{SaleID: "s1", UserID: "u3", Lines: lines("A", 1)},
			})
			if res[0].Err != nil || res[2].Err != nil {
				t.Errorf("the sound buys: %v, %v", res[0].Err, res[2].Err)
			}
			if !errors.Is(res[1].Err, inventory.ErrCorrupt) {
				t.Errorf("the buy of U: %+v, %v; want ErrCorrupt", res[1].Receipt, res[1].Err)
			}
			ev := r.boughtEvents("s1")
			want := map[string]int{res[0].Receipt.Order.ID: 1, res[2].Receipt.Order.ID: 1}
			if fmt.Sprint(ev) != fmt.Sprint(want) {
				t.Errorf("bought events %v, want one each for %v", ev, want)
			}
			if rem, err := r.rdb.HGet(r.ctx, r.key("s1", "sale"), "r:A").Result(); err != nil || rem != "3" {
				t.Errorf("remaining A %q, %v; want 3", rem, err)
			}
			if n, _ := r.rdb.HLen(r.ctx, r.key("s1", "orders")).Result(); n != 2 {
				t.Errorf("%d order records, want 2", n)
			}
		})
	}
}

// TestRestockAndCancelCheckCountersPastExactIntegers: restock.lua and
// cancel.lua add to counters with HINCRBY after their XADD. A counter of
// digits at the edge of int64 passed the old int (digits only) and made
// the HINCRBY fail after the event and part of the counters were written.
// Now both fail with ErrCorrupt before their first write.
func TestRestockAndCancelCheckCountersPastExactIntegers(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
		Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: inventory.Unlimited}}})
	rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("U", 1), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "r:A", "9223372036854775807", "s:U", "-9223372036854775808").Err(); err != nil {
		t.Fatal(err)
	}
	sale0, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
	events0 := len(r.events("s1"))
	if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); !errors.Is(err, inventory.ErrCorrupt) {
		t.Errorf("Restock: %v, want ErrCorrupt", err)
	}
	if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, ""); !errors.Is(err, inventory.ErrCorrupt) {
		t.Errorf("Cancel: %v, want ErrCorrupt", err)
	}
	sale1, _ := r.rdb.HGetAll(r.ctx, r.key("s1", "sale")).Result()
	if fmt.Sprint(sale0) != fmt.Sprint(sale1) {
		t.Errorf("half-written:\n %v\n -> %v", sale0, sale1)
	}
	if n := len(r.events("s1")); n != events0 {
		t.Errorf("%d events after the failed calls, want %d", n, events0)
	}
}
