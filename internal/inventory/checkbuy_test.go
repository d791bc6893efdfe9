package inventory_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/buycheck"
	"github.com/seckill/seckill/internal/inventory"
)

func init() { buycheck.Count() }

// TestBuyIsValidatedOnce: a buy's arguments are validated once on its
// path: by BuyWith, Buy and BuyMany, which check it (CheckBuy), and not
// again by the engine; BuyChecked sells a checked buy without checking it
// again. (Fails if the engine validates a buy it was handed checked.)
func TestBuyIsValidatedOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		user := func(name string) string { return buycheck.Prefix + b.name + "-" + name }
		once := func(user string) {
			t.Helper()
			if n := buycheck.Of(user); n != 1 {
				t.Errorf("the buy of %s was validated %d times, want 1", user, n)
			}
		}

		if _, err := r.eng.Buy(r.ctx, "s1", user("buy"), lines("A", 1), "k"); err != nil {
			t.Fatal(err)
		}
		once(user("buy"))
		if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: user("with"), Lines: lines("A", 1),
			Throttle: &inventory.Throttle{Rate: 10, Period: time.Second}}); err != nil {
			t.Fatal(err)
		}
		once(user("with"))
		if res := r.eng.BuyMany(r.ctx, []inventory.BuyRequest{{SaleID: "s1", UserID: user("many"), Lines: lines("A", 1)}}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		once(user("many"))

		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user("checked"), Lines: lines("A", 1)})
		if err != nil {
			t.Fatal(err)
		}
		once(user("checked"))
		rc, err := r.eng.BuyChecked(r.ctx, c)
		if err != nil || rc.Order.UserID != user("checked") || rc.Remaining[0] != 6 {
			t.Fatalf("BuyChecked = %+v, %v", rc, err)
		}
		once(user("checked"))
	})
}

// TestCheckBuyRefusesAsBuyDid: CheckBuy refuses every bad argument with
// the InvalidError (field) the engine's Buy gave, and Buy still does.
func TestCheckBuyRefusesAsBuyDid(t *testing.T) {
	ok := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)}
	for _, c := range []struct {
		field string
		edit  func(r *inventory.BuyRequest)
	}{
		{"sale", func(r *inventory.BuyRequest) { r.SaleID = "a b" }},
		{"user", func(r *inventory.BuyRequest) { r.UserID = "" }},
		{"idempotency_key", func(r *inventory.BuyRequest) { r.IdempotencyKey = strings.Repeat("k", 65) }},
		{"items", func(r *inventory.BuyRequest) { r.Lines = nil }},
		{"items[0].qty", func(r *inventory.BuyRequest) { r.Lines = lines("A", 0) }},
		{"throttle", func(r *inventory.BuyRequest) { r.Throttle = &inventory.Throttle{Rate: 0, Period: time.Second} }},
		{"token", func(r *inventory.BuyRequest) { r.Token, r.TokenTTL = "no spaces", time.Minute }},
		{"token_ttl", func(r *inventory.BuyRequest) { r.Token = "t1" }},
		{"order_id", func(r *inventory.BuyRequest) { r.OrderID = "s1-not-an-order" }},
	} {
		r := ok
		c.edit(&r)
		_, err := inventory.CheckBuy(r)
		var inv *inventory.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("CheckBuy with a bad %s = %v, want an InvalidError of field %s", c.field, err, c.field)
		}
	}
	if _, err := inventory.CheckBuy(ok); err != nil {
		t.Fatalf("CheckBuy(%+v) = %v", ok, err)
	}
}

// TestCheckedBuyKeepsItsOrderInItsSale: the engine sells a checked buy
// only with an order id of the sale it sells it in (a buy moved to
// another sale, InSale, with an order id of its old one is refused and
// changes nothing), and refuses the zero CheckedBuy. (Fails without the
// engine's order id rule: the order would be made in s1 under an id of
// s2.)
func TestCheckedBuyKeepsItsOrderInItsSale(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s2", UserID: "u1", Lines: lines("A", 1), OrderID: inventory.NewOrderID("s2")})
		if err != nil {
			t.Fatal(err)
		}
		moved, err := c.InSale("s1")
		if err != nil || moved.SaleID() != "s1" || moved.OrderID() != c.OrderID() || c.SaleID() != "s2" {
			t.Fatalf("InSale = %+v, %v (from %+v)", moved, err, c)
		}
		var inv *inventory.InvalidError
		if _, err := r.eng.BuyChecked(r.ctx, moved); !errors.As(err, &inv) || inv.Field != "order_id" {
			t.Fatalf("BuyChecked with an order id of another sale = %v, want an InvalidError of order_id", err)
		}
		if _, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1),
			OrderID: inventory.NewOrderID("s2")}); !errors.As(err, &inv) || inv.Field != "order_id" {
			t.Fatalf("BuyWith with an order id of another sale = %v, want an InvalidError of order_id", err)
		}
		if _, err := r.eng.BuyChecked(r.ctx, inventory.CheckedBuy{}); !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("BuyChecked of the zero CheckedBuy = %v, want ErrInvalid", err)
		}
		if got := r.remaining("s1")["A"]; got != 10 {
			t.Fatalf("remaining %d after refused buys, want 10", got)
		}

		if _, err := c.InSale("a b"); !errors.As(err, &inv) || inv.Field != "sale" {
			t.Fatalf("InSale(\"a b\") = %v, want an InvalidError of sale", err)
		}
		fresh, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)})
		if err != nil {
			t.Fatal(err)
		}
		withID := fresh.WithNewOrderID("s1")
		if sale, err := inventory.SaleOfOrder(withID.OrderID()); err != nil || sale != "s1" || withID.WithNewOrderID("s1").OrderID() != withID.OrderID() {
			t.Fatalf("WithNewOrderID: %q (%q, %v)", withID.OrderID(), sale, err)
		}
		// The engine may give a new id another one of its call's group.
		rc, err := r.eng.BuyChecked(r.ctx, withID)
		if sale, serr := inventory.SaleOfOrder(rc.Order.ID); err != nil || serr != nil || sale != "s1" {
			t.Fatalf("BuyChecked = %+v, %v; want an order of s1", rc, err)
		}
		if o, err := r.eng.Order(r.ctx, rc.Order.ID); err != nil || o.UserID != "u1" {
			t.Fatalf("Order(%s) = %+v, %v; want u1's", rc.Order.ID, o, err)
		}
	})
}
