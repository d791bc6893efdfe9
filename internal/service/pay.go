package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/expiry"
	"github.com/seckill/seckill/internal/inventory"
)

// The payment step (POST /v1/orders/{order}/pay, the orders' payment_status
// and pay_by, the expiry of unpaid reservations). Redis decides: a pay and
// an expiry are each one script (inventory.Engine.Pay, ExpireDue), and the
// database learns of them from the sale's stream like of any other event.
// While the database sells (degraded mode) a pay is refused with 503 and
// reservations do not expire: both need Redis, where the deadlines are; the
// recovery brings the database's reservations back to Redis, whose expiry
// then takes the ones past due.

var (
	errAlreadyPaid = &apiError{Status: http.StatusConflict, Code: "already_paid",
		Message: "this order was paid with another payment_ref", Kind: inventory.ErrAlreadyPaid}
	errOrderClosed = &apiError{Status: http.StatusConflict, Code: "order_closed",
		Message: "this order was cancelled or its payment deadline has passed", Kind: inventory.ErrOrderClosed}
	errPayNeedsRedis = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "payments are recorded in redis, which does not sell right now (degraded mode): retry when it is back",
		Kind:    inventory.ErrUnavailable}
)

// pay is POST /v1/orders/{order}/pay: Pay, with the audit of an
// operator's pay (one the database answered for an archived sale changed
// nothing, and is not audited).
func (s *Service) pay(w http.ResponseWriter, r *http.Request) error {
	who, err := s.auth.buyerOrOperator(r)
	if err != nil {
		return err
	}
	id := r.PathValue("order")
	var req struct {
		PaymentRef *string `json:"payment_ref"`
	}
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.PaymentRef == nil {
		return errInvalid("payment_ref is required")
	}
	o, replayed, archived, err := s.payOrder(r.Context(), id, who.user, *req.PaymentRef)
	if err != nil {
		return err
	}
	if who.admin && !archived {
		s.audit(r, "order paid", o.SaleID, id, map[string]any{"user": o.UserID, "replayed": replayed})
	}
	writeOrder(w, http.StatusOK, o, nil)
	return nil
}

// payArchived answers a pay of an order of a sale whose keys are gone from
// Redis (archived) from the database, where it is final: it awaits no
// payment any more (the archiver waits for that), so a pay changes
// nothing. The same ref as the order's is the pay replayed; another is
// ErrAlreadyPaid; an unpaid order is ErrOrderClosed. err is the engine's
// error when the sale is not archived.
func (s *Service) payArchived(ctx context.Context, orderID, user, ref string, err error) (inventory.Order, error) {
	if _, ok := errors.AsType[*inventory.ArchivedError](err); !ok {
		return inventory.Order{}, err
	}
	o, err := s.db.Order(ctx, orderID)
	if err == nil && user != "" && o.UserID != user {
		err = &inventory.NotFoundError{Kind: "order", IDs: []string{orderID}}
	}
	if err != nil {
		return inventory.Order{}, err
	}
	switch {
	case o.Payment == inventory.PaymentNotRequired || o.Payment == "":
		return inventory.Order{}, inventory.ErrNoPayment
	case o.Payment != inventory.PaymentPaid:
		return inventory.Order{}, fmt.Errorf("%w: %s (the sale is archived)", inventory.ErrOrderClosed, orderID)
	case o.PaymentRef != ref:
		return inventory.Order{}, fmt.Errorf("%w: %s", inventory.ErrAlreadyPaid, orderID)
	}
	o.SaleID = s.publicSale(ctx, o.SaleID)
	return o, nil
}

// withPayment fills the payment step of an order that does not carry it
// (Payment ""): not_required for a sale without one; else Redis's view,
// or, if Redis cannot tell, what the order's status says. A segment's
// order has its segmented sale's settings (a segment has none of its own).
func (s *Service) withPayment(ctx context.Context, o inventory.Order) inventory.Order {
	if o.Payment != "" {
		return o
	}
	settings, err := s.settings(ctx, s.publicSale(ctx, o.SaleID))
	if err != nil || settings.PaymentTimeout == 0 {
		o.Payment = inventory.PaymentNotRequired
		return o
	}
	if s.seller.RedisSells() {
		if p, err := s.eng.Payment(ctx, o.ID); err == nil {
			o.Payment, o.PayBy, o.PaymentRef = p.Payment, p.PayBy, p.PaymentRef
			return o
		}
	}
	if o.Status == inventory.OrderCancelled {
		o.Payment = inventory.PaymentExpired
	} else {
		o.Payment, o.PayBy = inventory.PaymentAwaiting, o.CreatedAt.Add(settings.PaymentTimeout)
	}
	return o
}

// boughtPayment fills the payment step of an order a buy just made: no
// Redis call (the buy filed its deadline at its time + the timeout).
func boughtPayment(o *inventory.Order, timeout time.Duration) {
	if timeout == 0 {
		o.Payment = inventory.PaymentNotRequired
		return
	}
	o.Payment, o.PayBy = inventory.PaymentAwaiting, o.CreatedAt.Add(timeout)
}

// freshPayment: an order the database says is awaiting payment may have
// been paid or expired in Redis, in an event the order consumer has not
// stored yet: Redis's view is the newer one.
func (s *Service) freshPayment(ctx context.Context, o inventory.Order) inventory.Order {
	if o.Payment != inventory.PaymentAwaiting || !s.seller.RedisSells() {
		return o
	}
	if p, err := s.eng.Payment(ctx, o.ID); err == nil {
		o.Payment, o.PayBy, o.PaymentRef = p.Payment, p.PayBy, p.PaymentRef
		if p.Status == inventory.OrderCancelled {
			o.Status = inventory.OrderCancelled
		}
	}
	return o
}

// expiryLoop expires unpaid reservations, every tick, until ctx ends
// (package expiry).
func (s *Service) expiryLoop(ctx context.Context, every time.Duration) {
	loop := expiry.New(s.eng, expiry.Options{
		Sales: func(ctx context.Context) ([]expiry.Sale, error) {
			sales, err := s.db.PaymentSales(ctx)
			out := make([]expiry.Sale, len(sales))
			for i, sale := range sales {
				out[i] = expiry.Sale{ID: sale.ID, EndsAt: sale.EndsAt, Timeout: sale.PaymentTimeout}
			}
			return out, err
		},
		Lost: s.bringBackReservations,
		// Not while Redis does not sell: a Redis that restarted may be
		// behind the database (failover.Seller.OnConnect) until the
		// recovery repairs it, an order paid there still awaiting here.
		Paused: func() bool { return !s.seller.RedisSells() },
		Tick:   every,
		OnExpired: func(saleID string, orders []string) {
			s.metrics.expired.Add(float64(len(orders)))
			if s.orders != nil {
				s.orders.Wake(saleID)
			}
		},
		Logger: s.log,
	})
	_ = loop.Run(ctx)
}

// bringBackReservations rebuilds, of the sales with a payment step that
// Redis lost (the expiry loop's Lost), the ones the database holds
// reservations of: nothing else would bring back a sale nobody buys from
// or reads (one that has ended, say), and its reservations would await
// payment forever. A sale with none stays out of Redis (it may be one
// being created, or being archived). The rebuild refuses an archived
// sale, and any sale while Redis does not sell.
func (s *Service) bringBackReservations(ctx context.Context, saleIDs []string) error {
	awaiting, err := s.db.AwaitingPayment(ctx, saleIDs)
	if err != nil {
		return err
	}
	var firstErr error
	for _, id := range awaiting {
		if _, err := s.eng.Stock(ctx, id); err != nil && firstErr == nil {
			if _, archived := errors.AsType[*inventory.ArchivedError](err); !archived {
				firstErr = fmt.Errorf("bring back the reservations of sale %s: %w", id, err)
			}
		}
	}
	return firstErr
}
