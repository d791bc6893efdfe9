package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// DegradedBuy is a buy made on the database in degraded mode.
type DegradedBuy struct {
	Epoch int64 // the degraded epoch the buy was routed by
	// Buy is the buy, checked by inventory.CheckBuy (not again here), in
	// the engine sale it is made in. Its token, throttle and order id are
	// not the database's (see failover).
	Buy inventory.CheckedBuy
	Now time.Time
}

// Buy sells on the database, in degraded mode, with the rules the engine
// keeps in Redis: the mode must still be db at b.Epoch and past its
// sells_from (else ErrModeChanged), the sale active, every sku known, the
// per-user limit kept and every line in stock (stocked minus the units of
// live orders), all or nothing; an idempotency key already used by the
// buyer in the sale returns that order, Replayed. The sale's row is locked
// for the transaction, so the database's buys of one sale run one at a
// time, and the mode row is read locked, so a mode change waits for the
// buys under way. Errors are the engine's typed ones.
func (s *Store) Buy(ctx context.Context, b DegradedBuy) (inventory.Receipt, error) {
	saleID, userID, lines, key := b.Buy.SaleID(), b.Buy.UserID(), b.Buy.Lines(), b.Buy.IdempotencyKey()
	var rc inventory.Receipt
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.stillDegraded(ctx, tx, b.Epoch, b.Now); err != nil {
			return err
		}
		var limit, starts, ends, paused int64
		err := s.queryRow(ctx, tx, "SELECT per_user_limit, starts_at, ends_at, paused FROM sales WHERE id = ?"+s.forUpdate(), saleID).
			Scan(&limit, &starts, &ends, &paused)
		if errors.Is(err, sql.ErrNoRows) {
			return saleNotFound(saleID)
		}
		if err != nil {
			return err
		}
		if key != "" {
			prev, err := s.readOrders(ctx, tx, "o.sale_id = ? AND o.user_id = ? AND o.idempotency_key = ?",
				saleID, userID, key)
			if err != nil {
				return err
			}
			if len(prev) > 0 {
				// A live order first: the key may also name one voided
				// (an unsure buy that arrived, see MarkUnsure).
				i := inventory.KeyedOrder(prev)
				if !slices.Equal(prev[i].Items, lines) {
					// Other lines under the key: a mismatch, as in Redis
					// (buy.lua's code 14: lines and their order compared).
					return fmt.Errorf("%w: key %q names order %s", inventory.ErrIdempotencyMismatch, key, prev[i].ID)
				}
				rc = inventory.Receipt{Order: prev[i], Replayed: true}
				rc.Remaining, err = s.degradedRemaining(ctx, tx, saleID, b.Epoch, prev[i].Items)
				return err
			}
		}
		if st := inventory.StatusAt(paused == 1, fromMs(starts), fromMs(ends), b.Now); st != inventory.StatusActive {
			return &inventory.NotActiveError{Status: st}
		}
		remaining, err := s.degradedRemaining(ctx, tx, saleID, b.Epoch, lines)
		if err != nil {
			return err
		}
		var over, short []string
		for i, l := range lines {
			var held int64
			err := s.queryRow(ctx, tx, `SELECT COALESCE(CAST(SUM(l.qty) AS BIGINT), 0) FROM `+
				orderLines("o.sale_id = ? AND o.user_id = ? AND o.status = ?")+` l WHERE l.sku = ?`,
				append(twice(saleID, userID, string(inventory.OrderConfirmed)), l.SKU)...).Scan(&held)
			if err != nil {
				return err
			}
			if held+l.Qty > limit {
				over = append(over, l.SKU)
			}
			if remaining[i] != -1 && remaining[i] < l.Qty {
				short = append(short, l.SKU)
			}
		}
		if len(over) > 0 {
			return &inventory.LimitError{Limit: limit, SKUs: over}
		}
		if len(short) > 0 {
			return &inventory.SoldOutError{SKUs: short}
		}
		o := inventory.Order{ID: inventory.NewOrderID(saleID), SaleID: saleID, UserID: userID,
			Status: inventory.OrderConfirmed, Items: slices.Clone(lines), IdempotencyKey: key,
			CreatedAt: b.Now.Truncate(time.Millisecond)}
		sku, qty := inlineLine(o)
		if _, err := s.exec(ctx, tx, "INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at, sku, qty) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			o.ID, o.SaleID, o.UserID, string(o.Status), o.IdempotencyKey, ms(o.CreatedAt), sku, qty); err != nil {
			return err
		}
		if err := s.insertOrderItems(ctx, tx, appendOrderItems(nil, o)); err != nil {
			return err
		}
		if err := s.journalDegraded(ctx, tx, inventory.EventBought, o, b.Now); err != nil {
			return err
		}
		for i, l := range lines {
			if remaining[i] != -1 {
				remaining[i] -= l.Qty
			}
			if _, err := s.exec(ctx, tx, "UPDATE degraded_stock SET sold = sold + ? WHERE sale_id = ? AND sku = ?", l.Qty, saleID, l.SKU); err != nil {
				return err
			}
		}
		rc = inventory.Receipt{Order: o, Remaining: remaining}
		return nil
	})
	if err != nil && !isOutcome(err) {
		err = fmt.Errorf("store: degraded buy in sale %s: %w", saleID, err)
	}
	return rc, err
}

// isOutcome: err is a business outcome the caller answers with, not a
// failure of the database.
func isOutcome(err error) bool {
	for _, e := range []error{ErrModeChanged, inventory.ErrInvalid, inventory.ErrNotFound, inventory.ErrSaleNotActive,
		inventory.ErrLimitExceeded, inventory.ErrSoldOut} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// forShare is the shared row-lock clause of the dialect.
func (s *Store) forShare() string {
	if s.dialect == Postgres {
		return " FOR SHARE"
	}
	return ""
}

// degradedRemaining returns each line's remaining stock as degraded mode
// counts it: stocked minus the units held (heldUnits), never below 0 (-1
// unlimited), from the degraded_stock counters of epoch, which it first
// counts when the sale has none of that epoch. An unknown sku is an error
// matching inventory.ErrNotFound. The caller holds the sale's row lock.
func (s *Store) degradedRemaining(ctx context.Context, tx *sql.Tx, saleID string, epoch int64, lines []inventory.Line) ([]int64, error) {
	for counted := false; ; counted = true {
		totals := map[string][2]int64{} // sku -> stocked, sold
		rows, err := s.query(ctx, tx, `SELECT i.sku, i.stocked, d.sold FROM sale_items i
			JOIN degraded_stock d ON d.sale_id = i.sale_id AND d.sku = i.sku AND d.epoch = ?
			WHERE i.sale_id = ?`, epoch, saleID)
		if err != nil {
			return nil, err
		}
		err = scanEach(rows, func() error {
			var sku string
			var stocked, sold int64
			err := rows.Scan(&sku, &stocked, &sold)
			totals[sku] = [2]int64{stocked, sold}
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(totals) == 0 && !counted { // counted for every item at once, or not at all
			if err := s.countDegradedStock(ctx, tx, saleID, epoch); err != nil {
				return nil, err
			}
			continue
		}
		out := make([]int64, len(lines))
		var unknown []string
		for i, l := range lines {
			t, ok := totals[l.SKU]
			switch {
			case !ok:
				unknown = append(unknown, l.SKU)
			case t[0] == inventory.Unlimited:
				out[i] = inventory.Unlimited
			default:
				// Never below 0: held past its stock (a move's in half not
				// here yet), an item is sold out, not -1, unlimited.
				out[i] = max(t[0]-t[1], 0)
			}
		}
		if len(unknown) > 0 {
			return nil, &inventory.NotFoundError{Kind: "sku", IDs: unknown}
		}
		return out, nil
	}
}

// countDegradedStock counts every item's units held (heldUnits: those of
// the sale's live orders) into degraded_stock for epoch.
func (s *Store) countDegradedStock(ctx context.Context, tx *sql.Tx, saleID string, epoch int64) error {
	if _, err := s.exec(ctx, tx, "DELETE FROM degraded_stock WHERE sale_id = ?", saleID); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, `INSERT INTO degraded_stock (sale_id, sku, epoch, sold)
		SELECT i.sale_id, i.sku, ?, COALESCE(held.qty, 0) FROM sale_items i LEFT JOIN (`+heldUnits()+`) held ON held.sku = i.sku
		WHERE i.sale_id = ?`, slices.Concat([]any{epoch}, heldArgs(saleID), []any{saleID})...)
	return err
}

// forgetDegradedStock drops the sale's degraded_stock counters: orders of
// the sale were written by something other than a degraded buy. It takes
// the sale's row lock first, as degraded buys do, so that none of them is
// counting meanwhile.
func (s *Store) forgetDegradedStock(ctx context.Context, tx *sql.Tx, saleID string) error {
	if err := s.lockSale(ctx, tx, saleID); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, "DELETE FROM degraded_stock WHERE sale_id = ?", saleID)
	return err
}

// lockSale takes the sale's row lock for the transaction (none if the sale
// has no row).
func (s *Store) lockSale(ctx context.Context, tx *sql.Tx, saleID string) error {
	var locked string
	if err := s.queryRow(ctx, tx, "SELECT id FROM sales WHERE id = ?"+s.forUpdate(), saleID).Scan(&locked); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return nil
}

// stillDegraded fails with ErrModeChanged unless the database sells at
// epoch by now; it reads the mode row locked for share, so a switch waits
// for the transaction.
func (s *Store) stillDegraded(ctx context.Context, tx *sql.Tx, epoch int64, now time.Time) error {
	m, err := s.readMode(ctx, tx, s.forShare())
	if err != nil {
		return err
	}
	if m.Mode != ModeDB || m.Epoch != epoch || now.Before(m.SellsFrom) {
		return ErrModeChanged
	}
	return nil
}

// journalDegraded writes the journal rows of a stock movement made on the
// database; its event id names the order, so it is never a stream id.
func (s *Store) journalDegraded(ctx context.Context, tx *sql.Tx, typ inventory.EventType, o inventory.Order, at time.Time) error {
	ev := inventory.Event{ID: "db:" + string(typ) + ":" + o.ID, Type: typ, At: at, Order: o}
	return s.insertRows(ctx, tx, journalInsert, 8, appendJournalRows(nil, o.SaleID, ev), "ON CONFLICT (sale_id, event_id, sku) DO NOTHING", nil)
}

// cancelInTx cancels an order on the database in tx, journaled as
// cancelled: user "" is an operator, otherwise the order must be user's
// (else ErrNotFound); a cancelled order is returned unchanged, Replayed.
// changed, if set, runs after the order's row changed, in tx.
func (s *Store) cancelInTx(ctx context.Context, tx *sql.Tx, orderID, user string, now time.Time, changed func() error) (inventory.Receipt, error) {
	orders, err := s.readOrders(ctx, tx, "o.id = ?", orderID)
	if err != nil {
		return inventory.Receipt{}, err
	}
	if len(orders) == 0 || user != "" && orders[0].UserID != user {
		return inventory.Receipt{}, &inventory.NotFoundError{Kind: "order", IDs: []string{orderID}}
	}
	o := orders[0]
	if o.Status == inventory.OrderCancelled {
		return inventory.Receipt{Order: o, Replayed: true}, nil
	}
	if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = ? WHERE id = ?",
		string(inventory.OrderCancelled), ms(now), orderID); err != nil {
		return inventory.Receipt{}, err
	}
	if changed != nil {
		if err := changed(); err != nil {
			return inventory.Receipt{}, err
		}
	}
	o.Status = inventory.OrderCancelled
	return inventory.Receipt{Order: o}, s.journalDegraded(ctx, tx, inventory.EventCancelled, o, now)
}

// Cancel cancels an order on the database in degraded mode (same epoch
// rule as Buy): its units go back to the stock the database sells. user ""
// is an operator; otherwise the order must be user's (else ErrNotFound).
// Cancelling a cancelled order returns it unchanged, Replayed.
func (s *Store) Cancel(ctx context.Context, epoch int64, orderID, user string, now time.Time) (inventory.Receipt, error) {
	saleID, err := inventory.SaleOfOrder(orderID)
	if err != nil {
		return inventory.Receipt{}, err
	}
	var rc inventory.Receipt
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.stillDegraded(ctx, tx, epoch, now); err != nil {
			return err
		}
		if err := s.lockSale(ctx, tx, saleID); err != nil { // its database buys and cancels run one at a time
			return err
		}
		rc, err = s.cancelInTx(ctx, tx, orderID, user, now, func() error { return s.forgetDegradedStock(ctx, tx, saleID) })
		return err
	})
	if err != nil && !isOutcome(err) {
		err = fmt.Errorf("store: degraded cancel of %s: %w", orderID, err)
	}
	return rc, err
}
