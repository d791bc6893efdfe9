package service

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// The verbs of buyers and their orders (see verbs.go).

// BuyRequest is a buyer's buy as the service takes it.
type BuyRequest struct {
	SaleID, UserID string
	Lines          []inventory.Line
	IdempotencyKey string     // "" for none
	PurchaseToken  string     // the X-Purchase-Token, "" for none
	ClientIP       netip.Addr // for the per-address limit; zero: not applied
}

// Buy checks a buy (inventory.CheckBuy), the rate limits of the buying
// flow (per user, per sale, and per address when ClientIP is given) and
// the sale's purchase token, and makes it where the sale sells now:
// Redis, or the database in degraded mode. The receipt's order is the
// public sale's (a segmented sale's, not its segment's), with its payment
// step; Receipt.Replayed says the buy repeats an earlier one of the same
// idempotency key, whose order it returns as it is now.
func (s *Service) Buy(ctx context.Context, req BuyRequest) (inventory.Receipt, error) {
	rc, err := s.placeBuy(ctx, req, nil)
	return rc, verbError(err)
}

// placeBuy is Buy, for Buy and for every server's buy (buyIn). x is the
// HTTP request's exchange, nil for a caller in Go: over HTTP the purchase
// token and the client's address are the request's (req has neither), read
// from x only when the sale needs them — most buys need neither.
func (s *Service) placeBuy(ctx context.Context, req BuyRequest, x exchange) (inventory.Receipt, error) {
	buy, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: req.SaleID, UserID: req.UserID, Lines: req.Lines, IdempotencyKey: req.IdempotencyKey})
	if err != nil {
		return inventory.Receipt{}, err
	}
	settings, err := s.saleFor(ctx, origin{x: x, ip: req.ClientIP}, req.SaleID, req.UserID, "u")
	if err != nil {
		return inventory.Receipt{}, err
	}
	var token purchaseToken // spent by the buy itself, only if it is accepted
	switch {
	case settings.RequirePurchaseToken:
		if token, err = s.checkPurchaseToken(settings.ID, req.UserID, tokenOf(req, x)); err != nil {
			return inventory.Receipt{}, err
		}
	case settings.Admission != nil:
		return s.buyAdmitted(ctx, buy, settings, req, tokenOf(req, x))
	}
	return s.sell(ctx, buy, settings, req, token)
}

// tokenOf is the purchase token (or admission) a buy carries: over HTTP,
// its X-Purchase-Token header.
func tokenOf(req BuyRequest, x exchange) string {
	if x == nil {
		return req.PurchaseToken
	}
	given, _ := x.header("X-Purchase-Token")
	return given
}

// sell makes a checked buy of the sale, spending token (none: "") only if
// the buy is accepted, where the sale sells now.
func (s *Service) sell(ctx context.Context, buy inventory.CheckedBuy, settings saleSettings, req BuyRequest, token purchaseToken) (inventory.Receipt, error) {
	buy, err := buy.WithThrottle(settings.userInBuy)
	if err != nil {
		return inventory.Receipt{}, err
	}
	if buy, err = buy.WithToken(token.nonce, token.ttl); err != nil {
		return inventory.Receipt{}, err
	}
	if !token.gate.IsZero() {
		if buy, err = buy.WithGate(token.gate); err != nil {
			return inventory.Receipt{}, err
		}
	}
	rc, err := s.seller.Buy(ctx, buy)
	if err != nil {
		rc, err = s.replayArchived(ctx, settings.ID, req.UserID, req.Lines, req.IdempotencyKey, err)
	}
	if err != nil {
		if retry, ok := throttledFor(err); ok {
			return inventory.Receipt{}, s.limited("user", settings.user, retry)
		}
		return inventory.Receipt{}, err
	}
	rc.Order.SaleID = settings.ID // a segmented sale's, not its segment's
	boughtPayment(&rc.Order, settings.PaymentTimeout)
	if rc.Replayed {
		if o, err := s.order(ctx, rc.Order.ID); err == nil {
			rc.Order.Status = o.Status // it may be confirmed or cancelled by now
			rc.Order.Payment, rc.Order.PayBy, rc.Order.PaymentRef = o.Payment, o.PayBy, o.PaymentRef
		}
	}
	return rc, nil
}

// throttledFor is the wait the throttle of a buy (buy.lua's check of the
// user limit) asks for; a refusal by a limit the service checked itself
// (limitError, counted already) is not one.
func throttledFor(err error) (time.Duration, bool) {
	throttled, ok := errors.AsType[*inventory.ThrottledError](err)
	if !ok {
		return 0, false
	}
	if _, ours := errors.AsType[*limitError](err); ours {
		return 0, false
	}
	return throttled.RetryAfter, true
}

// origin is where a request of the buying flow comes from, for the
// per-address limit: an HTTP request's exchange, whose client address
// (clientIPOf) is found only when a limit asks for it, or the address a
// caller in Go gives (invalid: none).
type origin struct {
	x  exchange
	ip netip.Addr
}

// addrOf is the client address of a request from o; invalid when unknown.
func (s *Service) addrOf(o origin) netip.Addr {
	if o.x != nil {
		return s.clientIPOf(o.x)
	}
	return o.ip.Unmap()
}

// Order is an order as it is now: from the database once confirmed, else
// from Redis, with its payment step. Its SaleID is the public sale's (a
// segmented sale's, not its segment's). A malformed id is not found.
func (s *Service) Order(ctx context.Context, orderID string) (inventory.Order, error) {
	o, err := s.order(ctx, orderID)
	if errors.Is(err, inventory.ErrInvalid) {
		err = orderNotFound(orderID)
	}
	if err != nil {
		return inventory.Order{}, verbError(err)
	}
	o.SaleID = s.publicSale(ctx, o.SaleID) // a segment's order shows its segmented sale
	return o, nil
}

// orderNotFound is the error of an order that does not exist for the
// caller: unknown, malformed, or someone else's.
func orderNotFound(id string) error {
	return &inventory.NotFoundError{Kind: "order", IDs: []string{id}}
}

// Cancel cancels an order where it may be changed now (Redis, the
// database in degraded mode, or the database alone once its sale is
// archived), returning its stock and the buyer's quota, idempotently. With
// a userID the order must be that user's (anyone else's is not found); ""
// is an operator's cancel of any order.
func (s *Service) Cancel(ctx context.Context, orderID, userID string) (inventory.Order, error) {
	rc, err := s.seller.Cancel(ctx, orderID, userID)
	if err != nil {
		rc, err = s.cancelArchived(ctx, orderID, userID, err)
	}
	if errors.Is(err, inventory.ErrInvalid) {
		err = orderNotFound(orderID)
	}
	if err != nil {
		return inventory.Order{}, verbError(err)
	}
	rc.Order.SaleID = s.publicSale(ctx, rc.Order.SaleID)
	return s.withPayment(ctx, rc.Order), nil
}

// Pay records the payment paymentRef of an order awaiting it. Paying again
// with the same ref changes nothing; another is inventory.ErrAlreadyPaid;
// a cancelled or expired order is inventory.ErrOrderClosed; an order of a
// sale without a payment step, inventory.ErrNoPayment. With a userID the
// order must be that user's; "" is an operator's pay. While the database
// sells (degraded mode) it is inventory.ErrUnavailable: payments are
// recorded in Redis.
func (s *Service) Pay(ctx context.Context, orderID, userID, paymentRef string) (inventory.Order, error) {
	o, _, _, err := s.payOrder(ctx, orderID, userID, paymentRef)
	return o, verbError(err)
}

// payOrder is Pay, and tells whether the pay was made before (replayed),
// and whether the database answered it alone, the sale being archived (a
// pay there changes nothing).
func (s *Service) payOrder(ctx context.Context, id, user, ref string) (o inventory.Order, replayed, archived bool, err error) {
	if _, err := inventory.SaleOfOrder(id); err != nil {
		return inventory.Order{}, false, false, orderNotFound(id)
	}
	if err := inventory.ValidatePaymentRef(ref); err != nil {
		return inventory.Order{}, false, false, err
	}
	if !s.seller.RedisSells() {
		return inventory.Order{}, false, false, errPayNeedsRedis
	}
	o, replayed, err = s.eng.Pay(ctx, id, user, ref)
	if err != nil {
		o, err = s.payArchived(ctx, id, user, ref, err)
		return o, false, err == nil, err
	}
	seg := o.SaleID                        // the engine's sale: its stream has the paid event
	o.SaleID = s.publicSale(ctx, o.SaleID) // a segment's order shows its segmented sale
	if !replayed {
		s.metrics.paid.Inc()
		if s.orders != nil {
			s.orders.Wake(seg)
		}
	}
	if stored, err := s.db.Order(ctx, id); err == nil {
		o.Status = stored.Status // confirmed, or cancelled (a paid order may be cancelled)
	}
	return o, replayed, false, nil
}

// IssuePurchaseToken issues a purchase token of an active sale for one
// buyer, valid for five minutes: a buy of a sale that requires tokens
// carries one (BuyRequest.PurchaseToken), spent only by an accepted buy.
// A sale with a waiting room is bought with admissions instead
// (ErrAdmissionRequired).
// The rate limits of the buying flow apply, per user (a count of its own
// for tokens) and per sale; per address over HTTP only. (Config.Challenge,
// which reads the HTTP request, is the HTTP API's: a caller in Go makes
// its own checks first.)
func (s *Service) IssuePurchaseToken(ctx context.Context, saleID, userID string) (token string, expiresAt time.Time, err error) {
	token, expiresAt, err = s.newPurchaseToken(ctx, saleID, userID, origin{}, nil)
	return token, expiresAt, verbError(err)
}

// newPurchaseToken is IssuePurchaseToken of a request from o; challenge,
// if not nil, is asked once the sale is known active, before the token
// is made, and refuses it with its error.
func (s *Service) newPurchaseToken(ctx context.Context, saleID, user string, o origin, challenge func() error) (string, time.Time, error) {
	if !inventory.ValidID(saleID) {
		return "", time.Time{}, &inventory.InvalidError{Field: "sale id", Reason: "must match ^[A-Za-z0-9_.:-]{1,64}$"}
	}
	settings, err := s.saleFor(ctx, o, saleID, user, "pt")
	if err != nil {
		return "", time.Time{}, err
	}
	if settings.Admission != nil {
		return "", time.Time{}, errAdmissionRequired
	}
	st, err := s.router.Stock(ctx, saleID) // a segmented sale: its segments summed
	if err != nil {
		return "", time.Time{}, err
	}
	if st.Status != inventory.StatusActive {
		return "", time.Time{}, &inventory.NotActiveError{Status: st.Status}
	}
	if challenge != nil {
		if err := challenge(); err != nil {
			return "", time.Time{}, err
		}
	}
	token, expires := s.makePurchaseToken(saleID, user)
	return token, expires, nil
}
