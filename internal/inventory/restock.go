package inventory

import (
	"context"
)

// Restock adds qty units to a limited item and returns its remaining stock.
// Unlimited items cannot be restocked (ErrInvalid), nor can a sale that has
// ended, closed or past its end by the Redis server's clock
// (ErrSaleNotActive).
func (e *Engine) Restock(ctx context.Context, saleID, sku string, qty int64) (int64, error) {
	if err := validateID("sale", saleID); err != nil {
		return 0, err
	}
	if err := validateID("sku", sku); err != nil {
		return 0, err
	}
	if err := validateQty("qty", qty); err != nil {
		return 0, err
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.events, k.op(newToken())}
	args := []any{e.nowMs(), sku, qty, int64(maxStocked), e.StockChannel(), saleID + "|" + sku, e.scriptNow()}
	done := e.soldOut.returning()
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.runSale(ctx, saleID, restockScript, keys, args...)
	})
	done(saleID, sku) // even a failed call may have added stock
	if err != nil {
		return 0, err
	}
	switch code(reply) {
	case codeOK, codeReplay:
		if n, ok := at(reply, 1).(int64); ok {
			return n, nil
		}
	case codeUnknown:
		return 0, &NotFoundError{Kind: "sku", IDs: []string{sku}}
	case codeNotActive:
		return 0, &NotActiveError{Status: StatusEnded}
	case codeRefused:
		if str(at(reply, 1)) == "unlimited" {
			return 0, invalid("sku", "%s has unlimited stock", sku)
		}
		return 0, invalid("qty", "would stock %s with more than %d units in total", sku, int64(maxStocked))
	}
	return 0, unexpected(restockScript, reply)
}
