package demo

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

func TestDemoHoldsEveryInvariant(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T) service.Config{
		"redis+postgres": func(t *testing.T) service.Config {
			rdb := redistest.Standalone(t)
			return service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
				DatabaseURL: dbtest.PostgresURL(t)}
		},
		"embedded": func(t *testing.T) service.Config { return service.Config{DatabaseURL: dbtest.SQLiteURL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(context.Background(), cfg(t), Config{Buyers: 500, Concurrency: 32, HotStock: 50})
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK() || res.Oversold() != 0 || res.Errors != 0 {
				t.Fatalf("invariants broken: %+v", res)
			}
			if hot := res.Items[0]; hot.SKU != hotSKU || hot.Sold != 50 || hot.Remaining != 0 {
				t.Errorf("hot item %+v: 500 buyers should sell all 50 units", hot)
			}
			if res.Requests != res.Accepted+res.Rejected+res.Replays+res.Errors || res.Requests < 500 || res.OrdersInDB != res.Accepted {
				t.Errorf("counts do not add up: %+v", res)
			}
			var out bytes.Buffer
			Print(&out, res)
			if !regexp.MustCompile(`(?m)^oversold\s+0$`).Match(out.Bytes()) {
				t.Errorf("table lacks the oversold row:\n%s", out.String())
			}
		})
	}
}

// TestResultCatchesBrokenInvariants: the checks the demo's exit status rests
// on do fail when the numbers are wrong.
func TestResultCatchesBrokenInvariants(t *testing.T) {
	good := Result{Accepted: 2, OrdersInDB: 2, Items: []ItemResult{{SKU: "hot", Stock: 10, Sold: 2, Receipts: 2, Remaining: 8}}}
	good.Reconcile.Consistent = true
	if !good.OK() {
		t.Fatal("a consistent result is reported broken")
	}
	for name, broken := range map[string]func(r *Result){
		"oversold":        func(r *Result) { r.Items[0].Sold, r.Items[0].Receipts, r.Items[0].Remaining = 12, 12, -2 },
		"over the limit":  func(r *Result) { r.BuyersOverLimit = 1 },
		"lost order":      func(r *Result) { r.OrdersInDB = 1 },
		"receipts differ": func(r *Result) { r.Items[0].Receipts = 3 },
		"stock leak":      func(r *Result) { r.Items[0].Remaining = 7 },
		"errors":          func(r *Result) { r.Errors = 1 },
		"drift":           func(r *Result) { r.Reconcile.Consistent = false },
	} {
		r := good
		r.Items = append([]ItemResult(nil), good.Items...)
		broken(&r)
		if r.OK() {
			t.Errorf("%s: reported OK", name)
		}
	}
	if (Result{Items: []ItemResult{{Stock: 5, Sold: 7}, {Stock: -1, Sold: 100}}}).Oversold() != 2 {
		t.Error("Oversold miscounts")
	}
}

// TestDemoPaymentRound: with a payment timeout the demo runs its payment
// round: the reservations of the buyers who never pay expire and later
// buyers get their units; the table says so.
func TestDemoPaymentRound(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T) service.Config{
		"redis+postgres": func(t *testing.T) service.Config {
			rdb := redistest.Standalone(t)
			return service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
				DatabaseURL: dbtest.PostgresURL(t)}
		},
		"embedded": func(t *testing.T) service.Config { return service.Config{DatabaseURL: dbtest.SQLiteURL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(context.Background(), cfg(t), Config{Buyers: 50, Concurrency: 8, HotStock: 12, PaymentTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			p := res.Payment
			if p == nil || !p.OK() || !res.OK() || p.EarlyUnpaid != 4 || p.LateBought != 4 {
				t.Fatalf("payment round: %+v", p)
			}
			var out bytes.Buffer
			Print(&out, res)
			if !regexp.MustCompile(`(?m)^units later buyers got after the expiries\s+4$`).Match(out.Bytes()) {
				t.Errorf("table lacks the payment round:\n%s", out.String())
			}
		})
	}
}

// TestDemoRoomRound: with an admission lifetime the demo runs its room
// round: admissions in the published order, a lapse and a cancel whose
// units go to the next in line, every unit sold; the table says so.
func TestDemoRoomRound(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T) service.Config{
		"redis+postgres": func(t *testing.T) service.Config {
			rdb := redistest.Standalone(t)
			return service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
				DatabaseURL: dbtest.PostgresURL(t)}
		},
		"embedded": func(t *testing.T) service.Config { return service.Config{DatabaseURL: dbtest.SQLiteURL(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := Run(context.Background(), cfg(t), Config{Buyers: 20, Concurrency: 4, HotStock: 5, RoomAdmitTTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			r := res.Room
			if r == nil || !r.OK() || !res.OK() || len(r.Admitted) != 6 || r.Sold != 4 {
				t.Fatalf("room round: %+v", r)
			}
			if b := r.Buyers[0]; b.Outcome == "" || b.AdmittedAt != 1 || !b.InDraw {
				t.Errorf("the first in the draw's order: %+v", b)
			}
			var out bytes.Buffer
			Print(&out, res)
			if !regexp.MustCompile(`(?m)^admitted in\s+the published order`).Match(out.Bytes()) {
				t.Errorf("table lacks the room round:\n%s", out.String())
			}
		})
	}
}

// TestRoomResultCatchesBrokenRules: the room round's checks fail when
// the room admitted out of order, over the stock, or the draw did not check.
func TestRoomResultCatchesBrokenRules(t *testing.T) {
	good := RoomResult{Stock: 1, Sold: 1, Admitted: []string{"a"},
		Buyers: []RoomBuyer{{Name: "a", Outcome: "bought"}, {Name: "b", Outcome: "sold out"}}}
	if !good.OK() {
		t.Fatal("a good round is reported broken")
	}
	for name, broken := range map[string]func(r *RoomResult){
		"out of order": func(r *RoomResult) { r.Admitted = []string{"b"} },
		"over stock":   func(r *RoomResult) { r.MostLive = 2 },
		"draw":         func(r *RoomResult) { r.DrawChecked = "order" },
		"unsold":       func(r *RoomResult) { r.Sold = 0 },
		"no outcome":   func(r *RoomResult) { r.Buyers[1].Outcome = "" },
	} {
		r := good
		r.Buyers = append([]RoomBuyer(nil), good.Buyers...)
		broken(&r)
		if r.OK() {
			t.Errorf("%s: reported OK", name)
		}
	}
}

// TestAdmittedOrder: the admitted are ordered by their grants, so a room
// that granted a later buyer first shows out of the published order.
func TestAdmittedOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	bs := []RoomBuyer{{Name: "a", Until: t0}, {Name: "b", Until: t0}, {Name: "c", Until: t0.Add(time.Second)}, {Name: "d"}}
	if got := admittedOrder(bs); !slices.Equal(got, []string{"a", "b", "c"}) || bs[2].AdmittedAt != 3 || bs[3].AdmittedAt != 0 {
		t.Errorf("in order: %v %+v", got, bs)
	}
	bs = []RoomBuyer{{Name: "a", Until: t0.Add(time.Second)}, {Name: "b", Until: t0}}
	r := RoomResult{Stock: 2, Sold: 2, Buyers: bs, Admitted: admittedOrder(bs)}
	r.Buyers[0].Outcome, r.Buyers[1].Outcome = "bought", "bought"
	if r.OK() {
		t.Errorf("b granted before a reads as the published order: %v", r.Admitted)
	}
}
