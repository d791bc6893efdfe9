package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/seckill/seckill/inventory"
)

// The settings of degraded mode, chosen by an operator.
const (
	SettingAuto  = "auto"  // sell from the database when no instance reaches Redis
	SettingForce = "force" // sell from the database now
	SettingOff   = "off"   // never sell from the database
)

// Who sells.
const (
	ModeRedis      = "redis"      // Redis sells; the database follows through the order stream
	ModeDB         = "db"         // degraded: the database sells, Redis is fenced off
	ModeRecovering = "recovering" // nobody sells while Redis is repaired from the database
)

// ErrModeChanged: the mode is not the one the caller acted on (another
// instance changed it first, or a database buy was routed by a mode that
// has ended). Nothing was written; read the mode again.
var ErrModeChanged = errors.New("store: sell mode changed")

// SellMode is the one row that says who sells.
type SellMode struct {
	Setting   string
	Mode      string
	Epoch     int64     // grows with every change of Mode
	ChangedAt time.Time // of Mode
	SellsFrom time.Time // ModeDB: database buys are taken from then on
	Reason    string
}

// ValidSetting reports whether s is auto, force or off.
func ValidSetting(s string) bool { return s == SettingAuto || s == SettingForce || s == SettingOff }

// SellMode reads who sells.
func (s *Store) SellMode(ctx context.Context) (SellMode, error) {
	m, err := s.readMode(ctx, s.db, "")
	if err != nil {
		return m, fmt.Errorf("store: read sell mode: %w", err)
	}
	return m, nil
}

func (s *Store) readMode(ctx context.Context, q querier, lock string) (SellMode, error) {
	var m SellMode
	var changed, from int64
	err := s.queryRow(ctx, q, "SELECT setting, mode, epoch, changed_at, sells_from, reason FROM sell_mode WHERE id = 1"+lock).
		Scan(&m.Setting, &m.Mode, &m.Epoch, &changed, &from, &m.Reason)
	m.ChangedAt, m.SellsFrom = fromMs(changed), fromMs(from)
	return m, err
}

// forUpdate is the row-lock clause of the dialect (SQLite's transactions
// take the whole database's write lock when they begin).
func (s *Store) forUpdate() string {
	if s.dialect == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// SetSetting records an operator's choice; every instance obeys it from its
// next tick.
func (s *Store) SetSetting(ctx context.Context, setting string) (SellMode, error) {
	if !ValidSetting(setting) {
		return SellMode{}, &inventory.InvalidError{Field: "setting", Reason: "must be auto, force or off"}
	}
	var m SellMode
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, "UPDATE sell_mode SET setting = ? WHERE id = 1", setting); err != nil {
			return err
		}
		var err error
		m, err = s.readMode(ctx, tx, "")
		return err
	})
	if err != nil {
		return m, fmt.Errorf("store: set degraded-mode setting: %w", err)
	}
	return m, nil
}

// SwitchMode moves the mode from epoch to the next one, with mode to; it
// fails with ErrModeChanged if the epoch is no longer current. sellsFrom
// is when database buys may begin (mode db).
func (s *Store) SwitchMode(ctx context.Context, epoch int64, to string, now, sellsFrom time.Time, reason string) (SellMode, error) {
	var m SellMode
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `UPDATE sell_mode SET mode = ?, epoch = epoch + 1, changed_at = ?, sells_from = ?, reason = ?
			WHERE id = 1 AND epoch = ?`, to, ms(now), ms(sellsFrom), truncate(reason, 200), epoch)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return cmp(err, ErrModeChanged)
		}
		m, err = s.readMode(ctx, tx, "")
		return err
	})
	if err != nil && !errors.Is(err, ErrModeChanged) {
		err = fmt.Errorf("store: switch sell mode to %s: %w", to, err)
	}
	return m, err
}

func cmp(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// Heartbeat records that instance in.Name ran a tick at in.SeenAt, when it
// reached Redis (zero: not this tick), the degraded epoch up to which it has
// handed over the orders it acknowledged from Redis, and its consumer.
func (s *Store) Heartbeat(ctx context.Context, in Instance) error {
	var ok int64
	if !in.RedisOKAt.IsZero() {
		ok = ms(in.RedisOKAt)
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO instances (name, seen_at, redis_ok_at, flushed_epoch, consumer) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at, consumer = excluded.consumer,
			redis_ok_at = CASE WHEN excluded.redis_ok_at > 0 THEN excluded.redis_ok_at ELSE instances.redis_ok_at END,
			flushed_epoch = CASE WHEN excluded.flushed_epoch > instances.flushed_epoch THEN excluded.flushed_epoch ELSE instances.flushed_epoch END`,
		in.Name, ms(in.SeenAt), ok, in.FlushedEpoch, in.Consumer)
	if err != nil {
		return fmt.Errorf("store: heartbeat: %w", err)
	}
	return nil
}

// ConsumerSeen returns when an instance whose order consumer is named
// consumer last ticked; ok is false if no instance ever had that consumer.
func (s *Store) ConsumerSeen(ctx context.Context, consumer string) (last time.Time, ok bool, err error) {
	var at sql.NullInt64
	err = s.queryRow(ctx, s.db, "SELECT MAX(seen_at) FROM instances WHERE consumer = ?", consumer).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: consumer %s last seen: %w", consumer, err)
	}
	return fromMs(at.Int64), at.Valid, nil
}

// Instance is one instance's last heartbeat.
type Instance struct {
	Name         string
	SeenAt       time.Time
	RedisOKAt    time.Time // zero: never
	FlushedEpoch int64
	Consumer     string // its order consumer's name
}

// Instances lists the instances seen since since.
func (s *Store) Instances(ctx context.Context, since time.Time) ([]Instance, error) {
	rows, err := s.query(ctx, s.db, "SELECT name, seen_at, redis_ok_at, flushed_epoch, consumer FROM instances WHERE seen_at >= ? ORDER BY name", ms(since))
	if err != nil {
		return nil, fmt.Errorf("store: list instances: %w", err)
	}
	var out []Instance
	err = scanEach(rows, func() error {
		var in Instance
		var seen, ok int64
		err := rows.Scan(&in.Name, &seen, &ok, &in.FlushedEpoch, &in.Consumer)
		in.SeenAt, in.RedisOKAt = fromMs(seen), fromMs(ok)
		out = append(out, in)
		return err
	})
	return out, err
}

// AdoptOrders writes orders Redis acknowledged that may not have reached
// the database through the stream yet (an instance hands over the ones it
// acknowledged before the database starts selling). An order already there
// stays as it is; a cancelled one is marked cancelled. The stream's events
// for them, should Redis return with them, then change nothing.
func (s *Store) AdoptOrders(ctx context.Context, orders []inventory.Order) error {
	if len(orders) == 0 {
		return nil
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		rows := make([]any, 0, 7*len(orders))
		var items []any
		for _, o := range orders {
			status := inventory.OrderConfirmed
			var cancelledAt int64
			if o.Status == inventory.OrderCancelled {
				status, cancelledAt = inventory.OrderCancelled, ms(o.CreatedAt)
			}
			rows = append(rows, o.ID, o.SaleID, o.UserID, string(status), o.IdempotencyKey, ms(o.CreatedAt), cancelledAt)
			items = appendOrderItems(items, o)
		}
		sales := map[string]bool{}
		for _, o := range orders {
			sales[o.SaleID] = true
		}
		for _, id := range slices.Sorted(maps.Keys(sales)) { // in order: two hand-overs never deadlock
			if err := s.forgetDegradedStock(ctx, tx, id); err != nil {
				return err
			}
		}
		err := s.insertRows(ctx, tx, "INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at, cancelled_at)", 7, rows,
			`ON CONFLICT (id) DO UPDATE SET status = CASE WHEN excluded.status = 'cancelled' THEN excluded.status ELSE orders.status END,
				cancelled_at = CASE WHEN excluded.status = 'cancelled' THEN excluded.cancelled_at ELSE orders.cancelled_at END`, nil)
		if err != nil {
			return err
		}
		if err := s.insertOrderItems(ctx, tx, items); err != nil {
			return err
		}
		// An order acknowledged (a replay told its buyer of it) is no
		// longer unsure, whoever handed it over as unsure.
		for _, id := range slices.Sorted(maps.Keys(sales)) {
			if err := s.dropArrivedUnsure(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: adopt %d orders: %w", len(orders), err)
	}
	return nil
}

// MarkUnsure records buys an instance sent to Redis whose outcome it never
// learned (a transport error after the request may have reached Redis),
// handed over with its acknowledged orders (AdoptOrders) before the
// database sells. No buyer was told of them, so the database does not
// count them: it sells their units. Should one of them reach the database
// from the stream after all (Redis ran it, and the order consumer or the
// recovery's drain applies it), Apply writes it cancelled — voided — so
// that no unit and no buyer's quota is sold twice, and no idempotency key
// has two live orders. An order the database has already (the consumer
// applied it before the hand-over) stays as it is. SettleUnsure forgets a
// sale's records once the stream holds nothing more of it.
func (s *Store) MarkUnsure(ctx context.Context, orders []inventory.Order) error {
	if len(orders) == 0 {
		return nil
	}
	bySale := map[string][]any{}
	for _, o := range orders {
		bySale[o.SaleID] = append(bySale[o.SaleID], o.ID, o.SaleID, o.UserID, ms(o.CreatedAt))
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		for _, id := range slices.Sorted(maps.Keys(bySale)) { // in order: two hand-overs never deadlock
			// The sale's lock orders this with Apply, which voids what
			// arrives after the record.
			if err := s.lockSale(ctx, tx, id); err != nil {
				return err
			}
			if err := s.insertRows(ctx, tx, "INSERT INTO unsure_orders (order_id, sale_id, user_id, created_at)", 4, bySale[id],
				"ON CONFLICT (order_id) DO NOTHING", nil); err != nil {
				return err
			}
			if err := s.dropArrivedUnsure(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: record %d buys of unknown outcome: %w", len(orders), err)
	}
	return nil
}

// SettleUnsure forgets the sale's records of buys of unknown outcome: the
// stream holds nothing more of the sale (the recovery drained it), so an
// order that did not arrive was not made, or was lost with Redis.
func (s *Store) SettleUnsure(ctx context.Context, saleID string) error {
	if _, err := s.exec(ctx, s.db, "DELETE FROM unsure_orders WHERE sale_id = ?", saleID); err != nil {
		return fmt.Errorf("store: settle buys of unknown outcome of sale %s: %w", saleID, err)
	}
	return nil
}

// dropArrivedUnsure forgets the sale's unsure records whose order the
// database has: it had it before the record, or it was acknowledged.
func (s *Store) dropArrivedUnsure(ctx context.Context, tx *sql.Tx, saleID string) error {
	_, err := s.exec(ctx, tx, `DELETE FROM unsure_orders WHERE sale_id = ?
		AND EXISTS (SELECT 1 FROM orders o WHERE o.id = unsure_orders.order_id)`, saleID)
	return err
}

// voidArrivedUnsure writes cancelled, with a journal row that gives their
// units back, the orders of the sale that arrived (through Apply) after
// they were handed over as unsure, and forgets their records. The caller
// holds the sale's lock.
func (s *Store) voidArrivedUnsure(ctx context.Context, tx *sql.Tx, saleID string, now time.Time) error {
	rows, err := s.query(ctx, tx, `DELETE FROM unsure_orders WHERE sale_id = ?
		AND EXISTS (SELECT 1 FROM orders o WHERE o.id = unsure_orders.order_id) RETURNING order_id`, saleID)
	if err != nil {
		return err
	}
	var ids []string
	if err := scanEach(rows, func() error {
		var id string
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	}); err != nil || len(ids) == 0 {
		return err
	}
	for _, id := range ids {
		orders, err := s.readOrders(ctx, tx, "o.id = ?", id)
		if err != nil {
			return err
		}
		if len(orders) == 0 || orders[0].Status != inventory.OrderConfirmed {
			continue
		}
		o := orders[0]
		if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = ? WHERE id = ?",
			string(inventory.OrderCancelled), ms(now), id); err != nil {
			return err
		}
		ev := inventory.Event{ID: "void:" + id, Type: inventory.EventCancelled, At: now, Order: o}
		if err := s.insertRows(ctx, tx, journalInsert, 8, appendJournalRows(nil, saleID, ev), "ON CONFLICT (sale_id, event_id, sku) DO NOTHING", nil); err != nil {
			return err
		}
	}
	return nil
}

// SetPaused pauses or resumes a sale on the database in degraded mode
// (same epoch rule as Buy): the database's buys read the flag under the
// sale's lock, so the next one obeys it on every instance; Redis gets it
// with the repair that ends degraded mode. Unknown sale: ErrNotFound.
func (s *Store) SetPaused(ctx context.Context, epoch int64, saleID string, paused bool, now time.Time) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.stillDegraded(ctx, tx, epoch, now); err != nil {
			return err
		}
		res, err := s.exec(ctx, tx, "UPDATE sales SET paused = ? WHERE id = ?", flag(paused), saleID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return cmp(err, saleNotFound(saleID))
		}
		typ := inventory.EventResumed
		if paused {
			typ = inventory.EventPaused
		}
		ev := inventory.Event{ID: "db:" + string(typ) + ":" + strconv.FormatInt(now.UnixNano(), 10), Type: typ, At: now}
		return s.insertRows(ctx, tx, journalInsert, 8, appendJournalRows(nil, saleID, ev), "ON CONFLICT (sale_id, event_id, sku) DO NOTHING", nil)
	})
	if err != nil && !isOutcome(err) {
		err = fmt.Errorf("store: degraded pause of sale %s: %w", saleID, err)
	}
	return err
}

// DegradedBuy is a buy made on the database in degraded mode.
type DegradedBuy struct {
	Epoch          int64 // the degraded epoch the buy was routed by
	SaleID, UserID string
	Lines          []inventory.Line
	IdempotencyKey string
	Now            time.Time
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
	if err := inventory.ValidateBuy(b.SaleID, b.UserID, b.Lines, b.IdempotencyKey); err != nil {
		return inventory.Receipt{}, err
	}
	var rc inventory.Receipt
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.stillDegraded(ctx, tx, b.Epoch, b.Now); err != nil {
			return err
		}
		var limit, starts, ends, paused int64
		err := s.queryRow(ctx, tx, "SELECT per_user_limit, starts_at, ends_at, paused FROM sales WHERE id = ?"+s.forUpdate(), b.SaleID).
			Scan(&limit, &starts, &ends, &paused)
		if errors.Is(err, sql.ErrNoRows) {
			return saleNotFound(b.SaleID)
		}
		if err != nil {
			return err
		}
		if b.IdempotencyKey != "" {
			prev, err := s.readOrders(ctx, tx, "o.sale_id = ? AND o.user_id = ? AND o.idempotency_key = ?",
				b.SaleID, b.UserID, b.IdempotencyKey)
			if err != nil {
				return err
			}
			if len(prev) > 0 {
				// A live order first: the key may also name one voided
				// (an unsure buy that arrived, see MarkUnsure).
				i := max(slices.IndexFunc(prev, func(o inventory.Order) bool { return o.Status == inventory.OrderConfirmed }), 0)
				rc = inventory.Receipt{Order: prev[i], Replayed: true}
				rc.Remaining, err = s.degradedRemaining(ctx, tx, b.SaleID, b.Epoch, prev[i].Items)
				return err
			}
		}
		if st := inventory.StatusAt(paused == 1, fromMs(starts), fromMs(ends), b.Now); st != inventory.StatusActive {
			return &inventory.NotActiveError{Status: st}
		}
		remaining, err := s.degradedRemaining(ctx, tx, b.SaleID, b.Epoch, b.Lines)
		if err != nil {
			return err
		}
		var over, short []string
		for i, l := range b.Lines {
			var held int64
			err := s.queryRow(ctx, tx, `SELECT COALESCE(CAST(SUM(oi.qty) AS BIGINT), 0) FROM orders o JOIN order_items oi ON oi.order_id = o.id
				WHERE o.sale_id = ? AND o.user_id = ? AND o.status = ? AND oi.sku = ?`,
				b.SaleID, b.UserID, string(inventory.OrderConfirmed), l.SKU).Scan(&held)
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
		o := inventory.Order{ID: inventory.NewOrderID(b.SaleID), SaleID: b.SaleID, UserID: b.UserID,
			Status: inventory.OrderConfirmed, Items: slices.Clone(b.Lines), IdempotencyKey: b.IdempotencyKey,
			CreatedAt: b.Now.Truncate(time.Millisecond)}
		if _, err := s.exec(ctx, tx, "INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at) VALUES (?, ?, ?, ?, ?, ?)",
			o.ID, o.SaleID, o.UserID, string(o.Status), o.IdempotencyKey, ms(o.CreatedAt)); err != nil {
			return err
		}
		if err := s.insertOrderItems(ctx, tx, appendOrderItems(nil, o)); err != nil {
			return err
		}
		if err := s.journalDegraded(ctx, tx, inventory.EventBought, o, b.Now); err != nil {
			return err
		}
		for i, l := range b.Lines {
			if remaining[i] != -1 {
				remaining[i] -= l.Qty
			}
			if _, err := s.exec(ctx, tx, "UPDATE degraded_stock SET sold = sold + ? WHERE sale_id = ? AND sku = ?", l.Qty, b.SaleID, l.SKU); err != nil {
				return err
			}
		}
		rc = inventory.Receipt{Order: o, Remaining: remaining}
		return nil
	})
	if err != nil && !isOutcome(err) {
		err = fmt.Errorf("store: degraded buy in sale %s: %w", b.SaleID, err)
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
// counts it: stocked minus the units of live orders (-1 unlimited), from
// the degraded_stock counters of epoch, which it first counts from the
// orders when the sale has none of that epoch. An unknown sku is an error
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
			case t[0] == -1:
				out[i] = -1
			default:
				out[i] = t[0] - t[1]
			}
		}
		if len(unknown) > 0 {
			return nil, &inventory.NotFoundError{Kind: "sku", IDs: unknown}
		}
		return out, nil
	}
}

// countDegradedStock counts every item's sold units from the sale's live
// orders into degraded_stock for epoch.
func (s *Store) countDegradedStock(ctx context.Context, tx *sql.Tx, saleID string, epoch int64) error {
	if _, err := s.exec(ctx, tx, "DELETE FROM degraded_stock WHERE sale_id = ?", saleID); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, `INSERT INTO degraded_stock (sale_id, sku, epoch, sold)
		SELECT i.sale_id, i.sku, ?, COALESCE((SELECT CAST(SUM(oi.qty) AS BIGINT) FROM orders o JOIN order_items oi ON oi.order_id = o.id
			WHERE o.sale_id = i.sale_id AND o.status = ? AND oi.sku = i.sku), 0)
		FROM sale_items i WHERE i.sale_id = ?`, epoch, string(inventory.OrderConfirmed), saleID)
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
		orders, err := s.readOrders(ctx, tx, "o.id = ?", orderID)
		if err != nil {
			return err
		}
		if len(orders) == 0 || user != "" && orders[0].UserID != user {
			return &inventory.NotFoundError{Kind: "order", IDs: []string{orderID}}
		}
		o := orders[0]
		if o.Status == inventory.OrderCancelled {
			rc = inventory.Receipt{Order: o, Replayed: true}
			return nil
		}
		if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = ? WHERE id = ?",
			string(inventory.OrderCancelled), ms(now), orderID); err != nil {
			return err
		}
		if err := s.forgetDegradedStock(ctx, tx, saleID); err != nil {
			return err
		}
		o.Status = inventory.OrderCancelled
		rc = inventory.Receipt{Order: o}
		return s.journalDegraded(ctx, tx, inventory.EventCancelled, o, now)
	})
	if err != nil && !isOutcome(err) {
		err = fmt.Errorf("store: degraded cancel of %s: %w", orderID, err)
	}
	return rc, err
}
