package inventory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestBuyMany: a pipeline of buys across two sales (on a cluster, usually
// two nodes) gives each buy exactly the outcome Buy would.
func TestBuyMany(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 3}}})
		r.create(inventory.Sale{ID: "s2", PerUserLimit: 1, Items: []inventory.Item{{SKU: "B", Stock: -1}}})
		reqs := []inventory.BuyRequest{
			{SaleID: "s1", UserID: "u1", Lines: lines("A", 2)},                      // ok, 1 left
			{SaleID: "s2", UserID: "u1", Lines: lines("B", 1), IdempotencyKey: "k"}, // ok
			{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)},                      // over the limit
			{SaleID: "s1", UserID: "u2", Lines: lines("A", 2)},                      // sold out (1 left)
			{SaleID: "s2", UserID: "u1", Lines: lines("B", 1), IdempotencyKey: "k"}, // replay
			{SaleID: "s1", UserID: "u3", Lines: lines("A", 0)},                      // invalid
			{SaleID: "nope", UserID: "u1", Lines: lines("A", 1)},                    // unknown sale
			{SaleID: "s1", UserID: "u4", Lines: lines("A", 1)},                      // ok, the last unit
		}
		res := r.eng.BuyMany(r.ctx, reqs)
		want := []error{nil, nil, inventory.ErrLimitExceeded, inventory.ErrSoldOut, nil, inventory.ErrInvalid, inventory.ErrNotFound, nil}
		for i, w := range want {
			if w == nil && res[i].Err != nil || w != nil && !errors.Is(res[i].Err, w) {
				t.Errorf("buy %d: err %v, want %v", i, res[i].Err, w)
			}
		}
		if res[0].Receipt.Remaining[0] != 1 || res[7].Receipt.Remaining[0] != 0 {
			t.Errorf("remaining %v then %v", res[0].Receipt.Remaining, res[7].Receipt.Remaining)
		}
		if !res[4].Receipt.Replayed || res[4].Receipt.Order.ID != res[1].Receipt.Order.ID || res[1].Receipt.Replayed {
			t.Errorf("replay: %+v / %+v", res[1].Receipt, res[4].Receipt)
		}
		if got := r.remaining("s1")["A"]; got != 0 {
			t.Errorf("remaining %d, want 0", got)
		}
		if n := len(r.events("s1")); n != 3 { // created + 2 bought
			t.Errorf("%d events in s1, want 3", n)
		}
		if out := r.eng.BuyMany(r.ctx, nil); len(out) != 0 {
			t.Errorf("BuyMany(nil) = %v", out)
		}
	})
}

// TestBuyManyRebuildsAndReloads: a pipeline that meets a lost sale and an
// empty script cache still completes every buy.
func TestBuyManyRebuildsAndReloads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, _ := lostSale(t, b, 10, 1)
		if err := b.flushScripts(r.ctx, r.rdb); err != nil {
			t.Fatal(err)
		}
		var reqs []inventory.BuyRequest
		for _, u := range []string{"a", "b", "c", "d"} {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: u, Lines: lines("A", 1)})
		}
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Errorf("buy %d: %v", i, res.Err)
			}
		}
		if got := r.remaining("s1")["A"]; got != 6 {
			t.Errorf("remaining %d, want 6", got)
		}
	})
}

// TestEvalEveryCall: an engine that never uses the script cache works the
// same and never needs a reload.
func TestEvalEveryCall(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{EvalEveryCall: true})
		if err := b.flushScripts(r.ctx, r.rdb); err != nil {
			t.Fatal(err)
		}
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 2}}})
		for i, res := range r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
			{SaleID: "s1", UserID: "a", Lines: lines("A", 1)}, {SaleID: "s1", UserID: "b", Lines: lines("A", 1)},
		}) {
			if res.Err != nil {
				t.Errorf("buy %d: %v", i, res.Err)
			}
		}
		if _, err := r.eng.Buy(r.ctx, "s1", "c", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) {
			t.Errorf("err = %v, want sold out", err)
		}
		if n := r.eng.ScriptReloads(); n != 0 {
			t.Errorf("%d reloads with EVAL every call", n)
		}
	})
}

// TestBoughtCountsAsWritten: the bought hash holds each buyer's units as
// the decimal integer int.lua takes, whether buy.lua writes a first holding
// (from the asked quantity's own argument) or adds to one (formatted): a
// first buy, two buys of one buyer in one batch, and a buyer whose stored
// count is 0.
func TestBoughtCountsAsWritten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 1000, Items: []inventory.Item{{SKU: "A", Stock: 1000}, {SKU: "B", Stock: 1000}}})
		if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u3|A", "0").Err(); err != nil {
			t.Fatal(err)
		}
		reqs := []inventory.BuyRequest{
			{SaleID: "s1", UserID: "u1", Lines: lines("A", 3)},
			{SaleID: "s1", UserID: "u2", Lines: []inventory.Line{{SKU: "A", Qty: 12}, {SKU: "B", Qty: 1}}},
			{SaleID: "s1", UserID: "u2", Lines: lines("A", 12)},
			{SaleID: "s1", UserID: "u3", Lines: lines("A", 5)},
		}
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Fatalf("buy %d: %v", i, res.Err)
			}
		}
		got, err := r.rdb.HGetAll(r.ctx, r.key("s1", "bought")).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"u1|A": "3", "u2|A": "24", "u2|B": "1", "u3|A": "5"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("bought: %v, want %v", got, want)
		}
	})
}
