package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/inventory"
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
