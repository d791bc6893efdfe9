// Package archive removes from Redis the keys of sales that can no longer
// change: ended (closed, or past their end by the Redis server's clock),
// every event of their stream in the database, no payment awaiting. From
// then on the database alone answers for them. It is one process: a loop
// that looks at the candidates every few seconds; any number of instances
// may run it at once (every step is idempotent, and the removal itself is
// one script that checks everything again).
//
// The order of the steps is what keeps an archived sale from being sold
// again: the sale is marked archiving in the database first (the service's
// rebuild refuses such a sale from then on), then its keys are removed in
// one script (inventory.Engine.Archive) only if its stream has not moved
// since the database was found to hold all of it, then it is marked
// archived (the order consumer stops reading its stream).
package archive

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Store is what the archiver needs of the database (store.Store).
type Store interface {
	// ArchiveCandidates returns the sales not archived yet that are
	// archiving or ended by now, and those archived since recent.
	ArchiveCandidates(ctx context.Context, now, recent time.Time) (todo, swept []string, err error)
	// NewestEvent is the id of the newest event of the sale's stream the
	// database holds ("" none).
	NewestEvent(ctx context.Context, saleID string) (string, error)
	// AwaitingPayment returns those of saleIDs of which the database
	// holds an order awaiting payment.
	AwaitingPayment(ctx context.Context, saleIDs []string) ([]string, error)
	BeginArchive(ctx context.Context, saleID string, at time.Time) error
	FinishArchive(ctx context.Context, saleID string, at time.Time) error
}

// Engine is what the archiver needs of the engine (inventory.Engine).
type Engine interface {
	CheckArchive(ctx context.Context, saleID string) (inventory.ArchiveCheck, error)
	Archive(ctx context.Context, saleID, last string) (inventory.ArchiveCheck, error)
	PurgeArchived(ctx context.Context, saleID string) (int, error)
	// Stock reads the sale, rebuilding it from the system of record if
	// it is missing from Redis (the reservations with it).
	Stock(ctx context.Context, saleID string) (inventory.SaleState, error)
}

// Options tune the archiver; zero values take the defaults.
type Options struct {
	// Every is the time between passes; default 2s.
	Every time.Duration
	// Sweep is how long after archiving a sale is looked at again, to
	// remove anything left of it (an empty stream, as a consumer of an
	// older version made again by reading it a last time; today's never
	// makes a stream); default 2m.
	Sweep  time.Duration
	Logger *slog.Logger
	// OnPass, if set, is told after each pass how many sales it archived
	// and how many wait (ended, not archivable yet).
	OnPass func(archived, waiting int)
	// Paused, if set, says whether archiving must wait: while Redis does
	// not sell (degraded mode, or a Redis that restarted or was promoted
	// and may be behind until the recovery repairs it). Redis's view then
	// is not all there is: orders it acknowledged and lost are handed to
	// the system of record by the recovery, and a sale archived before
	// would take them in with no keys left to expire or pay them. Asked
	// before each sale and again before its keys are removed.
	Paused func() bool
}

// Archiver archives the sales of one engine and database.
type Archiver struct {
	eng Engine
	db  Store
	o   Options
}

// New returns an archiver; Run runs it.
func New(eng Engine, db Store, o Options) *Archiver {
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	if o.Sweep <= 0 {
		o.Sweep = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Archiver{eng: eng, db: db, o: o}
}

// Run makes a pass every Options.Every until ctx is done.
func (a *Archiver) Run(ctx context.Context) error {
	t := time.NewTicker(a.o.Every)
	defer t.Stop()
	for {
		archived, waiting, err := a.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			a.o.Logger.Warn("archiver: pass", "err", err)
		}
		if a.o.OnPass != nil {
			a.o.OnPass(archived, waiting)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass looks at every candidate once: archived is how many it archived,
// waiting how many ended sales are not archivable yet. err is the first
// error met; the other sales are still looked at.
func (a *Archiver) Pass(ctx context.Context) (archived, waiting int, err error) {
	now := time.Now()
	todo, swept, err := a.db.ArchiveCandidates(ctx, now, now.Add(-a.o.Sweep))
	if err != nil {
		return 0, 0, err
	}
	for i, id := range append(todo, swept...) {
		if ctx.Err() != nil {
			return archived, waiting, ctx.Err()
		}
		if a.paused() {
			a.o.Logger.Debug("archiver: paused: redis does not sell", "left", len(todo)+len(swept)-i)
			return archived, waiting + len(todo) + len(swept) - i, err
		}
		done, why, serr := a.sale(ctx, id, i < len(todo))
		switch {
		case serr != nil:
			waiting++
			if err == nil {
				err = serr
			}
		case !done:
			waiting++
			a.o.Logger.Debug("archiver: not yet", "sale", id, "why", why)
		case done && why == "":
			archived++
		}
	}
	return archived, waiting, err
}

// paused reports whether archiving must wait (Options.Paused).
func (a *Archiver) paused() bool { return a.o.Paused != nil && a.o.Paused() }

// Sale archives one sale if it can be now: done reports it archived (why
// "" when this call removed its keys, "archived" when they were gone
// already); otherwise why says what it waits for.
func (a *Archiver) Sale(ctx context.Context, saleID string) (done bool, why string, err error) {
	return a.sale(ctx, saleID, true)
}

// sale is Sale; purge removes the keys that would expire on their own too
// (a SCAN of the node: once per sale, not at every sweep).
func (a *Archiver) sale(ctx context.Context, saleID string, purge bool) (done bool, why string, err error) {
	chk, err := a.eng.CheckArchive(ctx, saleID)
	if err != nil {
		return false, "", err
	}
	last := "-" // a sale whose hash is gone: sweep what is left of it
	if !chk.Gone {
		if !chk.Ready {
			return false, chk.Reason, nil
		}
		newest, err := a.db.NewestEvent(ctx, saleID)
		if err != nil {
			return false, "", err
		}
		// The stream is settled; the database must hold its last event too
		// (a stream that never had one: nothing to hold).
		if chk.Last != "0-0" && newest != chk.Last {
			return false, "database at " + newest + ", stream at " + chk.Last, nil
		}
		last = chk.Last
	}
	// Redis found no reservation; the database must have none either.
	// One it has was lost from Redis (with the sale: a restart without
	// persistence), or was sold by the database in degraded mode and is
	// not repaired into Redis yet: only Redis expires it, so the sale is
	// not archived (it would never be rebuilt again). A lost sale is
	// rebuilt, its reservations with it, to be paid or to expire there.
	if purge {
		awaiting, err := a.db.AwaitingPayment(ctx, []string{saleID})
		if err != nil {
			return false, "", err
		}
		if len(awaiting) > 0 {
			_, err := a.eng.Stock(ctx, saleID) // a lost sale comes back
			if _, ok := errors.AsType[*inventory.ArchivedError](err); !ok {
				if err != nil {
					return false, "", err
				}
				return false, "awaiting in the database", nil
			}
			// Archiving already (AwaitingPayment leaves such a sale out,
			// but it may have begun since): nothing can bring it back.
		}
	}
	// CheckArchive may have found Redis restarted (its connection's check).
	if a.paused() {
		return false, "paused", nil
	}
	// The mark first: from here on no instance rebuilds the sale.
	if err := a.db.BeginArchive(ctx, saleID, time.Now()); err != nil {
		return false, "", err
	}
	if a.paused() {
		return false, "paused", nil
	}
	res, err := a.eng.Archive(ctx, saleID, last)
	if err != nil {
		return false, "", err
	}
	if !res.Ready && !res.Gone {
		return false, res.Reason, nil
	}
	if purge || !chk.Gone {
		if _, err := a.eng.PurgeArchived(ctx, saleID); err != nil {
			return false, "", err
		}
	}
	if err := a.db.FinishArchive(ctx, saleID, time.Now()); err != nil {
		return false, "", err
	}
	if chk.Gone {
		return true, "archived", nil
	}
	return true, "", nil
}
