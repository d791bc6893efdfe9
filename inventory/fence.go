package inventory

import (
	"context"
	"strconv"
)

// statusFenced is buy.lua's not-selling status of a fenced sale.
const statusFenced = "fenced"

// Fence fences the sale off in Redis: every buy of it is refused with
// ErrFenced until Unfence, whatever Redis holds of its stock. A service in
// degraded mode (the database sells) fences each sale the first time it
// reaches Redis again, so an instance that has not yet heard of degraded
// mode cannot sell the stale stock Redis still holds. epoch names the
// degraded period. A sale missing from Redis is left alone: it is rebuilt
// from the database only when it is used, and the caller's Loader decides
// then. Fence reports whether the sale was in Redis.
func (e *Engine) Fence(ctx context.Context, saleID string, epoch int64) (bool, error) {
	return e.fence(ctx, saleID, strconv.FormatInt(epoch, 10), "")
}

// Unfence lifts the fence: once the sale's state in Redis has been repaired
// from the database (Repair), Redis sells it again.
func (e *Engine) Unfence(ctx context.Context, saleID string) error {
	_, err := e.fence(ctx, saleID, "", "")
	return err
}

// LiftStaleFence lifts the sale's fence only if it was set for an epoch
// before epoch (one a recovery that died half way left behind), and
// reports whether the sale is unfenced now. A newer fence stays.
func (e *Engine) LiftStaleFence(ctx context.Context, saleID string, epoch int64) (bool, error) {
	return e.fence(ctx, saleID, "", strconv.FormatInt(epoch, 10))
}

func (e *Engine) fence(ctx context.Context, saleID string, args ...any) (bool, error) {
	if err := validateID("sale", saleID); err != nil {
		return false, err
	}
	if len(args) == 1 {
		args = append(args, "")
	}
	reply, err := e.run.run(ctx, fenceScript, []string{e.keys(saleID).sale}, args...)
	if err != nil {
		return false, err
	}
	return code(reply) == 1, nil
}
