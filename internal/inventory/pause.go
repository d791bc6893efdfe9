package inventory

import (
	"context"
)

// Pause stops a sale from selling until Resume; buys answer ErrSaleNotActive.
func (e *Engine) Pause(ctx context.Context, saleID string) error {
	return e.setPaused(ctx, saleID, true)
}

// Resume lets a paused sale sell again.
func (e *Engine) Resume(ctx context.Context, saleID string) error {
	return e.setPaused(ctx, saleID, false)
}

func (e *Engine) setPaused(ctx context.Context, saleID string, paused bool) error {
	if err := validateID("sale", saleID); err != nil {
		return err
	}
	k := e.keys(saleID)
	// The marker makes a resent call (its reply lost) change nothing again.
	keys := []string{k.sale, k.events, k.op(newToken())}
	reply, err := e.runSale(ctx, saleID, pauseScript, keys, e.nowMs(), flag(paused))
	if err != nil {
		return err
	}
	if code(reply) != codeOK {
		return unexpected(pauseScript, reply)
	}
	return nil
}
