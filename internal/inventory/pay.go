package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The payment step. A sale with a PaymentTimeout makes every order it
// accepts a reservation: buy.lua files it in the sale's deadlines (order id
// -> pay_by, by Redis's clock) and counts its units as held by awaiting
// orders. Pay (pay.lua) takes it off and records its payment ref; at pay_by
// ExpireDue (expire.lua) cancels it with an "expired" event. Both are one
// script each and judge the deadline by the same clock, so exactly one of
// them wins. A cancel (cancel.lua) takes an awaiting order off too; a paid
// order may still be cancelled (its ref stays: a refund is the shop's
// business).

// PaymentStatus is where an order is in the payment step.
type PaymentStatus string

// The payment statuses. An order that was cancelled before it was paid
// (by its buyer, an operator, or its deadline) is PaymentExpired: the
// reservation ended unpaid; an "expired" event tells a lapsed deadline
// apart.
const (
	PaymentNotRequired PaymentStatus = "not_required"
	PaymentAwaiting    PaymentStatus = "awaiting"
	PaymentPaid        PaymentStatus = "paid"
	PaymentExpired     PaymentStatus = "expired"
)

// MaxPaymentRef is the longest payment ref.
const MaxPaymentRef = 128

// Errors of Pay. Each matches itself with errors.Is.
var (
	// ErrAlreadyPaid: the order was paid with another payment ref.
	ErrAlreadyPaid = errors.New("seckill: order already paid")
	// ErrOrderClosed: the order was cancelled or expired, or its deadline
	// has passed: it can no longer be paid.
	ErrOrderClosed = errors.New("seckill: order closed")
	// ErrNoPayment: the order's sale has no payment step (it matches
	// ErrInvalid too).
	ErrNoPayment = &InvalidError{Field: "order", Reason: "belongs to a sale without a payment step"}
)

// ValidatePaymentRef checks a payment ref: 1 to MaxPaymentRef printable
// ASCII characters.
func ValidatePaymentRef(ref string) error {
	if ref == "" || len(ref) > MaxPaymentRef {
		return invalid("payment_ref", "must be 1 to %d printable characters", MaxPaymentRef)
	}
	for i := 0; i < len(ref); i++ {
		if ref[i] < 0x20 || ref[i] > 0x7e {
			return invalid("payment_ref", "must be 1 to %d printable characters", MaxPaymentRef)
		}
	}
	return nil
}

// Pay records the payment of an order awaiting it. Paying again with the
// same ref changes nothing (replayed is true); another ref is
// ErrAlreadyPaid; a cancelled or expired order, or one whose deadline has
// passed, is ErrOrderClosed (its message says "cancelled" or "expired",
// the latter once the deadline has passed); an order of a sale without a payment step is
// ErrNoPayment. With a non-empty userID the order must be that user's
// (anyone else's is ErrNotFound).
func (e *Engine) Pay(ctx context.Context, orderID, userID, ref string) (o Order, replayed bool, err error) {
	saleID, err := SaleOfOrder(orderID)
	if err != nil {
		return Order{}, false, err
	}
	if userID != "" {
		if err := validateID("user", userID); err != nil {
			return Order{}, false, err
		}
	}
	if err := ValidatePaymentRef(ref); err != nil {
		return Order{}, false, err
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.orders, k.deadlines, k.paid, k.events}
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.runSale(ctx, saleID, payScript, keys, e.scriptNow(), orderID, userID, ref)
	})
	if err != nil {
		return Order{}, false, err
	}
	switch code(reply) {
	case codeOK, codeReplay:
		o, err := decodeRecord(orderID, saleID, str(at(reply, 1)))
		if err != nil {
			return Order{}, false, err
		}
		o.Payment, o.PaymentRef = PaymentPaid, ref
		return o, code(reply) == codeReplay, nil
	case codeUnknown:
		return Order{}, false, &NotFoundError{Kind: "order", IDs: []string{orderID}}
	case codeAlreadyPaid:
		return Order{}, false, fmt.Errorf("%w: %s", ErrAlreadyPaid, orderID)
	case codeClosed:
		return Order{}, false, fmt.Errorf("%w: %s (%s)", ErrOrderClosed, orderID, str(at(reply, 1)))
	case codeNoPayment:
		return Order{}, false, ErrNoPayment
	}
	return Order{}, false, unexpected(payScript, reply)
}

// The outcome codes of pay.lua beyond the common ones.
const (
	codeAlreadyPaid = 16
	codeClosed      = 17
	codeNoPayment   = 18
)

// ExpireDue expires up to max orders of the sale whose deadline has passed
// (by Redis's clock): each is cancelled, with an "expired" event. It returns
// the orders it expired and whether more are due (call again). A sale
// missing from Redis has nothing to expire here (its orders' deadlines come
// back with it, see Snapshot). Safe to run from several processes at once.
func (e *Engine) ExpireDue(ctx context.Context, saleID string, max int) (expired []string, more bool, err error) {
	if err := validateID("sale", saleID); err != nil {
		return nil, false, err
	}
	if max < 1 {
		return nil, false, invalid("max", "must be at least 1")
	}
	k := e.keys(saleID)
	done := e.soldOut.returning()
	reply, err := e.run.run(ctx, expireScript, []string{k.sale, k.bought, k.orders, k.events, k.deadlines},
		e.scriptNow(), max, e.StockChannel(), saleID)
	done(saleID) // even a failed call may have returned stock
	if err != nil {
		return nil, false, err
	}
	switch code(reply) {
	case codeOK:
		n, ok1 := at(reply, 1).(int64)
		m, ok2 := at(reply, 2).(int64)
		ids := strs(from(reply, 3))
		if !ok1 || !ok2 || int(n) != len(ids) {
			return nil, false, unexpected(expireScript, reply)
		}
		return ids, m == 1, nil
	case codeMissing:
		return nil, false, nil
	case codeCorrupt:
		return strs(from(reply, 3)), false, unexpected(expireScript, reply)
	}
	return nil, false, unexpected(expireScript, reply)
}

// DueSales returns those of saleIDs whose earliest payment deadline has
// passed by Redis's clock, and those missing from Redis (lost: their
// reservations are only in the system of record until a rebuild brings
// them back; ExpireDue does not rebuild): one pipeline of a ZRANGE (the
// earliest deadline) and an EXISTS per sale and the server's TIME, whatever
// the number of awaiting orders.
func (e *Engine) DueSales(ctx context.Context, saleIDs []string) (due, lost []string, err error) {
	if len(saleIDs) == 0 {
		return nil, nil, nil
	}
	pipe := e.rdb.Pipeline()
	first := make([]*redis.ZSliceCmd, len(saleIDs))
	exists := make([]*redis.IntCmd, len(saleIDs))
	for i, id := range saleIDs {
		first[i] = pipe.ZRangeWithScores(ctx, e.keys(id).deadlines, 0, 0)
		exists[i] = pipe.Exists(ctx, e.keys(id).sale)
	}
	var clock *redis.TimeCmd
	if e.scriptClock == nil {
		clock = pipe.Time(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("seckill: read payment deadlines: %w", err)
	}
	var now int64
	if clock != nil {
		now = clock.Val().UnixMilli()
	} else {
		now = e.scriptClock.Now().UnixMilli()
	}
	for i, c := range first {
		switch z := c.Val(); {
		case exists[i].Val() == 0:
			lost = append(lost, saleIDs[i])
		case len(z) > 0 && int64(z[0].Score) <= now:
			due = append(due, saleIDs[i])
		}
	}
	return due, lost, nil
}

// payment fills o's payment step from Redis: the sale's timeout (pay, "" for
// none), the order's deadline (score, "" for none) and its ref ("" unpaid).
func payment(o *Order, pay, score, ref string) {
	switch {
	case pay == "" || pay == "0":
		o.Payment = PaymentNotRequired
	case ref != "":
		o.Payment, o.PaymentRef = PaymentPaid, ref
	case o.Status == OrderCancelled:
		o.Payment = PaymentExpired
	default:
		o.Payment = PaymentAwaiting
		if ms, err := strconv.ParseFloat(score, 64); err == nil {
			o.PayBy = time.UnixMilli(int64(ms)).UTC()
		} else if t, err := strconv.ParseInt(pay, 10, 64); err == nil {
			o.PayBy = o.CreatedAt.Add(time.Duration(t) * time.Millisecond)
		}
	}
}

// Payment returns where the order is in the payment step as Redis holds it
// (PaymentNotRequired for a sale without one), with PayBy while awaiting.
// It reads the order, its sale's timeout, deadline and ref in one pipeline;
// a sale missing from Redis is ErrNotFound (the caller has the database).
func (e *Engine) Payment(ctx context.Context, orderID string) (Order, error) {
	saleID, err := SaleOfOrder(orderID)
	if err != nil {
		return Order{}, err
	}
	k := e.keys(saleID)
	pipe := e.rdb.Pipeline()
	record := pipe.HMGet(ctx, k.orders, recordFields(orderID)...)
	pay := pipe.HGet(ctx, k.sale, "pay")
	score := pipe.ZScore(ctx, k.deadlines, orderID)
	ref := pipe.HGet(ctx, k.paid, orderID)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Order{}, fmt.Errorf("seckill: read payment of order %s: %w", orderID, err)
	}
	rec, ok := recordOf(orderID, record.Val())
	if record.Err() != nil || !ok {
		return Order{}, &NotFoundError{Kind: "order", IDs: []string{orderID}}
	}
	o, err := decodeRecord(orderID, saleID, rec)
	if err != nil {
		return Order{}, err
	}
	s := ""
	if score.Err() == nil {
		s = strconv.FormatFloat(score.Val(), 'f', 0, 64)
	}
	payment(&o, pay.Val(), s, ref.Val())
	return o, nil
}

// awaitingUnits is the units of sku the sale's orders awaiting payment hold
// (the sale's "a:<sku>" counter), from its sale hash.
func awaitingUnits(h map[string]string, sku string) int64 {
	n, _ := strconv.ParseInt(h["a:"+sku], 10, 64)
	return n
}

// addPayment adds a snapshot's order o of a sale with a payment timeout to
// the payment step's state: a paid order to the paid hash, an order that
// is neither paid nor cancelled to the deadlines (at its PayBy, or its
// creation + timeout) and its units to awaiting. An order whose Payment
// the loader left "" counts as awaiting unless cancelled.
func (st *saleState) addPayment(o Order, timeout time.Duration, awaiting map[string]int64) {
	switch {
	case o.Payment == PaymentPaid:
		st.paid = append(st.paid, o.ID, o.PaymentRef)
	case o.Status == OrderCancelled || o.Payment == PaymentExpired || o.Payment == PaymentNotRequired:
	default:
		payBy := o.PayBy
		if payBy.IsZero() {
			payBy = o.CreatedAt.Add(timeout)
		}
		st.deadlines = append(st.deadlines, o.ID, payBy.UnixMilli())
		for _, l := range o.Items {
			awaiting[l.SKU] += l.Qty
		}
	}
}

// scanDeadlines reads a sale's deadlines as order id -> pay_by (unix ms,
// as repair.lua compares them), with ZSCAN.
func (e *Engine) scanDeadlines(ctx context.Context, key string) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		pipe := e.rdb.Pipeline() // (the engine's Client is narrow: no ZSCAN of its own)
		scan := pipe.ZScan(ctx, key, cursor, "", 1000)
		_, _ = pipe.Exec(ctx)
		kv, next, err := scan.Result()
		if err != nil {
			return nil, fmt.Errorf("seckill: scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
			if f, err := strconv.ParseFloat(kv[i+1], 64); err == nil {
				out[kv[i]] = strconv.FormatInt(int64(f), 10)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}
