// Package expiry is the process that expires reservations: the orders of
// sales with a payment timeout that were not paid by their deadline. Every
// instance of the service runs it; the expiry of an order is one atomic
// script in Redis (inventory's ExpireDue), so two instances expiring the
// same sale at once expire each order once, and one instance alone (the
// others killed or stopped) expires them all.
//
// A tick asks Redis, in one pipeline, which of the sales with a payment
// step have a deadline that passed (the earliest entry of each sale's
// deadlines, an index by deadline: no order is scanned), then expires those
// sales' due orders in batches. With a tick of Options.Tick (250 ms by
// default) an order expires well within 2 s of its deadline while any
// instance runs.
//
// The same pipeline finds the sales missing from Redis (a Redis that lost
// their keys): Options.Lost brings back those whose reservations the system
// of record holds, so that they expire too. While Options.Paused says so
// (Redis does not sell: degraded mode, or a Redis that restarted and may be
// behind the system of record until the recovery repairs it) nothing is
// expired.
package expiry

import (
	"context"
	"log/slog"
	"time"
)

// Engine is what the loop needs of the inventory engine.
type Engine interface {
	// DueSales returns those of saleIDs whose earliest payment deadline
	// has passed (by Redis's clock), and those missing from Redis (lost).
	DueSales(ctx context.Context, saleIDs []string) (due, lost []string, err error)
	// ExpireDue expires up to max due orders of the sale; more says that
	// more are due.
	ExpireDue(ctx context.Context, saleID string, max int) (expired []string, more bool, err error)
}

// Sale is a sale with a payment step, as the loop sees it.
type Sale struct {
	ID      string
	EndsAt  time.Time     // zero: no end
	Timeout time.Duration // its payment timeout
}

// Options tune the loop. Zero values take the defaults.
type Options struct {
	// Sales lists the sales with a payment step (the system of record).
	Sales func(ctx context.Context) ([]Sale, error)
	// Tick is how often due deadlines are looked for. Default 250 ms.
	Tick time.Duration
	// Refresh is how often Sales is called. Default 1 s.
	Refresh time.Duration
	// Recent: a tick looks at the sales that have no end or whose last
	// deadline (end + timeout) is less than Recent ago; every Sweep it
	// looks at all of them (reservations of a sale that ended long ago
	// can only be left if every instance was down past their deadline).
	// Defaults 1 h and 1 min.
	Recent, Sweep time.Duration
	// Batch is the most orders one script call expires. Default 500.
	Batch int
	// Lost, if set, is told of the sales (of those the tick looks at)
	// missing from Redis: a Redis that lost their keys. Their reservations
	// are then only in the system of record; Lost brings back the sales
	// that have some (a rebuild), and a later tick expires them.
	Lost func(ctx context.Context, saleIDs []string) error
	// Paused, if set, says whether expiring must wait: while Redis does
	// not sell (the database sells, or Redis restarted and may be behind
	// the database until the recovery repairs it: an order paid there may
	// still await payment here). Asked before each expiry.
	Paused func() bool
	// OnExpired, if set, is told of every order expired.
	OnExpired func(saleID string, orders []string)
	// Logger logs the errors of a tick (at most one a Refresh). Default
	// slog.Default().
	Logger *slog.Logger
}

// Loop expires due reservations until its context ends.
type Loop struct {
	eng  Engine
	opts Options

	sales     []Sale
	refreshed time.Time
	swept     time.Time
	logged    time.Time
}

// New returns a loop over eng.
func New(eng Engine, opts Options) *Loop {
	if opts.Tick <= 0 {
		opts.Tick = 250 * time.Millisecond
	}
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if opts.Recent <= 0 {
		opts.Recent = time.Hour
	}
	if opts.Sweep <= 0 {
		opts.Sweep = time.Minute
	}
	if opts.Batch <= 0 {
		opts.Batch = 500
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Loop{eng: eng, opts: opts}
}

// Run ticks until ctx ends; it returns ctx's error.
func (l *Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.opts.Tick)
	defer t.Stop()
	for {
		if _, err := l.Tick(ctx); err != nil && ctx.Err() == nil {
			if now := time.Now(); now.Sub(l.logged) >= l.opts.Refresh {
				l.logged = now
				l.opts.Logger.Warn("expire reservations", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Tick runs one pass: it expires every order due now of the sales it looks
// at (see Options.Recent), and returns how many it expired.
func (l *Loop) Tick(ctx context.Context) (int, error) {
	now := time.Now()
	if l.sales == nil || now.Sub(l.refreshed) >= l.opts.Refresh {
		sales, err := l.opts.Sales(ctx)
		if err != nil {
			if l.sales == nil {
				return 0, err
			}
			// the last list stands while the system of record is away
		} else {
			l.sales, l.refreshed = sales, now
			if l.sales == nil {
				l.sales = []Sale{}
			}
		}
	}
	if l.paused() {
		return 0, nil
	}
	all := now.Sub(l.swept) >= l.opts.Sweep
	if all {
		l.swept = now
	}
	ids := make([]string, 0, len(l.sales))
	for _, s := range l.sales {
		if all || s.EndsAt.IsZero() || now.Sub(s.EndsAt.Add(s.Timeout)) < l.opts.Recent {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	due, lost, err := l.eng.DueSales(ctx, ids)
	if err != nil {
		return 0, err
	}
	n := 0
	var firstErr error
	if l.paused() { // DueSales may have found Redis restarted
		return 0, nil
	}
	if len(lost) > 0 && l.opts.Lost != nil {
		firstErr = l.opts.Lost(ctx, lost)
	}
	for _, id := range due {
		for !l.paused() {
			expired, more, err := l.eng.ExpireDue(ctx, id, l.opts.Batch)
			n += len(expired)
			if len(expired) > 0 && l.opts.OnExpired != nil {
				l.opts.OnExpired(id, expired)
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				break
			}
			if !more || ctx.Err() != nil {
				break
			}
		}
	}
	return n, firstErr
}

// paused reports whether expiring must wait (Options.Paused).
func (l *Loop) paused() bool { return l.opts.Paused != nil && l.opts.Paused() }
