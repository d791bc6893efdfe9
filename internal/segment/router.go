package segment

import (
	"context"
	"errors"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/ttlcache"
)

// Kind tells what a sale id names, from the system of record: a segmented
// sale (its segment ids, in Create's order), an ordinary sale (nil, true)
// or nothing (nil, false). store.Store.SaleKind is one.
type Kind func(ctx context.Context, saleID string) (segments []string, exists bool, err error)

// Router sells every sale of an engine, segmented or not: it is the
// engine's operations by sale id (the ones failover.Engine names), each
// sent to the Seller for a segmented sale and to the engine for any other
// sale id, and what failover needs to make a segmented sale's order in
// the right engine sale (Home, Segments). Sale ids that are segments
// ("<sale>:<n>", as the database and the streams list them) are ordinary
// engine sales to it. It is safe for concurrent use.
type Router struct {
	eng   *inventory.Engine
	sel   *Seller
	kind  Kind
	known *ttlcache.Cache[[]string] // sale id -> its segments; nil: an ordinary sale
}

// routerTTL is how long a Router believes what a sale id names. A sale's
// kind never changes while it lives; the time only bounds how long a sale
// whose creation was undone (and created again as the other kind) is
// routed as it was, on another instance (its buys fail as not found
// meanwhile; nothing is sold wrongly), and how often each sale costs a
// look at the database.
const routerTTL = 10 * time.Minute

// NewRouter returns a router of the sales of eng; sel sells its segmented
// ones, and kind tells them apart.
func NewRouter(eng *inventory.Engine, sel *Seller, kind Kind) *Router {
	return &Router{eng: eng, sel: sel, kind: kind, known: ttlcache.New[[]string](1 << 16)}
}

// Seller is the router's seller of segmented sales.
func (r *Router) Seller() *Seller { return r.sel }

// Segments returns the segment ids of a segmented sale, or nil for any
// other sale id (an ordinary sale, a segment, an unknown id). Only what the
// system of record says exists is remembered.
func (r *Router) Segments(ctx context.Context, saleID string) ([]string, error) {
	now := time.Now().UnixNano()
	if segs, ok := r.known.Get(saleID, now); ok {
		return segs, nil
	}
	segs, exists, err := r.kind(ctx, saleID)
	if err != nil || !exists {
		return nil, err
	}
	r.known.Set(saleID, segs, now+int64(routerTTL), now)
	return segs, nil
}

// Forget drops what the router remembers of a sale id (a create undone).
func (r *Router) Forget(saleID string) { r.known.Delete(saleID) }

// Home returns the engine sale a user's orders of a sale are made in: the
// user's home segment of a segmented sale, the sale itself otherwise.
func (r *Router) Home(ctx context.Context, saleID, userID string) (string, error) {
	segs, err := r.Segments(ctx, saleID)
	if err != nil || segs == nil {
		return saleID, err
	}
	return Home(segs, userID), nil
}

// Parent returns the segmented sale an engine sale is a segment of, or ""
// if it is none.
func (r *Router) Parent(ctx context.Context, saleID string) (string, error) {
	p := ParentOf(saleID)
	if p == "" {
		return "", nil
	}
	segs, err := r.Segments(ctx, p)
	if err != nil {
		return "", err
	}
	for _, id := range segs {
		if id == saleID {
			return p, nil
		}
	}
	return "", nil
}

// BuyChecked buys a buy checked already (inventory.CheckBuy): as
// Seller.BuyChecked for a segmented sale (an order id it carries is of the
// user's home segment), as the engine's BuyChecked otherwise.
func (r *Router) BuyChecked(ctx context.Context, c inventory.CheckedBuy) (inventory.Receipt, error) {
	segs, err := r.Segments(ctx, c.SaleID())
	if err != nil {
		return inventory.Receipt{}, err
	}
	if segs == nil {
		return r.eng.BuyChecked(ctx, c)
	}
	return r.sel.BuyChecked(ctx, c)
}

// Cancel cancels an order; an order of a segment returns its units to that
// segment (Seller.Cancel).
func (r *Router) Cancel(ctx context.Context, orderID, userID string) (inventory.Receipt, error) {
	if sale, err := inventory.SaleOfOrder(orderID); err == nil && ParentOf(sale) != "" {
		if p, err := r.Parent(ctx, sale); err == nil && p != "" {
			return r.sel.Cancel(ctx, orderID, userID)
		}
	}
	return r.eng.Cancel(ctx, orderID, userID)
}

// Pause pauses a sale, every segment of a segmented one.
func (r *Router) Pause(ctx context.Context, saleID string) error {
	return r.each(ctx, saleID, r.sel.Pause, r.eng.Pause)
}

// Resume resumes a sale, every segment of a segmented one.
func (r *Router) Resume(ctx context.Context, saleID string) error {
	return r.each(ctx, saleID, r.sel.Resume, r.eng.Resume)
}

func (r *Router) each(ctx context.Context, saleID string, seg, plain func(context.Context, string) error) error {
	segs, err := r.Segments(ctx, saleID)
	if err != nil {
		return err
	}
	if segs == nil {
		return plain(ctx, saleID)
	}
	return seg(ctx, saleID)
}

// Restock adds units to a sale's item (Seller.Restock for a segmented
// sale: to its segment with the fewest left) and returns what is left in
// all.
func (r *Router) Restock(ctx context.Context, saleID, sku string, qty int64) (int64, error) {
	segs, err := r.Segments(ctx, saleID)
	if err != nil {
		return 0, err
	}
	if segs == nil {
		return r.eng.Restock(ctx, saleID, sku, qty)
	}
	return r.sel.Restock(ctx, saleID, sku, qty)
}

// Stock returns a sale's state, a segmented sale's summed over its
// segments (one item per sku, as it was defined).
func (r *Router) Stock(ctx context.Context, saleID string) (inventory.SaleState, error) {
	segs, err := r.Segments(ctx, saleID)
	if err != nil {
		return inventory.SaleState{}, err
	}
	if segs == nil {
		return r.eng.Stock(ctx, saleID)
	}
	sum, _, err := r.sel.Stock(ctx, saleID)
	return sum, err
}

// Fence, Unfence and Repair act on engine sales: the ids the database
// lists (ordinary sales and segments), never a segmented sale's own id.

// Fence is the engine's Fence.
func (r *Router) Fence(ctx context.Context, saleID string, epoch int64) (bool, error) {
	return r.eng.Fence(ctx, saleID, epoch)
}

// Unfence is the engine's Unfence.
func (r *Router) Unfence(ctx context.Context, saleID string, epoch int64) error {
	return r.eng.Unfence(ctx, saleID, epoch)
}

// Repair is the engine's Repair.
func (r *Router) Repair(ctx context.Context, saleID string, from inventory.Loader) (inventory.Repaired, error) {
	return r.eng.Repair(ctx, saleID, from)
}

// LiftStaleFence lifts a stale fence of a sale, of every segment of a
// segmented one (a buy of it may meet any segment's), and reports whether
// it lifted one.
func (r *Router) LiftStaleFence(ctx context.Context, saleID string, epoch int64) (bool, error) {
	segs, err := r.Segments(ctx, saleID)
	if err != nil {
		return false, err
	}
	if segs == nil {
		return r.eng.LiftStaleFence(ctx, saleID, epoch)
	}
	lifted := false
	var errs []error
	for _, id := range segs {
		ok, err := r.eng.LiftStaleFence(ctx, id, epoch)
		lifted = lifted || ok
		errs = append(errs, err)
	}
	return lifted, errors.Join(errs...)
}
