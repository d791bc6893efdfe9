package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/admission"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
)

// The service's verbs: what the HTTP API does, as methods a Go program
// calls. Each handler authenticates, reads the request, calls its verb,
// audits an operator's action and writes the answer; the rules of the
// action — its checks, its steps, its metrics, the wake-ups of the order
// consumer, the caches it invalidates — are the verb's alone (this file
// and verbs_orders.go), whoever calls it.
//
// A verb's refusal matches a sentinel of package inventory with errors.Is:
// ErrInvalid, ErrNotFound (*inventory.NotFoundError), ErrExists,
// ErrSoldOut, ErrLimitExceeded, ErrThrottled (*inventory.ThrottledError),
// ErrSaleNotActive, ErrIdempotencyMismatch, ErrTokenRequired,
// ErrTokenSpent, ErrAlreadyPaid, ErrOrderClosed, ErrNoPayment, and
// ErrUnavailable for whatever the HTTP API answers 503 (retry). toAPI
// answers each as the contract says.

// SaleDef is a sale to create: the engine's definition, the service's
// settings, and each item's segments (parallel to Sale.Items; 0 or 1: not
// segmented).
type SaleDef struct {
	inventory.Sale
	SaleSettings
	Segments []int64
}

// SaleView is a sale as the service shows it: its state now (a segmented
// sale's segments summed; the database's figures while it sells or once
// archived), the service's settings, and whether its Redis keys are gone
// (archived).
type SaleView struct {
	State    inventory.SaleState
	Settings SaleSettings
	Archived bool
}

// checkedSale is a SaleDef that passed checkSale, and its number of
// segments (1: not segmented).
type checkedSale struct {
	SaleDef
	k int
}

// checkSale checks a sale to create, once, whoever sends it: its own rate
// limits, the engine's rules (inventory.ValidateSale), its segments, its
// room (resolved: every default set).
func checkSale(def SaleDef) (checkedSale, error) {
	if err := checkSaleLimits(def.RateLimits); err != nil {
		return checkedSale{}, err
	}
	if err := inventory.ValidateSale(def.Sale); err != nil {
		return checkedSale{}, err
	}
	k, err := segmentsOf(def.Segments, len(def.Items))
	if err != nil {
		return checkedSale{}, err
	}
	if def.Admission != nil {
		switch {
		case def.RequirePurchaseToken:
			return checkedSale{}, &inventory.InvalidError{Field: "admission", Reason: "cannot be given with require_purchase_token: admitted buyers need no purchase token"}
		case k > 1:
			return checkedSale{}, &inventory.InvalidError{Field: "admission", Reason: "needs a sale of one segment: no item of a sale with a room may have segments above 1"}
		}
		if def.Admission, err = resolveAdmission(def.Sale, def.Admission, time.Now()); err != nil {
			return checkedSale{}, err
		}
	}
	return checkedSale{SaleDef: def, k: k}, nil
}

// segmentsOf checks the items' segments (0 or 1: none; at most
// segment.MaxSegments) and returns the sale's K, the largest (1: not
// segmented).
func segmentsOf(segments []int64, items int) (int, error) {
	if len(segments) != 0 && len(segments) != items {
		return 0, &inventory.InvalidError{Field: "segments", Reason: fmt.Sprintf("must have one value per item (%d), or none", items)}
	}
	k := int64(1)
	for i, n := range segments {
		if n < 0 || n > segment.MaxSegments {
			return 0, &inventory.InvalidError{Field: fmt.Sprintf("items[%d].segments", i),
				Reason: fmt.Sprintf("must be between 1 and %d", segment.MaxSegments)}
		}
		k = max(k, n)
	}
	return int(k), nil
}

// CreateSale creates a sale, segmented if an item has more than one
// segment, and returns it as Sale shows it. An id in use is
// inventory.ErrExists.
func (s *Service) CreateSale(ctx context.Context, def SaleDef) (SaleView, error) {
	sale, err := checkSale(def)
	if err == nil {
		err = s.createChecked(ctx, sale)
	}
	if err != nil {
		return SaleView{}, verbError(err)
	}
	return s.Sale(ctx, def.ID)
}

// createChecked creates a checked sale. A segmented one is created all or
// nothing (createSegmented). Any other goes to the database first: it is
// the system of record, and the one that says whether the id is taken.
// Then Redis; if Redis holds a sale of that id already (left from an
// earlier database), the create is undone.
func (s *Service) createChecked(ctx context.Context, sale checkedSale) error {
	defer s.salesList.changed()
	if sale.k > 1 {
		if err := s.createSegmented(ctx, sale.SaleDef, sale.k); err != nil {
			return err
		}
		s.saleCache.Delete(sale.ID) // remembered missing, maybe
		return nil
	}
	row := store.Sale{Sale: sale.Sale, Settings: sale.SaleSettings.encode(), CreatedAt: time.Now().UTC()}
	if err := s.db.CreateSale(ctx, row); err != nil {
		return err
	}
	if err := s.createInRedis(ctx, sale, row); err != nil {
		// The sale's room row goes with it.
		if delErr := s.db.DeleteSale(context.WithoutCancel(ctx), row.ID); delErr != nil {
			s.log.Error("undo sale create", "sale", row.ID, "err", delErr)
		}
		s.saleCache.Delete(row.ID) // read by a request meanwhile, maybe
		return err
	}
	s.saleCache.Delete(row.ID) // remembered missing, maybe
	return nil
}

// createInRedis creates in Redis a sale the database holds now. A sale
// with a room has its room's row written first, then the sale and its room
// in Redis as one (inventory.Engine.CreateSales: a room that cannot be
// made takes the sale out of Redis again).
func (s *Service) createInRedis(ctx context.Context, sale checkedSale, row store.Sale) error {
	if sale.Admission == nil {
		return s.eng.CreateSale(ctx, row.Sale)
	}
	if err := s.createRoom(ctx, sale); err != nil {
		return err
	}
	cfg := roomConfig(row, *sale.Admission, sale.Admission.RatePerS)
	_, err := s.eng.CreateSales(ctx, []inventory.Sale{row.Sale}, func(ctx context.Context) error {
		err := s.rooms.Create(ctx, row.ID, cfg)
		if errors.Is(err, admission.ErrConfigChanged) { // left in Redis by an earlier database
			return fmt.Errorf("%w: a waiting room of sale %s: %w", inventory.ErrExists, row.ID, err)
		}
		return err
	})
	return err
}

// Sale is a sale as it is now.
func (s *Service) Sale(ctx context.Context, saleID string) (SaleView, error) {
	if s.knownArchived(saleID) {
		v, err := s.archivedSaleView(ctx, saleID)
		return v, verbError(err)
	}
	st, err := s.stock(ctx, saleID) // segments.go: Redis's, or the database's while it sells
	if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
		v, err := s.archivedSaleView(ctx, saleID)
		return v, verbError(err)
	}
	if err != nil {
		return SaleView{}, verbError(err)
	}
	v, err := s.viewOf(ctx, saleID, st, st.Status, false)
	return v, verbError(err)
}

// viewOf is the view of sale id in the state st, with its service
// settings; status is st's unless the sale is known to have ended. The
// payment step shown is the one the database keeps with the settings.
func (s *Service) viewOf(ctx context.Context, id string, st inventory.SaleState, status inventory.Status, archived bool) (SaleView, error) {
	settings, err := s.settings(ctx, id)
	if err != nil {
		return SaleView{}, err
	}
	st.Sale.ID, st.Status, st.Sale.PaymentTimeout = id, status, settings.PaymentTimeout
	return SaleView{State: st, Settings: settings.SaleSettings, Archived: archived}, nil
}

// archivedSaleView is the view of a sale whose keys are gone from Redis
// (or going): the database's numbers, ended, archived once the keys are
// gone. A segmented sale whose segments are not all archiving yet (one
// waits for a payment, say) is not archived: its live segments' numbers
// are Redis's.
func (s *Service) archivedSaleView(ctx context.Context, id string) (SaleView, error) {
	st, archived, err := s.stockOfEnded(ctx, id)
	if err != nil {
		return SaleView{}, err
	}
	return s.viewOf(ctx, id, st, inventory.StatusEnded, archived)
}

// Restock adds qty units of sku to the sale (a segmented sale's go to its
// segments) and returns how many remain. It works on an ended sale too.
func (s *Service) Restock(ctx context.Context, saleID, sku string, qty int64) (remaining int64, err error) {
	defer s.salesList.changed()
	remaining, err = s.router.Restock(ctx, saleID, sku, qty)
	if err != nil {
		return 0, verbError(err)
	}
	s.wakeSale(ctx, saleID) // its stream has a new entry, even if the sale has ended
	return remaining, nil
}

// SetPaused pauses or resumes the sale, and returns it as it is then.
func (s *Service) SetPaused(ctx context.Context, saleID string, paused bool) (SaleView, error) {
	if err := s.pauseSale(ctx, saleID, paused); err != nil {
		return SaleView{}, verbError(err)
	}
	return s.Sale(ctx, saleID)
}

// pauseSale pauses or resumes the sale where it sells (failover.Seller.Pause).
func (s *Service) pauseSale(ctx context.Context, id string, paused bool) error {
	defer s.salesList.changed()
	if err := s.seller.Pause(ctx, id, paused); err != nil {
		return err
	}
	s.wakeSale(ctx, id) // its stream has a new entry (when Redis sells)
	return nil
}

// CloseSale ends a sale now, and returns it ended. Closing an ended or
// archived sale changes nothing. While the database sells (degraded mode)
// it is inventory.ErrUnavailable: close after the recovery.
func (s *Service) CloseSale(ctx context.Context, saleID string) (SaleView, error) {
	if _, err := s.endSale(ctx, saleID); err != nil {
		return SaleView{}, verbError(err)
	}
	return s.endedView(ctx, saleID)
}

// endSale ends a sale now: in Redis, atomically, by the Redis server's
// clock; the database follows through the stream. closed reports that
// this call ended some engine sale of it.
func (s *Service) endSale(ctx context.Context, id string) (closed bool, err error) {
	defer s.salesList.changed()
	// A segment is no sale to anyone outside (storedSale): closing one
	// alone would end the sale for its buyers only.
	if p, err := s.router.Parent(ctx, id); err != nil || p != "" {
		if err != nil {
			return false, err
		}
		return false, saleNotFound(id)
	}
	if !s.seller.RedisSells() {
		return false, errUnavailable // degraded mode: Redis does not sell; close after the recovery
	}
	// Every engine sale of it: a segmented sale's segments each. A close
	// that fails part way leaves some closed; sent again, it closes the
	// rest (closing an ended sale changes nothing).
	ids, err := s.engineSales(ctx, id)
	if err != nil {
		return false, err
	}
	for _, eid := range ids {
		_, end, err := s.eng.Close(ctx, eid)
		if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
			continue
		}
		if err != nil {
			return false, err
		}
		// The database knows the end at once, not only when the consumer
		// stores the closed event: a sale Redis loses before that is
		// rebuilt ended. Until it does, the close is not answered (sent
		// again, it writes it again).
		if err := s.db.CloseSale(ctx, eid, end); err != nil {
			return false, err
		}
		closed = true
		s.orders.Wake(eid) // its stream has a new entry
	}
	return closed, nil
}

// saleNotFound is the error of a sale that does not exist (for buyers and
// operators alike: a segment of a segmented sale is none).
func saleNotFound(id string) error {
	return &inventory.NotFoundError{Kind: "sale", IDs: []string{id}}
}

// endedView is the view of a sale just closed: ended by Redis's clock,
// whatever this host's says.
func (s *Service) endedView(ctx context.Context, id string) (SaleView, error) {
	v, err := s.Sale(ctx, id)
	if err != nil {
		return SaleView{}, err
	}
	v.State.Status = inventory.StatusEnded
	return v, nil
}

// Reconcile compares the sale's stock in Redis with its orders in the
// database and the events on their way (a segmented sale's segments in
// one report); an archived sale's from the database alone.
func (s *Service) Reconcile(ctx context.Context, saleID string) (reconcile.Report, error) {
	rep, err := s.reconcileSale(ctx, saleID)
	if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
		rep, err = s.archivedReport(ctx, saleID)
	}
	return rep, verbError(err)
}

// verbError is err as a verb returns it: what the HTTP API answers 503
// (retryLater) matches inventory.ErrUnavailable too.
func verbError(err error) error {
	if err == nil || errors.Is(err, inventory.ErrUnavailable) || !retryLater(err) {
		return err
	}
	return &unavailableError{err}
}

// unavailableError is an error of retryLater's, made to match
// inventory.ErrUnavailable.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == inventory.ErrUnavailable }
