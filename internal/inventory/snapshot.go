package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Counted is what Redis holds of a sale: its state (stock counters), read
// at one instant with whatever the caller queued beside it, and per sku the
// units in live order records (as UnitsInOrders) and in per-user counts (as
// UnitsHeld), scanned just after.
type Counted struct {
	State      SaleState
	Sold, Held map[string]int64
}

// CountWith reads the sale's hash in one transaction (MULTI/EXEC) together
// with whatever also queues on it (reads of other keys of the sale: they
// share its slot), so that the stock counters and those reads are of one
// instant: no buy, cancel or restock runs between them. The order records
// and per-user counts are scanned after it (HSCAN, a page at a time), not in
// the transaction: reading every order of a big sale at once would hold
// Redis, and every buy, for as long. They may so include what changed just
// after that instant. Results of what also queued are read from its
// commands after CountWith returns. A sale missing from Redis is rebuilt
// first, as Stock does. The engine's client must run transactions
// (TxPipelined), as every go-redis client does.
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
		var sale *redis.MapStringStringCmd
		_, err := txc.TxPipelined(ctx, func(p redis.Pipeliner) error {
			sale = p.HGetAll(ctx, k.sale)
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
		if c.Sold, err = e.UnitsInOrders(ctx, saleID); err != nil {
			return Counted{}, err
		}
		if c.Held, err = e.UnitsHeld(ctx, saleID); err != nil {
			return Counted{}, err
		}
		return c, nil
	}
}
