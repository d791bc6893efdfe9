package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// buyAdmitted is the buy of a sale with a room (placeBuy), given the
// admission token it carries, answered in the contract's order: what
// placeBuy checked first (the request, the sale), then sale_not_active,
// then a repeat of an accepted buy (200, even if its admission is spent),
// then the admission (403), then the limit and the stock.
//
// A token whose signature, sale and user check goes to the buy, gated by
// the room (inventory.CheckedBuy.WithGate): buy.lua accepts it only if
// the room holds the buyer's admission live with this nonce and until and
// Redis's clock is before it, and spends the admission in the room (used,
// with its order) only if it accepts the buy (a repeat first, then a
// spent or closed admission, then the sale's state, the limit, the
// stock): one call, no read of the room before it and no write after.
// The room's state is what keeps an admission single use, across a Redis
// loss too (a room made again holds no admission given before it). Any
// other buy is a repeat, found by its idempotency key, or refused. While
// the database sells (degraded mode) the room admits nobody and its sale
// sells nothing.
func (s *Service) buyAdmitted(ctx context.Context, buy inventory.CheckedBuy, settings saleSettings, req BuyRequest, token string) (inventory.Receipt, error) {
	if !s.seller.RedisSells() {
		return inventory.Receipt{}, errRoomNeedsRedis
	}
	if adm, ok := s.checkAdmissionToken(settings.ID, req.UserID, token); ok {
		// (A gated buy keeps no spent mark: the ttl is only checked.)
		rc, err := s.sell(ctx, buy, settings, req, purchaseToken{nonce: adm.nonce, ttl: time.Minute, gate: adm.until})
		if !errors.Is(err, inventory.ErrTokenSpent) {
			// The last unit of an item: the room may be sold out, which
			// its buyers in line read from the room's facts.
			if err == nil && !rc.Replayed && slices.Contains(rc.Remaining, 0) {
				s.rooms.Stale(settings.ID)
			}
			return rc, err
		}
	}
	rc, found, err := s.replayByKey(ctx, settings, req.UserID, buy.Lines(), req.IdempotencyKey)
	if err != nil || found {
		return rc, err
	}
	return inventory.Receipt{}, s.refuseAdmission(ctx, settings.ID, buy.Lines())
}

// refuseAdmission is the answer to a buy of a sale with a room without a
// live admission: what comes before the admission in the contract's order
// (an unknown sku, a sale not active) if anything, else 403.
func (s *Service) refuseAdmission(ctx context.Context, saleID string, lines []inventory.Line) error {
	st, err := s.stock(ctx, saleID)
	if err != nil {
		if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
			return &inventory.NotActiveError{Status: inventory.StatusEnded}
		}
		return err
	}
	var unknown []string
	for _, l := range lines {
		if !slices.ContainsFunc(st.Items, func(it inventory.ItemState) bool { return it.SKU == l.SKU }) {
			unknown = append(unknown, l.SKU)
		}
	}
	if len(unknown) > 0 {
		return &inventory.NotFoundError{Kind: "sku", IDs: unknown}
	}
	if st.Status != inventory.StatusActive {
		return &inventory.NotActiveError{Status: st.Status}
	}
	return errAdmissionDenied
}

// replayByKey answers a buy that repeats an accepted one of the same
// idempotency key without buying: the order the key made, from Redis's
// record of keys or the database's orders; found is false when the key
// made none.
func (s *Service) replayByKey(ctx context.Context, settings saleSettings, user string, lines []inventory.Line, key string) (rc inventory.Receipt, found bool, err error) {
	if key == "" {
		return inventory.Receipt{}, false, nil
	}
	id, found, err := s.eng.OrderOfKey(ctx, settings.ID, user, key)
	if err != nil {
		return inventory.Receipt{}, false, err
	}
	if !found {
		o, inDB, err := s.db.OrderByKey(ctx, settings.ID, user, key)
		if err != nil || !inDB {
			return inventory.Receipt{}, false, err
		}
		id = o.ID
	}
	o, err := s.order(ctx, id)
	if err != nil {
		return inventory.Receipt{}, false, err
	}
	rc, err = replayReceipt(ctx, o, lines, key, func(ctx context.Context) (inventory.SaleState, error) {
		st, err := s.stock(ctx, settings.ID)
		if _, ok := errors.AsType[*inventory.ArchivedError](err); ok {
			return s.stockInDBAsOne(ctx, settings.ID)
		}
		return st, err
	})
	if err != nil {
		return inventory.Receipt{}, false, err
	}
	rc.Order.SaleID = settings.ID
	return rc, true, nil
}

// replayReceipt is the receipt of a repeat of the buy that made o, the
// order its idempotency key names, as buy.lua answers one: the same lines
// (else ErrIdempotencyMismatch), with what is left of each now (stock).
func replayReceipt(ctx context.Context, o inventory.Order, lines []inventory.Line, key string,
	stock func(context.Context) (inventory.SaleState, error)) (inventory.Receipt, error) {
	if !slices.Equal(o.Items, lines) {
		return inventory.Receipt{}, fmt.Errorf("%w: key %q names order %s", inventory.ErrIdempotencyMismatch, key, o.ID)
	}
	st, err := stock(ctx)
	if err != nil {
		return inventory.Receipt{}, err
	}
	rc := inventory.Receipt{Order: o, Replayed: true, Remaining: make([]int64, len(lines))}
	for i, l := range lines {
		for _, it := range st.Items {
			if it.SKU == l.SKU {
				rc.Remaining[i] = it.Remaining
			}
		}
	}
	return rc, nil
}
