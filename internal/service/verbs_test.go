package service_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// buyA is a buy of one unit of sku A.
func buyA(sale, user string) service.BuyRequest {
	return service.BuyRequest{SaleID: sale, UserID: user, Lines: []inventory.Line{{SKU: "A", Qty: 1}}}
}

// saleDef is a sale of sku A (stock units, on k segments), per-user limit 1.
func saleDef(id string, stock, k int64) service.SaleDef {
	def := service.SaleDef{Sale: inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: stock}}}}
	if k > 1 {
		def.Segments = []int64{k}
	}
	return def
}

// mustVerb fails the test on err.
func mustVerb(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestVerbsRefuseWithTheSentinels: each verb called from Go refuses each
// refusal with an error that matches its sentinel of package inventory
// (errors.Is), as the HTTP API answers it with its code; a rate limit's
// refusal is an *inventory.ThrottledError that says when to retry; what
// the API answers 503 (while the database sells: a pay, a close, a buy of
// a sale with purchase tokens) is inventory.ErrUnavailable.
func TestVerbsRefuseWithTheSentinels(t *testing.T) {
	forEachStackConfig(t, func(cfg *service.Config) {
		cfg.DegradedTick, cfg.DegradedGrace = 50*time.Millisecond, 200*time.Millisecond
		cfg.RateLimitUser = "off"
	}, func(t *testing.T, a *app) {
		ctx, svc := a.ctx, a.svc
		for _, def := range []service.SaleDef{saleDef("s", 1, 1), saleDef("seg", 4, 2)} {
			_, err := svc.CreateSale(ctx, def)
			mustVerb(t, "create "+def.ID, err)
		}
		tok := saleDef("tok", 10, 1)
		tok.RequirePurchaseToken, tok.PerUserLimit = true, 2 // a spent token, not the limit, refuses u1's second buy
		pay := saleDef("pay", 10, 1)
		pay.PaymentTimeout = time.Hour
		slow := saleDef("slow", 10, 1)
		slow.RateLimits.PerUser = "1/h"
		later := saleDef("later", 10, 1)
		later.StartsAt = time.Now().Add(time.Hour)
		for _, def := range []service.SaleDef{tok, pay, slow, later} {
			_, err := svc.CreateSale(ctx, def)
			mustVerb(t, "create "+def.ID, err)
		}
		rc, err := svc.Buy(ctx, buyA("s", "u1"))
		mustVerb(t, "buy", err)
		sold := rc.Order.ID
		rc, err = svc.Buy(ctx, buyA("pay", "u1"))
		mustVerb(t, "buy", err)
		awaiting := rc.Order.ID
		_, err = svc.Pay(ctx, awaiting, "u1", "ref-1")
		mustVerb(t, "pay", err)
		rc, err = svc.Buy(ctx, buyA("pay", "u2"))
		mustVerb(t, "buy", err)
		cancelled := rc.Order.ID
		_, err = svc.Cancel(ctx, cancelled, "u2")
		mustVerb(t, "cancel", err)
		token, _, err := svc.IssuePurchaseToken(ctx, "tok", "u1")
		mustVerb(t, "token", err)
		laterToken, _, err := svc.IssuePurchaseToken(ctx, "tok", "u4") // for a buy while the database sells
		mustVerb(t, "token", err)
		withToken := buyA("tok", "u1")
		withToken.PurchaseToken = token
		_, err = svc.Buy(ctx, withToken)
		mustVerb(t, "buy with a token", err)
		_, err = svc.Buy(ctx, buyA("slow", "u1"))
		mustVerb(t, "buy", err)
		keyed := buyA("seg", "u1")
		keyed.IdempotencyKey = "k1"
		_, err = svc.Buy(ctx, keyed)
		mustVerb(t, "buy", err)

		unknownOrder := "s.01JD0000000000000000000000"
		badSale := saleDef("bad", 1, 1)
		badSale.Items[0].Stock = -2
		badLimit := saleDef("badlimit", 1, 1)
		badLimit.RateLimits.PerIP = "5/fortnight"
		badSegments := saleDef("badseg", 1, 1)
		badSegments.Segments = []int64{65}
		twoLines := buyA("s", "u9")
		twoLines.Lines = append(twoLines.Lines, inventory.Line{SKU: "A", Qty: 1})
		otherLines := keyed
		otherLines.Lines = []inventory.Line{{SKU: "A", Qty: 2}}
		forged := buyA("tok", "u2")
		forged.PurchaseToken = token + "x"
		spent := buyA("tok", "u1")
		spent.PurchaseToken = token
		err1 := func(_ any, err error) error { return err }
		err2 := func(_, _ any, err error) error { return err }
		for _, c := range []struct {
			name string
			err  error
			want error
		}{
			{"create: a stock below -1", err1(svc.CreateSale(ctx, badSale)), inventory.ErrInvalid},
			{"create: a rate limit that does not parse", err1(svc.CreateSale(ctx, badLimit)), inventory.ErrInvalid},
			{"create: 65 segments", err1(svc.CreateSale(ctx, badSegments)), inventory.ErrInvalid},
			{"create: an id in use", err1(svc.CreateSale(ctx, saleDef("s", 1, 1))), inventory.ErrExists},
			{"create: an id in use, segmented", err1(svc.CreateSale(ctx, saleDef("s", 4, 2))), inventory.ErrExists},
			{"sale: unknown", err1(svc.Sale(ctx, "nope")), inventory.ErrNotFound},
			{"restock: unknown sale", err1(svc.Restock(ctx, "nope", "A", 1)), inventory.ErrNotFound},
			{"restock: unknown sku", err1(svc.Restock(ctx, "s", "Z", 1)), inventory.ErrNotFound},
			{"restock: a quantity of 0", err1(svc.Restock(ctx, "s", "A", 0)), inventory.ErrInvalid},
			{"pause: unknown sale", err1(svc.SetPaused(ctx, "nope", true)), inventory.ErrNotFound},
			{"close: a segment", err1(svc.CloseSale(ctx, "seg:0")), inventory.ErrNotFound},
			{"reconcile: unknown sale", err1(svc.Reconcile(ctx, "nope")), inventory.ErrNotFound},
			{"buy: two lines of one sku", err1(svc.Buy(ctx, twoLines)), inventory.ErrInvalid},
			{"buy: unknown sale", err1(svc.Buy(ctx, buyA("nope", "u1"))), inventory.ErrNotFound},
			{"buy: sold out", err1(svc.Buy(ctx, buyA("s", "u2"))), inventory.ErrSoldOut},
			{"buy: over the per-user limit", err1(svc.Buy(ctx, buyA("pay", "u1"))), inventory.ErrLimitExceeded},
			{"buy: not started", err1(svc.Buy(ctx, buyA("later", "u1"))), inventory.ErrSaleNotActive},
			{"buy: the sale's rate limit", err1(svc.Buy(ctx, buyA("slow", "u1"))), inventory.ErrThrottled},
			{"buy: a key of other lines", err1(svc.Buy(ctx, otherLines)), inventory.ErrIdempotencyMismatch},
			{"buy: no purchase token", err1(svc.Buy(ctx, buyA("tok", "u2"))), inventory.ErrTokenRequired},
			{"buy: a forged purchase token", err1(svc.Buy(ctx, forged)), inventory.ErrTokenRequired},
			{"buy: another buyer's purchase token", err1(svc.Buy(ctx, service.BuyRequest{SaleID: "tok", UserID: "u3",
				Lines: []inventory.Line{{SKU: "A", Qty: 1}}, PurchaseToken: token})), inventory.ErrTokenRequired},
			{"buy: a spent purchase token", err1(svc.Buy(ctx, spent)), inventory.ErrTokenSpent},
			{"order: unknown", err1(svc.Order(ctx, unknownOrder)), inventory.ErrNotFound},
			{"order: malformed id", err1(svc.Order(ctx, "x")), inventory.ErrNotFound},
			{"cancel: unknown", err1(svc.Cancel(ctx, unknownOrder, "")), inventory.ErrNotFound},
			{"cancel: someone else's", err1(svc.Cancel(ctx, sold, "u2")), inventory.ErrNotFound},
			{"pay: malformed id", err1(svc.Pay(ctx, "x", "", "ref")), inventory.ErrNotFound},
			{"pay: unknown", err1(svc.Pay(ctx, "pay.01JD0000000000000000000000", "", "ref")), inventory.ErrNotFound},
			{"pay: an empty ref", err1(svc.Pay(ctx, awaiting, "u1", "")), inventory.ErrInvalid},
			{"pay: a sale without a payment step", err1(svc.Pay(ctx, sold, "u1", "ref")), inventory.ErrNoPayment},
			{"pay: paid with another ref", err1(svc.Pay(ctx, awaiting, "u1", "ref-2")), inventory.ErrAlreadyPaid},
			{"pay: cancelled", err1(svc.Pay(ctx, cancelled, "u2", "ref")), inventory.ErrOrderClosed},
			{"purchase token: a bad sale id", err2(svc.IssuePurchaseToken(ctx, "a b", "u1")), inventory.ErrInvalid},
			{"purchase token: unknown sale", err2(svc.IssuePurchaseToken(ctx, "nope", "u1")), inventory.ErrNotFound},
			{"purchase token: not started", err2(svc.IssuePurchaseToken(ctx, "later", "u1")), inventory.ErrSaleNotActive},
		} {
			if !errors.Is(c.err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
			}
		}
		if _, err := svc.Buy(ctx, buyA("slow", "u1")); err == nil {
			t.Error("a second buy within the sale's rate limit was let through")
		} else if throttled, ok := errors.AsType[*inventory.ThrottledError](err); !ok || throttled.RetryAfter <= 0 {
			t.Errorf("a refusal by the rate limit: %#v, want an *inventory.ThrottledError with RetryAfter", err)
		}

		// The per-address limit applies to a buy that gives its address.
		ipLimited := saleDef("ip", 10, 1)
		ipLimited.RateLimits.PerIP = "1/h"
		_, err = svc.CreateSale(ctx, ipLimited)
		mustVerb(t, "create ip", err)
		from := netip.MustParseAddr("192.0.2.7")
		for i, user := range []string{"u1", "u2"} {
			req := buyA("ip", user)
			req.ClientIP = from
			if _, err := svc.Buy(ctx, req); (i == 0) != (err == nil) || i == 1 && !errors.Is(err, inventory.ErrThrottled) {
				t.Errorf("buy %d from one address under a limit of 1/h: %v", i+1, err)
			}
		}
		if _, err := svc.Buy(ctx, buyA("ip", "u3")); err != nil {
			t.Errorf("a buy without an address, under a per-address limit: %v", err)
		}

		// While the database sells.
		a.forceDegraded()
		n := 0
		waitfor.Until(t, waitfor.Patience, "a buy from the database", func() error {
			n++
			_, err := svc.Buy(ctx, buyA("ip", fmt.Sprint("d", n)))
			return err
		})
		withToken.UserID, withToken.PurchaseToken = "u4", laterToken
		for _, c := range []struct {
			name string
			err  error
		}{
			{"pay", err1(svc.Pay(ctx, awaiting, "u1", "ref-1"))},
			{"close", err1(svc.CloseSale(ctx, "s"))},
			{"a buy with a purchase token", err1(svc.Buy(ctx, withToken))},
		} {
			if !errors.Is(c.err, inventory.ErrUnavailable) {
				t.Errorf("%s while the database sells: %v, want ErrUnavailable", c.name, c.err)
			}
		}
	})
}

// forEachStackConfig is forEachStack with each stack's config changed by
// set before the service starts.
func forEachStackConfig(t *testing.T, set func(cfg *service.Config), f func(t *testing.T, a *app)) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			cfg := st.start(t)
			set(&cfg)
			f(t, startApp(t, cfg))
		})
	}
}

// TestVerbsDoWhatTheAPIDoes: the verbs called from Go act as the API: a
// sale created shows as GET shows it, a buy's order is the public sale's
// with its payment step and reaches the database, a repeat with its key
// is Replayed, a cancel returns the unit, a pay is recorded, a restock
// and a pause show, a close ends the sale, reconcile is consistent.
func TestVerbsDoWhatTheAPIDoes(t *testing.T) {
	forEachStack(t, func(t *testing.T, a *app) {
		ctx, svc := a.ctx, a.svc
		def := saleDef("hot", 8, 2)
		def.PaymentTimeout = time.Hour
		v, err := svc.CreateSale(ctx, def)
		mustVerb(t, "create", err)
		if v.State.Sale.ID != "hot" || v.State.Status != inventory.StatusActive || len(v.State.Items) != 1 ||
			v.State.Items[0].Remaining != 8 || v.State.Sale.PaymentTimeout != time.Hour || v.Archived {
			t.Fatalf("created: %+v", v)
		}
		r := a.call("GET", "/v1/sales/hot", "", nil)
		mustStatus(t, r, http.StatusOK)
		if got := r.json(t); got["payment_timeout_s"] != 3600.0 || got["status"] != "active" {
			t.Fatalf("GET of the sale created from Go: %s", r.body)
		}

		req := buyA("hot", "u1")
		req.IdempotencyKey = "k1"
		rc, err := svc.Buy(ctx, req)
		mustVerb(t, "buy", err)
		if rc.Replayed || rc.Order.SaleID != "hot" || rc.Order.UserID != "u1" || rc.Order.Payment != inventory.PaymentAwaiting ||
			len(rc.Remaining) != 1 {
			t.Fatalf("receipt: %+v", rc)
		}
		again, err := svc.Buy(ctx, req)
		mustVerb(t, "buy again", err)
		if !again.Replayed || again.Order.ID != rc.Order.ID {
			t.Fatalf("the same buy again: %+v, want the order %s replayed", again, rc.Order.ID)
		}
		waitfor.Until(t, waitfor.Patience, "the order of a buy from Go in the database", func() error {
			_, err := svc.Store().Order(ctx, rc.Order.ID)
			return err
		})
		o, err := svc.Order(ctx, rc.Order.ID)
		mustVerb(t, "order", err)
		if o.SaleID != "hot" || o.Status != inventory.OrderConfirmed || o.Payment != inventory.PaymentAwaiting {
			t.Fatalf("order: %+v", o)
		}
		paid, err := svc.Pay(ctx, o.ID, "u1", "ref-1")
		mustVerb(t, "pay", err)
		if paid.Payment != inventory.PaymentPaid || paid.PaymentRef != "ref-1" || paid.SaleID != "hot" {
			t.Fatalf("paid: %+v", paid)
		}
		rc2, err := svc.Buy(ctx, buyA("hot", "u2"))
		mustVerb(t, "buy", err)
		cancelled, err := svc.Cancel(ctx, rc2.Order.ID, "") // an operator's
		mustVerb(t, "cancel", err)
		if cancelled.Status != inventory.OrderCancelled || cancelled.SaleID != "hot" {
			t.Fatalf("cancelled: %+v", cancelled)
		}
		remaining, err := svc.Restock(ctx, "hot", "A", 2)
		mustVerb(t, "restock", err)
		if v, err := svc.Sale(ctx, "hot"); err != nil || remaining != 9 || v.State.Items[0].Remaining != 9 || v.State.Items[0].Stocked != 10 {
			t.Fatalf("restock of 2 with 7 left: %d remain; the sale: %+v, %v", remaining, v, err)
		}
		v, err = svc.SetPaused(ctx, "hot", true)
		mustVerb(t, "pause", err)
		if v.State.Status != inventory.StatusPaused {
			t.Fatalf("paused: %s", v.State.Status)
		}
		if _, err := svc.Buy(ctx, buyA("hot", "u3")); !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("a buy of a paused sale: %v", err)
		}
		v, err = svc.SetPaused(ctx, "hot", false)
		mustVerb(t, "resume", err)
		if v.State.Status != inventory.StatusActive {
			t.Fatalf("resumed: %s", v.State.Status)
		}
		v, err = svc.CloseSale(ctx, "hot")
		mustVerb(t, "close", err)
		if v.State.Status != inventory.StatusEnded {
			t.Fatalf("closed: %s", v.State.Status)
		}
		waitfor.Until(t, waitfor.Patience, "a consistent reconcile", func() error {
			rep, err := svc.Reconcile(ctx, "hot")
			if err != nil || !rep.Consistent {
				return fmt.Errorf("%+v, %v", rep, err)
			}
			return nil
		})
	})
}
