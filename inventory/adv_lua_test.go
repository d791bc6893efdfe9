package inventory_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/inventory"
)

// TestAdvLuaNonCanonicalCounters: a stored counter in a form the engine
// never writes ("01", "-0", "00", "-01") is corrupt (code 8, ErrCorrupt)
// for the buys that read it, and such a buy changes nothing: no event, no
// held count, no sold count. Redis's own integer parser (HINCRBY) refuses
// these forms, so a script that took one for a number would fail on its
// write after the XADD, leaving an event for a buy whose counters were
// never written.
func TestAdvLuaNonCanonicalCounters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, bad := range []string{"01", "-0", "00", "-01", "007"} {
			for _, field := range []string{"s:U", "r:A", "bought", "limit"} {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{
					{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}})
				sku := "A"
				if field == "s:U" {
					sku = "U"
				}
				if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines(sku, 1)}); err != nil {
					t.Fatal(err)
				}
				if field == "bought" {
					if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u1|"+sku, bad).Err(); err != nil {
						t.Fatal(err)
					}
				} else if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), field, bad).Err(); err != nil {
					t.Fatal(err)
				}
				events := len(r.events("s1"))
				_, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines(sku, 1)})
				if !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("%s = %q: buy err = %v, want ErrCorrupt", field, bad, err)
				}
				if n := len(r.events("s1")); n != events {
					t.Errorf("%s = %q: the refused buy appended %d events", field, bad, n-events)
				}
				if field != "bought" {
					if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "bought"), "u1|"+sku).Result(); v != "1" {
						t.Errorf("%s = %q: u1 holds %q, want 1", field, bad, v)
					}
				}
				if v, _ := r.rdb.HGet(r.ctx, r.key("s1", "sale"), field).Result(); field != "bought" && v != bad {
					t.Errorf("%s = %q became %q", field, bad, v)
				}
			}
		}
	})
}
