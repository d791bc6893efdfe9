package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/store"
)

// Closing a sale, and the reads of a sale that has ended and whose Redis
// keys the archiver removed (see archive/): the database answers for it.

// closeSale ends a sale now (POST /v1/admin/sales/{sale}/close): CloseSale,
// with the audit of a close that ended something, before the sale is read.
func (s *Service) closeSale(w http.ResponseWriter, r *http.Request) error {
	if err := s.auth.operator(r); err != nil {
		return err
	}
	id := r.PathValue("sale")
	closed, err := s.endSale(r.Context(), id)
	if err != nil {
		return err
	}
	if closed {
		s.audit(r, "sale closed", id, "", nil)
	}
	return s.writeSale(w, r, http.StatusOK, id, true)
}

// stockOfEnded is the state of a sale that some engine sale of is
// archiving: each archiving one's from the database, any other's from
// Redis, summed; archived reports that every one is archiving.
func (s *Service) stockOfEnded(ctx context.Context, id string) (st inventory.SaleState, archived bool, err error) {
	segs, err := s.router.Segments(ctx, id)
	if err != nil || segs == nil {
		if err != nil {
			return inventory.SaleState{}, false, err
		}
		st, err := s.stockInDB(ctx, id)
		return st, true, err
	}
	per := make([]inventory.SaleState, len(segs))
	archived = true
	for i, seg := range segs {
		if a, err := s.db.Archive(ctx, seg); err != nil {
			return inventory.SaleState{}, false, err
		} else if !a.Archiving() {
			per[i], err = s.eng.Stock(ctx, seg)
			if _, ok := errors.AsType[*inventory.ArchivedError](err); !ok {
				if err != nil {
					return inventory.SaleState{}, false, err
				}
				archived = false
				continue
			}
		}
		if per[i], err = s.stockInDB(ctx, seg); err != nil {
			return inventory.SaleState{}, false, err
		}
	}
	st, err = sumStates(id, per)
	return st, archived, err
}

// refuseArchived is the Loader's first step: a sale the archiver has
// begun to remove from Redis is never rebuilt there. A sale found so is
// remembered for a while (it never goes back), so that buys of it, and
// reads, cost no database read each.
func (s *Service) refuseArchived(ctx context.Context, saleID string) error {
	if s.knownArchived(saleID) {
		return &inventory.ArchivedError{SaleID: saleID}
	}
	st, err := s.db.Archive(ctx, saleID)
	if err != nil || !st.Archiving() {
		return nil // an unknown sale: the snapshot says so
	}
	now := time.Now().UnixNano()
	s.archived.Set(saleID, struct{}{}, now+int64(archivedCacheTTL), now)
	return &inventory.ArchivedError{SaleID: saleID}
}

// archivedCacheTTL is how long an instance remembers a sale archived.
const archivedCacheTTL = 10 * time.Minute

// knownArchived reports whether this instance found the sale archiving or
// archived lately.
func (s *Service) knownArchived(saleID string) bool {
	_, ok := s.archived.Get(saleID, time.Now().UnixNano())
	return ok
}

// replayArchived answers a buy resent with its idempotency key once its
// sale is archived (err, the seller's, an ArchivedError): the order the
// key made, from the database, as buy.lua would replay it (the same
// lines, else ErrIdempotencyMismatch), with what is left of the sale now.
// Any other buy keeps err.
func (s *Service) replayArchived(ctx context.Context, saleID, user string, lines []inventory.Line, key string, err error) (inventory.Receipt, error) {
	if _, ok := errors.AsType[*inventory.ArchivedError](err); !ok || key == "" {
		return inventory.Receipt{}, err
	}
	home, herr := s.router.Home(ctx, saleID, user) // a segmented sale's orders are in the buyer's home segment
	if herr != nil {
		return inventory.Receipt{}, err
	}
	o, found, ferr := s.db.OrderByKey(ctx, home, user, key)
	if ferr != nil {
		return inventory.Receipt{}, ferr
	}
	if !found {
		return inventory.Receipt{}, err
	}
	return replayReceipt(ctx, o, lines, key, func(ctx context.Context) (inventory.SaleState, error) {
		return s.stockInDBAsOne(ctx, saleID)
	})
}

// cancelArchived cancels an order of a sale whose keys are gone, in the
// database; err is the seller's error when the sale is not archiving.
func (s *Service) cancelArchived(ctx context.Context, orderID, user string, err error) (inventory.Receipt, error) {
	var archived *inventory.ArchivedError
	if !errors.As(err, &archived) {
		return inventory.Receipt{}, err
	}
	return s.db.CancelArchived(ctx, orderID, user, time.Now())
}

// archivedReport is the reconciliation of a sale whose keys are gone
// (reconcile.Archived).
func (s *Service) archivedReport(ctx context.Context, id string) (reconcile.Report, error) {
	return reconcile.Archived(ctx, s.db, id)
}

// runArchiver runs the archiver until ctx ends.
func (s *Service) runArchiver(ctx context.Context) {
	a := archive.New(archiveEngine{s.eng, s}, s.db, archive.Options{Every: s.cfg.ArchiveEvery, Logger: s.log,
		// Not while Redis does not sell: held back after a restart or a
		// promotion, it may have lost acknowledged orders the recovery has
		// yet to hand to the database; and in degraded mode, the database
		// sells. (A new connection to such a Redis refuses the loop's
		// commands too: only the consumer and the recovery may use it.)
		Paused: func() bool { return !s.seller.RedisSells() },
		OnPass: func(_, waiting int) { // the sales archived are counted by archiveEngine.Archive
			s.metrics.archiveWaiting.Set(float64(waiting))
		}})
	_ = a.Run(ctx)
}

var _ archive.Store = (*store.Store)(nil)

// archiveEngine is the archiver's engine: once the last segment of a
// segmented sale is archived, what is left of the sale in Redis (its
// directory, under the sale's own id) goes too.
type archiveEngine struct {
	*inventory.Engine
	s *Service
}

// Archive is the engine's, and counts the sale archived when this call
// removed its keys: an ordinary sale, or a segmented sale's segment that
// leaves every segment of it archiving (a sale counts once, not once per
// segment; two instances archiving its last two segments at the same
// moment may both count it).
func (e archiveEngine) Archive(ctx context.Context, saleID, last string) (inventory.ArchiveCheck, error) {
	res, err := e.Engine.Archive(ctx, saleID, last)
	if err != nil || !res.Ready {
		return res, err
	}
	e.s.salesList.changed() // GET /v1/sales lists it archived now
	parent, perr := e.s.router.Parent(ctx, saleID)
	if perr == nil && parent != "" {
		if done, derr := e.s.allArchiving(ctx, parent); derr != nil || !done {
			return res, nil
		}
	}
	if perr == nil {
		e.s.metrics.archived.Inc()
	}
	return res, nil
}

// CheckArchive is the engine's, but a segment of a segmented sale is not
// ready while a move between its sale's segments is pending (its units
// would be in no segment for good, and the sale's stocked total short of
// them): it finishes such moves, and the sale is looked at again at the
// next pass.
func (e archiveEngine) CheckArchive(ctx context.Context, saleID string) (inventory.ArchiveCheck, error) {
	chk, err := e.Engine.CheckArchive(ctx, saleID)
	if err != nil || !chk.Ready {
		return chk, err
	}
	parent, err := e.s.router.Parent(ctx, saleID)
	if err != nil || parent == "" {
		return chk, err
	}
	segs, err := e.s.router.Segments(ctx, parent)
	if err != nil {
		return chk, err
	}
	per, errs := e.Engine.Stocks(ctx, segs)
	moving := false
	for i, seg := range segs {
		if _, ok := errors.AsType[*inventory.ArchivedError](errs[i]); ok {
			continue // archived: it had nothing pending (this check kept it so)
		}
		if errs[i] != nil {
			return inventory.ArchiveCheck{}, errs[i]
		}
		if inventory.PendingOut(per[i].Moves) {
			moving = true
			if _, err := e.Engine.FinishMoves(ctx, seg); err != nil {
				return inventory.ArchiveCheck{}, err
			}
		}
	}
	if moving {
		return inventory.ArchiveCheck{Reason: "moving"}, nil
	}
	return chk, nil
}

// PurgeArchived is the engine's (one walk of the keyspace for all the
// sales), and then, of each sale purged, removes its room if it has one,
// and the directory of the segmented sale whose segments are all archiving
// now. A sale whose room or directory could not be removed is named in
// the *inventory.PurgeError it returns, with those the engine left keys
// of: the archiver marks the others archived.
func (e archiveEngine) PurgeArchived(ctx context.Context, saleIDs ...string) (int, error) {
	n, err := e.Engine.PurgeArchived(ctx, saleIDs...)
	failed := &inventory.PurgeError{}
	left := map[string]bool{}
	if err != nil {
		pe, ok := errors.AsType[*inventory.PurgeError](err)
		if !ok {
			return n, err // bad input, nothing purged
		}
		failed.Err = pe.Err
		for _, id := range pe.Sales {
			left[id] = true
		}
	}
	for _, id := range saleIDs {
		if !left[id] {
			k, aerr := e.afterPurge(ctx, id)
			n += k
			if aerr == nil {
				continue
			}
			if failed.Err == nil {
				failed.Err = aerr
			}
		}
		failed.Sales = append(failed.Sales, id)
	}
	if len(failed.Sales) > 0 {
		return n, failed
	}
	return n, nil
}

// afterPurge removes the room of a purged sale with one, and the
// directory of the segmented sale whose segments are all archiving now;
// n counts the directory.
func (e archiveEngine) afterPurge(ctx context.Context, saleID string) (n int, err error) {
	parent, err := e.s.router.Parent(ctx, saleID)
	if err != nil {
		return 0, err
	}
	if parent == "" {
		// A sale with a room has one segment: itself.
		return 0, e.s.removeRoom(ctx, saleID)
	}
	if done, err := e.s.allArchiving(ctx, parent); err != nil || !done {
		return 0, err
	}
	return 1, e.s.router.Seller().RemoveDirectory(ctx, parent)
}

// allArchiving reports whether every segment of a segmented sale is
// archiving (its keys removed from Redis for good, or being removed).
func (s *Service) allArchiving(ctx context.Context, saleID string) (bool, error) {
	segs, err := s.db.Segments(ctx, saleID)
	if err != nil || len(segs) == 0 {
		return false, err
	}
	for _, seg := range segs {
		st, err := s.db.Archive(ctx, seg)
		if err != nil || !st.Archiving() {
			return false, err
		}
	}
	return true, nil
}

// directory is the segment seller's Directory: a segmented sale's segments
// from the database, unless they are all archiving: then its directory
// stays out of Redis (ArchivedError), where the archiver removed it.
func (s *Service) directory(ctx context.Context, saleID string) ([]string, error) {
	done, err := s.allArchiving(ctx, saleID)
	if err != nil {
		return nil, err
	}
	if done {
		return nil, &inventory.ArchivedError{SaleID: saleID}
	}
	return s.db.Segments(ctx, saleID)
}
