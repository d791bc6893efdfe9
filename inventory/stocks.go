package inventory

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Stocks reads several sales as Stock does, in one pipeline (one round trip
// per node): states[i] and errs[i] are sale saleIDs[i]'s. A sale missing
// from Redis is rebuilt, as Stock does, on its own.
func (e *Engine) Stocks(ctx context.Context, saleIDs []string) (states []SaleState, errs []error) {
	states, errs = make([]SaleState, len(saleIDs)), make([]error, len(saleIDs))
	p := e.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(saleIDs))
	for i, id := range saleIDs {
		if errs[i] = validateID("sale", id); errs[i] == nil {
			cmds[i] = p.HGetAll(ctx, e.keys(id).sale)
		}
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	for i, id := range saleIDs {
		if cmds[i] == nil {
			continue
		}
		h, err := cmds[i].Result()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("seckill: read sale %s: %w", id, err)
		case len(h) == 0:
			states[i], errs[i] = e.Stock(ctx, id)
		default:
			states[i], errs[i] = e.decodeSale(id, h)
		}
	}
	return states, errs
}
