package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestLiveFiguresFollowPaysAndExpiries: a pay or an expiry changes no
// count Redis keeps (the sale's orders stay as many), and the consumer
// stores it within milliseconds, so the next sample finds the stream moved
// and nothing in flight. The sample reads the database's figures again all
// the same: confirmed, paid, awaiting and expired are right at once, not
// up to half a minute later (the first read of each sale here falls due
// again only about 30 s after it: pay21 and exp56 are chosen so), and not
// never for a sale that leaves the live set meanwhile. Before, the paid
// order read unpaid and the expired one confirmed.
func TestLiveFiguresFollowPaysAndExpiries(t *testing.T) {
	ctx := context.Background()
	s := startSampledByHand(t, pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond})
	for _, sale := range []inventory.Sale{
		{ID: "pay21", PerUserLimit: 1, PaymentTimeout: time.Hour, Items: []inventory.Item{{SKU: "A", Stock: 10}}},
		{ID: "exp56", PerUserLimit: 1, PaymentTimeout: 1500 * time.Millisecond, Items: []inventory.Item{{SKU: "A", Stock: 10}}},
	} {
		if err := s.db.CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
			t.Fatal(err)
		}
		if err := s.eng.CreateSale(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, waitfor.Patience, "both sales live", func() error {
		if live, err := s.liveSaleIDs(ctx); err != nil || len(live) != 2 {
			return fmt.Errorf("live sales %v (%v)", live, err)
		}
		return nil
	})
	st := newSamplerState()
	s.sample(ctx, st, time.Second) // the first read of each
	buy := func(sale, user string) string {
		t.Helper()
		rc, err := s.eng.Buy(ctx, sale, user, []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatalf("buy in %s: %v", sale, err)
		}
		return rc.Order.ID
	}
	paid, _ := buy("pay21", "u1"), buy("pay21", "u2")
	expiring := buy("exp56", "u1")
	saleOf := func(v liveView, id string) liveSale {
		for _, ls := range v.Sales {
			if ls.ID == id {
				return ls
			}
		}
		t.Fatalf("sale %s not in the live view", id)
		return liveSale{}
	}
	waitfor.Until(t, waitfor.Patience, "the buys stored and sampled", func() error {
		v := s.sample(ctx, st, time.Second)
		if p, e := saleOf(v, "pay21"), saleOf(v, "exp56"); p.Confirmed != 2 || e.Confirmed != 1 || p.Backlog+e.Backlog != 0 {
			return fmt.Errorf("pay21 %+v, exp56 %+v", p, e)
		}
		return nil
	})
	if _, _, err := s.eng.Pay(ctx, paid, "u1", "ref-1"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the pay and the expiry stored", func() error {
		p, err := s.db.Order(ctx, paid)
		if err != nil || p.Payment != inventory.PaymentPaid {
			return fmt.Errorf("paid order %+v (%v)", p, err)
		}
		e, err := s.db.Order(ctx, expiring)
		if err != nil || e.Payment != inventory.PaymentExpired {
			return fmt.Errorf("expiring order %+v (%v)", e, err)
		}
		return nil
	})
	v := s.sample(ctx, st, time.Second)
	if p := saleOf(v, "pay21"); p.Confirmed != 2 || p.Paid != 1 || p.Awaiting != 1 || p.Expired != 0 || p.Pending != 0 {
		t.Errorf("pay21, two orders, one paid, one awaiting payment, reads %+v", p)
	}
	if e := saleOf(v, "exp56"); e.Confirmed != 0 || e.Paid != 0 || e.Awaiting != 0 || e.Expired != 1 || e.Pending != 0 {
		t.Errorf("exp56, one order, expired, reads %+v", e)
	}
}
