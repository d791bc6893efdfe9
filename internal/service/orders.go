package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
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
	// the payment step (internal/service/pay.go)
	PaymentStatus string     `json:"payment_status,omitempty"`
	PayBy         *time.Time `json:"pay_by,omitempty"`
	PaymentRef    string     `json:"payment_ref,omitempty"`
}

func orderBody(o inventory.Order, remaining []int64) orderJSON {
	b := orderJSON{OrderID: o.ID, SaleID: o.SaleID, UserID: o.UserID, Status: string(o.Status),
		CreatedAt: o.CreatedAt, Items: make([]lineJSON, len(o.Items)),
		PaymentStatus: string(o.Payment), PaymentRef: o.PaymentRef}
	if !o.PayBy.IsZero() {
		b.PayBy = &o.PayBy
	}
	for i, l := range o.Items {
		b.Items[i] = lineJSON{SKU: l.SKU, Qty: l.Qty}
		if i < len(remaining) {
			b.Items[i].Remaining = &remaining[i]
		}
	}
	return b
}

// buy is POST /v1/sales/{sale}/orders over net/http's mux.
func (s *Service) buy(w http.ResponseWriter, r *http.Request) error {
	return s.buyIn(exchangeOf(w, r), r.PathValue("sale"))
}

// buyIn is buy of the sale saleID (the path's, found by the mux, by
// routes' shortcut, or by fasthttp's route in fast.go): the one buy of
// every server. It authenticates the buyer, reads the request (the
// header's idempotency key, the body's lines) and makes the buy as Buy
// does (placeBuy, which checks it, once); a replayed buy is a 200, any
// other a 201.
func (s *Service) buyIn(x exchange, saleID string) error {
	authorization, _ := x.header("Authorization")
	user, err := s.auth.buyerOf(authorization)
	if err != nil {
		return err
	}
	key, hasKey := x.header("Idempotency-Key")
	// The header's own reply for a key given empty or too long (kept as the
	// contract's message); every other rule of the key is CheckBuy's.
	if hasKey && (key == "" || len(key) > inventory.MaxIdempotencyKey) {
		return errInvalid("Idempotency-Key must be 1 to 64 characters")
	}
	lines, err := decodeBuy(x)
	if err != nil {
		return err
	}
	rc, err := s.placeBuy(x.ctx(), BuyRequest{SaleID: saleID, UserID: user, Lines: lines, IdempotencyKey: key}, x)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if rc.Replayed {
		status = http.StatusOK
	}
	writeOrderTo(x, status, rc.Order, rc.Remaining)
	return nil
}

// observeBuy counts a buy that Redis or the database answered (the
// seller's Observe).
func (s *Service) observeBuy(err error, took time.Duration, db bool) {
	s.metrics.observeBuy(err, took)
	if db {
		s.metrics.dbBuys.WithLabelValues(resultOf(err)).Inc()
	}
}

// observeMode sets the degraded-mode gauge (the seller's OnMode).
func (s *Service) observeMode(m store.SellMode) {
	v := 0.0
	if m.Mode != store.ModeRedis {
		v = 1
	}
	s.metrics.degraded.Set(v)
}

// limitDatabaseBuy checks, before a buy from the database, the buyer's
// rate limit that buy.lua checks itself for a buy from Redis (the seller's
// BeforeDatabaseBuy); the other limits were checked before the buy.
func (s *Service) limitDatabaseBuy(ctx context.Context, b inventory.CheckedBuy) error {
	settings, err := s.settings(ctx, b.SaleID())
	if err != nil || settings.userInBuy == nil {
		return err
	}
	return s.allow(ctx, "user", "u:"+b.UserID(), settings.user)
}

// order finds an order: in the database once confirmed, else in Redis.
// While the database is unreachable, Redis's view (pending or cancelled)
// is the best answer there is.
func (s *Service) order(ctx context.Context, id string) (inventory.Order, error) {
	o, err := s.db.Order(ctx, id)
	if err == nil {
		return s.withPayment(ctx, s.freshPayment(ctx, o)), nil
	}
	fromRedis, rerr := s.eng.Order(ctx, id)
	if rerr != nil && !errors.Is(err, inventory.ErrNotFound) {
		return o, err // the database's error says more
	}
	if rerr != nil {
		return fromRedis, rerr
	}
	return s.withPayment(ctx, fromRedis), nil
}

func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) error {
	who, err := s.auth.buyerOrOperator(r)
	if err != nil {
		return err
	}
	id := r.PathValue("order")
	o, err := s.Order(r.Context(), id)
	if err == nil && !who.admin && o.UserID != who.user {
		err = orderNotFound(id) // someone else's order does not exist for you
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
	o, err := s.Cancel(r.Context(), id, who.user)
	if err != nil {
		return err
	}
	if who.admin {
		s.audit(r, "order cancelled", o.SaleID, id, map[string]any{"user": o.UserID})
	}
	writeOrder(w, http.StatusOK, o, nil)
	return nil
}
