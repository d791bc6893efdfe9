package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// The payment step of a sale with a payment timeout (internal/inventory/pay.go), as
// stored (migration 010): the sale's payment_timeout_ms, and per order
// payment_status ('' while the sale decides it, 'paid' or 'expired'),
// payment_ref and paid_at. pay_by is not stored: it is created_at + the
// sale's timeout, as buy.lua files it.

// paymentOf fills o's payment step from its stored payment_status and its
// sale's timeout (ms). An order of a sale without a payment step keeps
// Payment "" (as before the payment step existed; the service says
// not_required).
func paymentOf(o *inventory.Order, status string, timeoutMs int64) {
	switch {
	case status == string(inventory.PaymentPaid):
		o.Payment = inventory.PaymentPaid
	case status == string(inventory.PaymentExpired):
		o.Payment = inventory.PaymentExpired
	case timeoutMs == 0:
	case o.Status == inventory.OrderCancelled:
		o.Payment = inventory.PaymentExpired // cancelled before it was paid
	default:
		o.Payment = inventory.PaymentAwaiting
		o.PayBy = o.CreatedAt.Add(time.Duration(timeoutMs) * time.Millisecond)
	}
	if o.Payment != inventory.PaymentPaid {
		o.PaymentRef = ""
	}
}

// applyPayment applies a paid or an expired event whose journal rows were
// new. Either may come before the order's bought event (a crashed
// consumer's entries are reclaimed after later ones): then the order goes
// in with it, and its bought event leaves it so. A paid event never undoes
// a cancel applied before it (a paid order may be cancelled after); an
// expired one cancels the order as a cancelled event does.
func (s *Store) applyPayment(ctx context.Context, tx *sql.Tx, saleID string, ev inventory.Event) error {
	o := ev.Order
	sku, qty := inlineLine(o)
	var err error
	if ev.Type == inventory.EventPaid {
		_, err = s.exec(ctx, tx, `INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at,
			payment_status, payment_ref, paid_at, sku, qty) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET payment_status = excluded.payment_status,
			payment_ref = excluded.payment_ref, paid_at = excluded.paid_at`,
			o.ID, saleID, o.UserID, string(inventory.OrderConfirmed), o.IdempotencyKey, ms(o.CreatedAt),
			string(inventory.PaymentPaid), o.PaymentRef, ms(ev.At), sku, qty)
	} else {
		_, err = s.exec(ctx, tx, `INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at,
			cancelled_at, payment_status, sku, qty) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, cancelled_at = excluded.cancelled_at,
			payment_status = excluded.payment_status`,
			o.ID, saleID, o.UserID, string(inventory.OrderCancelled), o.IdempotencyKey, ms(o.CreatedAt),
			ms(ev.At), string(inventory.PaymentExpired), sku, qty)
		if err == nil {
			err = s.dropVoid(ctx, tx, saleID, o.ID) // the expiry gives the units back now
		}
	}
	if err != nil {
		return err
	}
	return s.insertOrderItems(ctx, tx, appendOrderItems(nil, o))
}

// PaymentSales returns the sales with a payment step that are not
// archived: id, end and payment timeout (the expiry loop's list, read every
// second: an archived sale awaits no payment and has no keys in Redis, so
// the list does not grow with every sale ever run).
func (s *Store) PaymentSales(ctx context.Context) ([]inventory.Sale, error) {
	rows, err := s.query(ctx, s.db, "SELECT id, ends_at, payment_timeout_ms FROM sales WHERE archived_at = 0 AND payment_timeout_ms > 0")
	if err != nil {
		return nil, fmt.Errorf("store: list sales with a payment step: %w", err)
	}
	var out []inventory.Sale
	err = scanEach(rows, func() error {
		var sale inventory.Sale
		var end, pay int64
		err := rows.Scan(&sale.ID, &end, &pay)
		sale.EndsAt, sale.PaymentTimeout = fromMs(end), time.Duration(pay)*time.Millisecond
		out = append(out, sale)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list sales with a payment step: %w", err)
	}
	return out, nil
}

// OrderTally is what became of a sale's orders, as the database has them.
type OrderTally struct {
	// Confirmed orders are neither cancelled nor expired (paid and unpaid
	// ones alike); Cancelled ones were cancelled or expired.
	Confirmed, Cancelled int64
	// Paid: confirmed and paid. Unpaid: confirmed, neither paid nor
	// expired (awaiting payment, in a sale with a payment step).
	Paid, Unpaid int64
	// Expired: cancelled unpaid at their payment deadline (counted in
	// Cancelled).
	Expired int64
}

// OrderTalliesOf tallies the orders of each sale of saleIDs (one query per
// 500 sales; a sale without orders has a zero tally), from the counts the
// triggers of migration 013 keep (order_counts): the live view asks for
// every sale it reads.
func (s *Store) OrderTalliesOf(ctx context.Context, saleIDs []string) (map[string]OrderTally, error) {
	tallies := make(map[string]OrderTally, len(saleIDs))
	for _, id := range saleIDs {
		tallies[id] = OrderTally{}
	}
	for chunk := range slices.Chunk(saleIDs, 500) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.query(ctx, s.db, "SELECT sale_id, status, payment_status, CAST(SUM(n) AS BIGINT) FROM order_counts WHERE sale_id IN ("+
			strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+") GROUP BY sale_id, status, payment_status", args...)
		if err != nil {
			return nil, fmt.Errorf("store: tally orders: %w", err)
		}
		err = scanEach(rows, func() error {
			var id, status, payment string
			var n int64
			if err := rows.Scan(&id, &status, &payment, &n); err != nil {
				return err
			}
			t, ok := tallies[id]
			if !ok {
				return nil
			}
			switch inventory.OrderStatus(status) {
			case inventory.OrderConfirmed:
				t.Confirmed += n
				switch inventory.PaymentStatus(payment) {
				case inventory.PaymentPaid:
					t.Paid += n
				case "":
					t.Unpaid += n
				}
			case inventory.OrderCancelled:
				t.Cancelled += n
				if inventory.PaymentStatus(payment) == inventory.PaymentExpired {
					t.Expired += n
				}
			}
			tallies[id] = t
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("store: tally orders: %w", err)
		}
	}
	return tallies, nil
}

// AwaitingUnits sums, per sku, the units of the sale's orders awaiting
// payment as the database has them (confirmed, neither paid nor expired;
// for a sale with a payment step): what GET /v1/sales shows while the
// database sells.
func (s *Store) AwaitingUnits(ctx context.Context, saleID string) (map[string]int64, error) {
	rows, err := s.query(ctx, s.db, `SELECT l.sku, CAST(SUM(l.qty) AS BIGINT) FROM `+
		orderLines("o.sale_id = ? AND o.status = ? AND o.payment_status = ''")+` l GROUP BY l.sku`,
		twice(saleID, string(inventory.OrderConfirmed))...)
	if err != nil {
		return nil, fmt.Errorf("store: awaiting units of sale %s: %w", saleID, err)
	}
	out := map[string]int64{}
	err = scanEach(rows, func() error {
		var sku string
		var n int64
		err := rows.Scan(&sku, &n)
		out[sku] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: awaiting units of sale %s: %w", saleID, err)
	}
	return out, nil
}

// AwaitingPayment returns those of saleIDs (sales with a payment step, not
// archiving) of which the database holds an order awaiting payment:
// neither cancelled nor paid nor expired (one query per 500 sales). Redis
// decides the payment step; this is for a sale whose keys Redis lost,
// whose reservations only the database still knows. A sale the archiver
// has begun to remove is left out: it found nothing awaiting in Redis, and
// it is never rebuilt.
func (s *Store) AwaitingPayment(ctx context.Context, saleIDs []string) ([]string, error) {
	var out []string
	for chunk := range slices.Chunk(saleIDs, 500) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.query(ctx, s.db, `SELECT DISTINCT o.sale_id FROM orders o JOIN sales s ON s.id = o.sale_id
			WHERE o.sale_id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+`)
			AND s.payment_timeout_ms > 0 AND s.archiving_at = 0 AND o.status <> ? AND o.payment_status = ''`,
			append(args, string(inventory.OrderCancelled))...)
		if err != nil {
			return nil, fmt.Errorf("store: sales awaiting payment: %w", err)
		}
		err = scanEach(rows, func() error {
			var id string
			err := rows.Scan(&id)
			out = append(out, id)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("store: sales awaiting payment: %w", err)
		}
	}
	slices.Sort(out)
	return out, nil
}
