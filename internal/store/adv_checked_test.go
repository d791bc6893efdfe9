package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestDegradedBuyOfNoBuy: the database never sells the zero CheckedBuy,
// not even once it is moved to a sale (InSale), as failover moves a buy to
// its home segment: no order of user "" without lines reaches PostgreSQL.
// (Fails if InSale makes a buy of the zero value: the store, which does
// not check a buy again, would write that order.)
func TestDegradedBuyOfNoBuy(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		var zero inventory.CheckedBuy
		if rc, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: zero, Now: now}); err == nil {
			t.Errorf("the zero CheckedBuy was sold: %+v", rc)
		}
		if moved, err := zero.InSale("s1"); err == nil {
			if rc, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: moved, Now: now}); err == nil {
				t.Errorf("the zero CheckedBuy moved to s1 was sold: %+v", rc)
			}
		} else if !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("InSale of the zero CheckedBuy = %v, want ErrInvalid", err)
		}
		counts, err := s.CountOrders(ctx, "s1")
		must(t, err)
		check(t, "orders of s1 after buys of nothing", counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 0, inventory.OrderCancelled: 0})
	})
}

// TestDegradedBuySellsWhatWasChecked: the database sells the lines that
// were checked, whatever the caller or a holder of the buy (failover's
// BeforeDatabaseBuy hook sees it) did to the slices after the check.
// (Fails if a CheckedBuy shares its lines: a qty of -3 set after the check
// would be sold, and add 3 units to the degraded stock.)
func TestDegradedBuySellsWhatWasChecked(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		req := inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: []inventory.Line{line("A", 1)}}
		c := checked(req)
		req.Lines[0].Qty = -3
		c.Lines()[0].Qty = -3
		rc, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: c, Now: now})
		must(t, err)
		check(t, "the order's lines", rc.Order.Items, []inventory.Line{line("A", 1)})
		check(t, "remaining", rc.Remaining, []int64{4})
	})
}
