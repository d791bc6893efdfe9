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
	// PurgeArchived removes what is left in Redis of archived sales (the
	// keys that expire on their own), of all of them at once. An error
	// that is no *inventory.PurgeError may have left keys of any of them.
	PurgeArchived(ctx context.Context, saleIDs ...string) (int, error)
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
//
// The sales whose keys the pass removed are finished together at its end:
// what is left of them in Redis is purged in one call (one walk of each
// node's keyspace for them all, however many they are), then each is
// marked archived. A sale whose purge failed is not marked: the next pass
// finds it again (archiving, its keys gone) and purges and marks it then,
// as it does a sale whose archiver stopped between the two.
func (a *Archiver) Pass(ctx context.Context) (archived, waiting int, err error) {
	now := time.Now()
	todo, swept, err := a.db.ArchiveCandidates(ctx, now, now.Add(-a.o.Sweep))
	if err != nil {
		return 0, 0, err
	}
	all := append(todo, swept...)
	var removed []removal
	for i, id := range all {
		if ctx.Err() != nil {
			// Nothing can be purged or marked now: the next pass does it.
			return archived, waiting + len(removed), ctx.Err()
		}
		if a.paused() {
			a.o.Logger.Debug("archiver: paused: redis does not sell", "left", len(all)-i)
			waiting += len(all) - i
			break
		}
		r, why, serr := a.remove(ctx, id, i < len(todo))
		switch {
		case serr != nil:
			waiting++
			if err == nil {
				err = serr
			}
		case r == nil:
			waiting++
			a.o.Logger.Debug("archiver: not yet", "sale", id, "why", why)
		default:
			removed = append(removed, *r)
		}
	}
	finished, ferr := a.finish(ctx, removed)
	if err == nil {
		err = ferr
	}
	for i, r := range removed {
		switch {
		case !finished[i]:
			waiting++
		case !r.gone:
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
	r, why, err := a.remove(ctx, saleID, true)
	if r == nil || err != nil {
		return false, why, err
	}
	finished, err := a.finish(ctx, []removal{*r})
	switch {
	case !finished[0]:
		return false, "", err
	case r.gone:
		return true, "archived", nil
	}
	return true, "", nil
}

// removal is a sale whose keys archive.lua removed, or found gone, and
// that is to be marked archived: purge says the keys that expire on their
// own are to be purged first; gone that its keys were gone already.
type removal struct {
	saleID      string
	purge, gone bool
}

// remove does all of archiving a sale but its purge and its mark as
// archived (finish): it returns the sale's removal, or nil and what it
// waits for. purge is false for a sale archived already and looked at
// again (a sweep): the keys that expire on their own were purged once, and
// a SCAN for them at every sweep would cost a walk of the keyspace each.
func (a *Archiver) remove(ctx context.Context, saleID string, purge bool) (r *removal, why string, err error) {
	chk, err := a.eng.CheckArchive(ctx, saleID)
	if err != nil {
		return nil, "", err
	}
	last := "-" // a sale whose hash is gone: sweep what is left of it
	if !chk.Gone {
		if !chk.Ready {
			return nil, chk.Reason, nil
		}
		newest, err := a.db.NewestEvent(ctx, saleID)
		if err != nil {
			return nil, "", err
		}
		// The stream is settled; the database must hold its last event too
		// (a stream that never had one: nothing to hold).
		if chk.Last != "0-0" && newest != chk.Last {
			return nil, "database at " + newest + ", stream at " + chk.Last, nil
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
			return nil, "", err
		}
		if len(awaiting) > 0 {
			_, err := a.eng.Stock(ctx, saleID) // a lost sale comes back
			if _, ok := errors.AsType[*inventory.ArchivedError](err); !ok {
				if err != nil {
					return nil, "", err
				}
				return nil, "awaiting in the database", nil
			}
			// Archiving already (AwaitingPayment leaves such a sale out,
			// but it may have begun since): nothing can bring it back.
		}
	}
	// CheckArchive may have found Redis restarted (its connection's check).
	if a.paused() {
		return nil, "paused", nil
	}
	// The mark first: from here on no instance rebuilds the sale.
	if err := a.db.BeginArchive(ctx, saleID, time.Now()); err != nil {
		return nil, "", err
	}
	if a.paused() {
		return nil, "paused", nil
	}
	res, err := a.eng.Archive(ctx, saleID, last)
	if err != nil {
		return nil, "", err
	}
	if !res.Ready && !res.Gone {
		return nil, res.Reason, nil
	}
	return &removal{saleID: saleID, purge: purge || !chk.Gone, gone: chk.Gone}, "", nil
}

// finish purges what is left of the removed sales in Redis, all in one
// call, then marks each archived in the database: finished[i] reports
// rs[i] marked. A sale the purge may have left keys of is not marked (a
// *inventory.PurgeError names them; any other error of the purge, every
// sale it was given): it stays archiving, and a later pass purges and
// marks it. err is the first error met.
func (a *Archiver) finish(ctx context.Context, rs []removal) (finished []bool, err error) {
	finished = make([]bool, len(rs))
	var purge []string
	for _, r := range rs {
		if r.purge {
			purge = append(purge, r.saleID)
		}
	}
	var unpurged map[string]bool
	if len(purge) > 0 {
		if _, err = a.eng.PurgeArchived(ctx, purge...); err != nil {
			left := purge
			if pe, ok := errors.AsType[*inventory.PurgeError](err); ok {
				left = pe.Sales
			}
			unpurged = make(map[string]bool, len(left))
			for _, id := range left {
				unpurged[id] = true
			}
		}
	}
	for i, r := range rs {
		if r.purge && unpurged[r.saleID] {
			continue
		}
		if ferr := a.db.FinishArchive(ctx, r.saleID, time.Now()); ferr != nil {
			if err == nil {
				err = ferr
			}
			continue
		}
		finished[i] = true
	}
	return finished, err
}
