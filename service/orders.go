package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/store"
)

type lineJSON struct {
	SKU       string `json:"sku"`
	Qty       int64  `json:"qty"`
	Remaining *int64 `json:"remaining,omitempty"`
}

type orderJSON struct {
	OrderID   string     `json:"order_id"`
	SaleID    string     `json:"sale_id"`
	UserID    string     `json:"user_id"`
	Status    string     `json:"status"`
	Items     []lineJSON `json:"items"`
	CreatedAt time.Time  `json:"created_at"`
}

func orderBody(o inventory.Order, remaining []int64) orderJSON {
	b := orderJSON{OrderID: o.ID, SaleID: o.SaleID, UserID: o.UserID, Status: string(o.Status),
		CreatedAt: o.CreatedAt, Items: make([]lineJSON, len(o.Items))}
	for i, l := range o.Items {
		b.Items[i] = lineJSON{SKU: l.SKU, Qty: l.Qty}
		if i < len(remaining) {
			b.Items[i].Remaining = &remaining[i]
		}
	}
	return b
}

func (s *Service) buy(w http.ResponseWriter, r *http.Request) error {
	user, err := s.auth.buyer(r)
	if err != nil {
		return err
	}
	saleID := r.PathValue("sale")
	key, hasKey := r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	if hasKey && (key == "" || len(key) > inventory.MaxIdempotencyKey) {
		return errInvalid("Idempotency-Key must be 1 to 64 characters")
	}
	lines, err := decodeBuy(w, r)
	if err != nil {
		return err
	}
	if !linesValid(saleID, user, lines, key) {
		if err := inventory.ValidateBuy(saleID, user, lines, key); err != nil {
			return err
		}
	}
	settings, err := s.settings(r.Context(), saleID)
	if err != nil {
		return err
	}
	if err := s.throttle(r, settings, user, "u"); err != nil {
		return err
	}
	if !s.deg.beginRedisBuy() {
		return s.buyOnDB(w, r, settings, user, lines, key)
	}
	began := time.Now()
	rc, err := s.buyOnRedis(r, settings, user, lines, key)
	if err != nil {
		if retry, ok := throttledFor(err); ok {
			return s.limited("user", settings.user, retry)
		}
	}
	if err == nil || !isAPIError(err) {
		s.metrics.observeBuy(err, time.Since(began))
	}
	if errors.Is(err, inventory.ErrFenced) || err != nil && isRedisDown(err) {
		if _, ok := s.deg.dbSells(); ok { // the mode changed while the buy was on its way
			return s.buyOnDB(w, r, settings, user, lines, key)
		}
		return errUnavailable
	}
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if rc.Replayed {
		status = http.StatusOK
		if o, err := s.order(r.Context(), rc.Order.ID); err == nil {
			rc.Order.Status = o.Status // it may be confirmed or cancelled by now
		}
	}
	writeOrder(w, status, rc.Order, rc.Remaining)
	return nil
}

// throttledFor is the wait an inventory.ThrottledError asks for. (Apart,
// so that the variable errors.As needs is made only for an error.)
func throttledFor(err error) (time.Duration, bool) {
	var throttled *inventory.ThrottledError
	if errors.As(err, &throttled) {
		return throttled.RetryAfter, true
	}
	return 0, false
}

// isAPIError: err is (or wraps) an answer the service made itself.
func isAPIError(err error) bool {
	var api *apiError
	return errors.As(err, &api)
}

// buyOnRedis checks the purchase token, if the sale requires one (buy.lua
// spends it, only if the buy is accepted), and buys from Redis, for a buy counted on its way by beginRedisBuy; it records how
// the buy ended (endRedisBuy). The order id is chosen here, so that a buy
// whose outcome stays unknown is kept under it (degraded.go: unsure buys).
func (s *Service) buyOnRedis(r *http.Request, settings saleSettings, user string, lines []inventory.Line, key string) (rc inventory.Receipt, err error) {
	var buy inventory.BuyRequest // sent once it has an order id
	defer func() { s.deg.endRedisBuy(buy, rc, err) }()
	var token purchaseToken // spent by the buy itself, only if it is accepted
	if settings.RequirePurchaseToken {
		if token, err = s.checkPurchaseToken(settings.ID, user, r.Header.Get("X-Purchase-Token")); err != nil {
			return rc, err
		}
	}
	buy = inventory.BuyRequest{SaleID: settings.ID, UserID: user, Lines: lines, IdempotencyKey: key, Throttle: settings.userInBuy,
		OrderID: inventory.NewOrderID(settings.ID), Token: token.nonce, TokenTTL: token.ttl}
	rc, err = s.eng.BuyWith(r.Context(), buy)
	if errors.Is(err, inventory.ErrFenced) && s.deg.liftStaleFence(r.Context(), settings.ID) {
		rc, err = s.eng.BuyWith(r.Context(), buy)
	}
	return rc, err
}

// errTokensNeedRedis refuses a buy of a sale that requires purchase tokens
// while the database sells: a token's single use is kept in Redis.
var errTokensNeedRedis = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
	Message: "this sale requires purchase tokens, which are checked in redis; it does not sell while the database sells (degraded mode): retry when redis is back"}

// buyOnDB buys on the database in degraded mode, or answers 503 while
// nobody sells (the grace period after the switch, a recovery). It keeps
// the defences of a buy from Redis: the buyer's rate limit, which buy.lua
// checks itself for Redis buys (the other limits were checked before);
// the pause, read under the sale's lock; purchase tokens, by refusing.
func (s *Service) buyOnDB(w http.ResponseWriter, r *http.Request, settings saleSettings, user string, lines []inventory.Line, key string) error {
	m, ok := s.deg.dbSells()
	if !ok {
		return errUnavailable
	}
	if settings.RequirePurchaseToken {
		return errTokensNeedRedis
	}
	if settings.userInBuy != nil {
		if err := s.allow(r, "user", "u:"+user, settings.user); err != nil {
			return err
		}
	}
	began := time.Now()
	rc, err := s.db.Buy(r.Context(), store.DegradedBuy{Epoch: m.Epoch, SaleID: settings.ID, UserID: user, Lines: lines,
		IdempotencyKey: key, Now: time.Now()})
	if errors.Is(err, store.ErrModeChanged) {
		err = errUnavailable
	}
	s.metrics.observeBuy(err, time.Since(began))
	s.metrics.dbBuys.WithLabelValues(resultOf(err)).Inc()
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if rc.Replayed {
		status = http.StatusOK
	}
	writeOrder(w, status, rc.Order, rc.Remaining)
	return nil
}

// order finds an order: in the database once confirmed, else in Redis.
// While the database is unreachable, Redis's view (pending or cancelled)
// is the best answer there is.
func (s *Service) order(ctx context.Context, id string) (inventory.Order, error) {
	o, err := s.db.Order(ctx, id)
	if err == nil {
		return o, nil
	}
	fromRedis, rerr := s.eng.Order(ctx, id)
	if rerr != nil && !errors.Is(err, inventory.ErrNotFound) {
		return o, err // the database's error says more
	}
	return fromRedis, rerr
}

func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) error {
	who, err := s.auth.buyerOrOperator(r)
	if err != nil {
		return err
	}
	id := r.PathValue("order")
	o, err := s.order(r.Context(), id)
	if errors.Is(err, inventory.ErrInvalid) || err == nil && !who.admin && o.UserID != who.user {
		err = errNotFound("order not found: " + id) // someone else's order does not exist for you
	}
	if err != nil {
		return err
	}
	writeOrder(w, http.StatusOK, o, nil)
	return nil
}

func (s *Service) cancel(w http.ResponseWriter, r *http.Request) error {
	who, err := s.auth.buyerOrOperator(r)
	if err != nil {
		return err
	}
	id := r.PathValue("order")
	var rc inventory.Receipt
	if s.deg.redisSells() {
		rc, err = s.eng.Cancel(r.Context(), id, who.user)
		if err == nil {
			s.deg.acks.add(rc.Order)
			s.orders.Wake(rc.Order.SaleID) // the sale may have ended and been drained
		}
	} else if m, ok := s.deg.dbSells(); ok {
		rc, err = s.db.Cancel(r.Context(), m.Epoch, id, who.user, time.Now())
	} else {
		err = errUnavailable
	}
	if errors.Is(err, inventory.ErrFenced) || errors.Is(err, store.ErrModeChanged) {
		err = errUnavailable
	}
	if errors.Is(err, inventory.ErrInvalid) {
		err = errNotFound("order not found: " + id)
	}
	if err != nil {
		return err
	}
	if who.admin {
		s.audit(r, "order cancelled", rc.Order.SaleID, id, map[string]any{"user": rc.Order.UserID})
	}
	writeOrder(w, http.StatusOK, rc.Order, nil)
	return nil
}
