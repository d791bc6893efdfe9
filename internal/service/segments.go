package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
)

// A sale with an item of "segments": K > 1 (hot items) is split into
// K = the largest segments of its items: K ordinary sales of the engine
// ("<sale>:<n>", package segment), each with every item of the sale and
// every limited item's stock spread evenly over them. Its buys go through
// segment.Router (wired into failover): each buyer buys in a home segment,
// so the per-user limit and a multi-item buy's all-or-nothing are the
// engine's, and units are moved to the home segment when it is short. The
// database keeps the segments as ordinary sales and their list
// (store.Store.Segments); the sale itself has no row, and reads as one
// sale everywhere (Sale, listSales, Reconcile, the live view).

// createSegmented creates a sale split into k segments, all or nothing:
// in Redis first (segment.Seller.CreateWith: the segments and the
// directory), then in the database (the segments and the directory, one
// transaction, the id claimed against any sale of it). The sale exists
// once its rows do: before, nothing reaches its segments (buys, the order
// consumer and the rebuild of a sale all go by the database's ids), and a
// create that fails in either place removes what it made in Redis. An id
// the database knows already is refused before Redis is touched: its
// keys may be missing from Redis for a while (lost, archived), and new
// ones must not stand in for them.
func (s *Service) createSegmented(ctx context.Context, def SaleDef, k int) error {
	if _, exists, err := s.db.SaleKind(ctx, def.ID); err != nil || exists {
		if err == nil {
			err = fmt.Errorf("%w: sale %s", inventory.ErrExists, def.ID)
		}
		return err
	}
	sel := s.router.Seller()
	ids, err := sel.Place(ctx, def.ID, k)
	if err != nil {
		return err
	}
	plans, err := segment.Plan(def.Sale, ids)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	rows := make([]store.Sale, len(plans))
	for i, p := range plans {
		rows[i] = store.Sale{Sale: p, Settings: def.SaleSettings.encode(), CreatedAt: now}
	}
	err = sel.CreateWith(ctx, def.Sale, ids, func(ctx context.Context) error {
		return s.db.CreateSegmentedSale(ctx, def.ID, rows)
	})
	if err != nil {
		s.router.Forget(def.ID)
		s.saleCache.Delete(def.ID)
	}
	return err
}

// storedSale is a sale's row, a segmented sale's being its first
// segment's under the sale's id (every segment has the sale's settings,
// limit and window). A segment is no sale to buyers (ErrNotFound): bought
// from directly, its buyers would pass the per-user limit the segmented
// sale keeps in each buyer's home segment.
func (s *Service) storedSale(ctx context.Context, id string) (store.Sale, error) {
	sale, err := s.db.Sale(ctx, id)
	if err == nil {
		if p, perr := s.router.Parent(ctx, id); perr != nil || p != "" {
			if perr != nil {
				return store.Sale{}, perr
			}
			return store.Sale{}, &inventory.NotFoundError{Kind: "sale", IDs: []string{id}}
		}
	}
	if !errors.Is(err, inventory.ErrNotFound) {
		return sale, err
	}
	segs, serr := s.router.Segments(ctx, id)
	if serr != nil || segs == nil {
		return sale, err
	}
	if sale, err = s.db.Sale(ctx, segs[0]); err != nil {
		return sale, err
	}
	sale.ID = id
	return sale, nil
}

// stock is a sale's state, a segmented sale's summed over its segments:
// from Redis, or from the database while it sells.
func (s *Service) stock(ctx context.Context, id string) (inventory.SaleState, error) {
	if s.seller.RedisSells() {
		return s.router.Stock(ctx, id)
	}
	return s.stockInDBAsOne(ctx, id)
}

// stockInDBAsOne is a sale's state as the database has it, a segmented
// sale's summed over its segments, with the units the database shows on
// their way between them (a move Redis left half done) counted as stocked,
// as segment.Seller.Stock counts them from Redis.
func (s *Service) stockInDBAsOne(ctx context.Context, id string) (inventory.SaleState, error) {
	segs, err := s.router.Segments(ctx, id)
	if err != nil || segs == nil {
		if err != nil {
			return inventory.SaleState{}, err
		}
		return s.stockInDB(ctx, id)
	}
	per := make([]inventory.SaleState, len(segs))
	for i, seg := range segs {
		if per[i], err = s.stockInDB(ctx, seg); err != nil {
			return inventory.SaleState{}, err
		}
	}
	sum, err := sumStates(id, per)
	if err != nil {
		return sum, err
	}
	moving, err := s.db.MovingUnits(ctx, segs)
	if err != nil {
		return inventory.SaleState{}, err
	}
	for j := range sum.Items {
		if it := &sum.Items[j]; it.Stocked != inventory.Unlimited {
			it.Stocked += moving[it.SKU]
		}
	}
	return sum, nil
}

// sumStates is the state of segmented sale id from its segments' states.
func sumStates(id string, per []inventory.SaleState) (inventory.SaleState, error) {
	var sum inventory.SaleState
	for i, st := range per {
		if i == 0 {
			sum = st
			sum.Sale.ID = id
			sum.Items = slices.Clone(st.Items)
			continue
		}
		for j := range sum.Items {
			if j >= len(st.Items) || st.Items[j].SKU != sum.Items[j].SKU {
				return inventory.SaleState{}, fmt.Errorf("%w: segments of %s differ in items", inventory.ErrCorrupt, id)
			}
			sum.Items[j].Sold += st.Items[j].Sold
			sum.Items[j].Awaiting += st.Items[j].Awaiting
			if sum.Items[j].Stocked != inventory.Unlimited {
				sum.Items[j].Stocked += st.Items[j].Stocked
				sum.Items[j].Remaining += st.Items[j].Remaining
			}
		}
	}
	return sum, nil
}

// publicSale is the sale an engine sale's orders are shown under: a
// segment's segmented sale, else the sale itself.
func (s *Service) publicSale(ctx context.Context, saleID string) string {
	if p, err := s.router.Parent(ctx, saleID); err == nil && p != "" {
		return p
	}
	return saleID
}

// reconcileSale is reconcile.Sale of a sale, of every segment of a
// segmented one summed into one report (reconcile.Combine).
func (s *Service) reconcileSale(ctx context.Context, id string) (reconcile.Report, error) {
	segs, err := s.router.Segments(ctx, id)
	if err != nil {
		return reconcile.Report{}, err
	}
	if segs == nil {
		return reconcile.Sale(ctx, s.eng, s.rdb, s.db, id)
	}
	reps := make([]reconcile.Report, len(segs))
	for i, seg := range segs {
		reps[i], err = reconcile.Sale(ctx, s.eng, s.rdb, s.db, seg)
		if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
			reps[i], err = s.archivedReport(ctx, seg) // the database's alone
		}
		if err != nil {
			return reconcile.Report{}, err
		}
	}
	return reconcile.Combine(id, reps), nil
}

// engineSales returns the engine sales a sale is made of: a segmented
// sale's segments (store.Store.Segments, cached by the router), or the
// sale itself. What acts on each engine sale of a sale (waking its
// streams, closing or archiving it) walks this list.
func (s *Service) engineSales(ctx context.Context, id string) ([]string, error) {
	segs, err := s.router.Segments(ctx, id)
	if err != nil || segs != nil {
		return segs, err
	}
	return []string{id}, nil
}

// wakeSale tells the order consumer a sale's streams have new entries
// (every segment's, of a segmented sale).
func (s *Service) wakeSale(ctx context.Context, id string) {
	ids, err := s.engineSales(ctx, id)
	if err != nil {
		ids = []string{id}
	}
	for _, id := range ids {
		s.orders.Wake(id)
	}
}
