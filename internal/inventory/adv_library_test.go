package inventory_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/golden"
	"github.com/seckill/seckill/internal/inventory"
)

// TestLibraryBuysAnswerAsBefore: Engine.BuyWith, Buy and BuyMany (a mix
// of valid and invalid buys in one call: each refused alone, the others
// bought) answer every buy as they did before a buy was checked once
// (inventory.CheckBuy): testdata/library_buys.golden holds the answers of
// 1a98f90 (errors, orders, remaining; order ids masked). (Fails if a
// check, its order or its message changes.)
func TestLibraryBuysAnswerAsBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.name != "redis" {
			t.Skip("the answers are the engine's: one backend is enough")
		}
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}, {SKU: "B", Stock: 100}}})
		r.create(inventory.Sale{ID: "s2", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		var many []inventory.Line
		for i := range 101 {
			many = append(many, inventory.Line{SKU: fmt.Sprintf("A%d", i), Qty: 1})
		}
		th := &inventory.Throttle{Rate: 100, Period: time.Second}
		bad := &inventory.Throttle{Rate: 0, Period: time.Second}
		s1id := inventory.NewOrderID("s1")
		cases := []struct {
			name string
			r    inventory.BuyRequest
		}{
			{"valid", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)}},
			{"bad sale", inventory.BuyRequest{SaleID: "a b", UserID: "u1", Lines: lines("A", 1)}},
			{"empty sale", inventory.BuyRequest{SaleID: "", UserID: "u1", Lines: lines("A", 1)}},
			{"bad user", inventory.BuyRequest{SaleID: "s1", UserID: "", Lines: lines("A", 1)}},
			{"bad key", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), IdempotencyKey: "k 1"}},
			{"no lines", inventory.BuyRequest{SaleID: "s1", UserID: "u1"}},
			{"qty 0", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 0)}},
			{"dup", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1, "A", 1)}},
			{"101 lines", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: many}},
			{"bad throttle", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: bad}},
			{"bad token", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Token: "a b", TokenTTL: time.Minute}},
			{"token ttl 0", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Token: "t1"}},
			{"ttl without token", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), TokenTTL: -1}},
			{"malformed order id", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: "x"}},
			{"order id of s2", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: inventory.NewOrderID("s2")}},
			{"order id of s1x", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: inventory.NewOrderID("s1x")}},
			{"order id of s", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: inventory.NewOrderID("s")}},
			{"order id bad ulid", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), OrderID: "s1.ZZZZ"}},
			{"order id of s1", inventory.BuyRequest{SaleID: "s1", UserID: "u2", Lines: lines("A", 1), OrderID: s1id}},
			{"order id of s1 again other user", inventory.BuyRequest{SaleID: "s1", UserID: "u3", Lines: lines("A", 1), OrderID: s1id}},
			{"bad throttle and order", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1), Throttle: bad, OrderID: "x"}},
			{"bad lines and token", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 0), Token: "a b"}},
			{"unknown sale", inventory.BuyRequest{SaleID: "nosuch", UserID: "u1", Lines: lines("A", 1)}},
			{"unknown sku", inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("Z", 1)}},
			{"throttled valid", inventory.BuyRequest{SaleID: "s1", UserID: "u4", Lines: lines("B", 1), Throttle: th, IdempotencyKey: "k"}},
			{"over limit", inventory.BuyRequest{SaleID: "s1", UserID: "u5", Lines: lines("B", 6)}},
			{"s2 valid", inventory.BuyRequest{SaleID: "s2", UserID: "u1", Lines: lines("A", 1)}},
		}
		ids := regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)
		var got []string
		res := func(kind, name string, rc inventory.Receipt, err error) {
			got = append(got, ids.ReplaceAllString(fmt.Sprintf("%s|%s|%v|%q|%v|%v|%v", kind, name, err, rc.Order.UserID, rc.Order.Items, rc.Remaining, rc.Replayed), "ULID"))
		}
		for _, c := range cases {
			rc, err := r.eng.BuyWith(r.ctx, c.r)
			res("with", c.name, rc, err)
		}
		for _, c := range cases {
			if c.r.Throttle != nil || c.r.Token != "" || c.r.OrderID != "" || c.r.TokenTTL != 0 {
				continue
			}
			u := "b-" + c.r.UserID
			if c.r.UserID == "" {
				u = ""
			}
			rc, err := r.eng.Buy(r.ctx, c.r.SaleID, u, c.r.Lines, c.r.IdempotencyKey)
			res("buy", c.name, rc, err)
		}
		var reqs []inventory.BuyRequest
		for _, c := range cases {
			q := c.r
			if q.UserID != "" {
				q.UserID = "m-" + q.UserID
			}
			if q.OrderID == s1id {
				q.OrderID = inventory.NewOrderID("s1")
			}
			reqs = append(reqs, q)
		}
		for i, br := range r.eng.BuyMany(r.ctx, reqs) {
			res("many", cases[i].name, br.Receipt, br.Err)
		}
		st, _ := r.eng.Stock(r.ctx, "s1")
		got = append(got, fmt.Sprintf("stock %+v", st.Items))
		golden.Compare(t, "testdata/library_buys.golden", got)
	})
}
