package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// CreateSale defines a sale. It never resets a sale that exists: if the id
// is taken, it returns an error matching ErrExists and changes nothing.
func (e *Engine) CreateSale(ctx context.Context, s Sale) error {
	if err := ValidateSale(s); err != nil {
		return err
	}
	_, err := e.createSale(ctx, s, newToken(), false)
	return err
}

// CreateSales creates several sales as one (the segments of a hot item,
// say): all of them, or none. A sale of one of their ids that exists
// already is taken as this call's only if it is exactly what this call
// would create — every field: limit, window, paused, items, their stock,
// payment timeout — and untouched since (no buy, no event but its
// creation), as a create that died part way leaves it; any other fails
// the call with ErrExists. Then commit, if not nil, runs: the caller
// records the sales in its system of record. If a create fails, or commit
// does, the sales this call created are removed again (each only while
// untouched) and the error is returned; the ones it took stay as they
// were. existed is how many it took.
func (e *Engine) CreateSales(ctx context.Context, sales []Sale, commit func(context.Context) error) (existed int, err error) {
	for _, s := range sales {
		if err := ValidateSale(s); err != nil {
			return 0, err
		}
	}
	token := newToken()
	var tried []string // created by this call, or maybe (a call whose outcome is unknown)
	for _, s := range sales {
		tried = append(tried, s.ID)
		made, err := e.createSale(ctx, s, token, true)
		if err != nil {
			return 0, e.discardAll(ctx, tried, token, err)
		}
		if !made {
			existed++
			tried = tried[:len(tried)-1]
		}
	}
	if commit != nil {
		if err := commit(ctx); err != nil {
			return 0, e.discardAll(ctx, tried, token, err)
		}
	}
	return existed, nil
}

// createSale runs create.lua with the call's token: made reports whether
// the call created the sale (with adopt, a sale exactly as this call would
// make it and untouched is no error, and not made).
func (e *Engine) createSale(ctx context.Context, s Sale, token string, adopt bool) (made bool, err error) {
	k := e.keys(s.ID)
	args := make([]any, 0, 11+2*len(s.Items))
	args = append(args, e.nowMs(), limitOf(s), unixMs(s.StartsAt), unixMs(s.EndsAt), flag(s.Paused), formatItems(s.Items),
		token, s.PaymentTimeout.Milliseconds(), flag(adopt), saleTableField, saleTableValue)
	for _, it := range s.Items {
		args = append(args, it.SKU, it.Stock)
	}
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.run.run(ctx, createScript, []string{k.sale, k.events}, args...)
	})
	if err != nil {
		return false, err
	}
	switch code(reply) {
	case codeOK:
		return true, nil
	case codeSame:
		return false, nil
	case codeExists:
		return false, fmt.Errorf("%w: sale %s", ErrExists, s.ID)
	}
	return false, unexpected(createScript, reply)
}

// discardTimeout bounds the undo of a failed CreateSales, which runs
// whatever becomes of its caller's context.
const discardTimeout = 10 * time.Second

// discardAll removes the sales a failed CreateSales created (discard.lua:
// each only if this call's and untouched), and returns cause, with what
// could not be removed.
func (e *Engine) discardAll(ctx context.Context, ids []string, token string, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
	defer cancel()
	var errs []error
	for _, id := range ids {
		k := e.keys(id)
		reply, err := e.retryTransient(ctx, func() ([]any, error) {
			return e.run.run(ctx, discardScript, []string{k.sale, k.events}, token)
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("sale %s: %w", id, err))
		case code(reply) == codeOK, code(reply) == codeExists: // removed; or never this call's
		case code(reply) == codeInFlight:
			errs = append(errs, fmt.Errorf("sale %s was used meanwhile", id))
		default:
			errs = append(errs, unexpected(discardScript, reply))
		}
	}
	if len(errs) > 0 {
		return errors.Join(cause, fmt.Errorf("seckill: a failed create left sales it made in redis: %w", errors.Join(errs...)))
	}
	return cause
}
