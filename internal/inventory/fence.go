package inventory

import (
	"context"
	"fmt"
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

// Unfence lifts the fence of degraded period epoch (or of an earlier one):
// once the sale's state in Redis has been repaired from the database
// (Repair), Redis sells it again. A fence of a later period stays, and
// Unfence returns ErrFenced: a lift resent by the client after a lost
// reply, arriving once another degraded period has fenced the sale again,
// must not let Redis sell beside the database. A sale missing from Redis
// has no fence to lift (nil).
func (e *Engine) Unfence(ctx context.Context, saleID string, epoch int64) error {
	reply, err := e.fenceReply(ctx, saleID, "", strconv.FormatInt(epoch+1, 10))
	if err != nil {
		return err
	}
	if code(reply) == 5 {
		return fmt.Errorf("%w: sale %s: a fence of a degraded period after %d stays", ErrFenced, saleID, epoch)
	}
	return nil
}

// LiftStaleFence lifts the sale's fence only if it was set for an epoch
// before epoch (one a recovery that died half way left behind), and
// reports whether the sale is unfenced now. A newer fence stays.
func (e *Engine) LiftStaleFence(ctx context.Context, saleID string, epoch int64) (bool, error) {
	return e.fence(ctx, saleID, "", strconv.FormatInt(epoch, 10))
}

func (e *Engine) fence(ctx context.Context, saleID string, args ...any) (bool, error) {
	reply, err := e.fenceReply(ctx, saleID, args...)
	if err != nil {
		return false, err
	}
	return code(reply) == 1, nil
}

func (e *Engine) fenceReply(ctx context.Context, saleID string, args ...any) ([]any, error) {
	if err := validateID("sale", saleID); err != nil {
		return nil, err
	}
	if len(args) == 1 {
		args = append(args, "")
	}
	return e.run.run(ctx, fenceScript, []string{e.keys(saleID).sale}, args...)
}
