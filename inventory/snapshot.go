package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Counted is what Redis holds of a sale at one instant: its state (stock
// counters), and per sku the units in live order records (as
// UnitsInOrders) and in per-user counts (as UnitsHeld).
type Counted struct {
	State      SaleState
	Sold, Held map[string]int64
}

// CountWith reads the sale's hash, order records and per-user counts in one
// transaction (MULTI/EXEC), together with whatever also queues on it (reads
// of other keys of the sale: they share its slot), so that all of them are
// of one instant: no buy, cancel or restock runs between them. The
// transaction holds Redis for the time of reading every order record of the
// sale: for reconciliation, not for a hot path. Results of what also queued
// are read from its commands after CountWith returns. A sale missing from
// Redis is rebuilt first, as Stock does. The engine's client must run
// transactions (TxPipelined), as every go-redis client does.
func (e *Engine) CountWith(ctx context.Context, saleID string, also func(p redis.Pipeliner)) (Counted, error) {
	if err := validateID("sale", saleID); err != nil {
		return Counted{}, err
	}
	txc, ok := e.rdb.(interface {
		TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	})
	if !ok {
		return Counted{}, fmt.Errorf("seckill: read sale %s: the engine's Redis client runs no transactions", saleID)
	}
	k := e.keys(saleID)
	for attempt := 0; ; attempt++ {
		var sale, orders, bought *redis.MapStringStringCmd
		_, err := txc.TxPipelined(ctx, func(p redis.Pipeliner) error {
			sale, orders, bought = p.HGetAll(ctx, k.sale), p.HGetAll(ctx, k.orders), p.HGetAll(ctx, k.bought)
			also(p)
			return nil
		})
		var reply redis.Error // a reply error of what also queued is its own
		if err != nil && !errors.As(err, &reply) {
			return Counted{}, fmt.Errorf("seckill: read sale %s: %w", saleID, err)
		}
		h, err := sale.Result()
		if err != nil {
			return Counted{}, fmt.Errorf("seckill: read sale %s: %w", saleID, err)
		}
		if len(h) == 0 {
			if attempt == missingRetries {
				return Counted{}, fmt.Errorf("%w: sale %s vanished again after a rebuild", ErrUnavailable, saleID)
			}
			if err := e.rebuild(ctx, saleID); err != nil {
				return Counted{}, err
			}
			continue
		}
		var c Counted
		if c.State, err = e.decodeSale(saleID, h); err != nil {
			return Counted{}, err
		}
		o, err1 := orders.Result()
		b, err2 := bought.Result()
		if err1 != nil || err2 != nil {
			return Counted{}, fmt.Errorf("seckill: read sale %s: %w", saleID, errors.Join(err1, err2))
		}
		c.Sold = map[string]int64{}
		if err := addUnitsInOrders(c.Sold, saleID, o); err != nil {
			return Counted{}, err
		}
		c.Held = tally(saleID, saleHashes{hashBought: b}).held
		return c, nil
	}
}
