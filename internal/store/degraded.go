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

	"github.com/seckill/seckill/internal/inventory"
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
// stays as it is, but one the database voided (another instance handed it
// over as unsure first: settleVoided), which is live again; a cancelled
// one is marked cancelled. The stream's events for them, should Redis
// return with them, then change nothing.
func (s *Store) AdoptOrders(ctx context.Context, orders []inventory.Order) error {
	if len(orders) == 0 {
		return nil
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		rows := make([]any, 0, 9*len(orders))
		var items []any
		for _, o := range orders {
			status := inventory.OrderConfirmed
			var cancelledAt int64
			if o.Status == inventory.OrderCancelled {
				status, cancelledAt = inventory.OrderCancelled, ms(o.CreatedAt)
			}
			sku, qty := inlineLine(o)
			rows = append(rows, o.ID, o.SaleID, o.UserID, string(status), o.IdempotencyKey, ms(o.CreatedAt), cancelledAt, sku, qty)
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
		err := s.insertRows(ctx, tx, "INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at, cancelled_at, sku, qty)", 9, rows,
			`ON CONFLICT (id) DO UPDATE SET status = CASE WHEN excluded.status = 'cancelled' THEN excluded.status ELSE orders.status END,
				cancelled_at = CASE WHEN excluded.status = 'cancelled' THEN excluded.cancelled_at ELSE orders.cancelled_at END`, nil)
		if err != nil {
			return err
		}
		if err := s.insertOrderItems(ctx, tx, items); err != nil {
			return err
		}
		if err := s.settleVoided(ctx, tx, orders); err != nil {
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
// applied it before the hand-over, or an instance handed it over as
// acknowledged) stays as it is, and one voided that an instance hands over
// as acknowledged afterwards is live again (AdoptOrders: an order any
// instance acknowledged is never voided). SettleUnsure forgets a sale's
// records once the stream holds nothing more of it.
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

// SettleUnsure forgets the sale's records of buys and moves out of unknown
// outcome: the stream holds nothing more of the sale (the recovery drained
// it), so an order or a move that did not arrive was not made, or was lost
// with Redis.
func (s *Store) SettleUnsure(ctx context.Context, saleID string) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, "DELETE FROM unsure_orders WHERE sale_id = ?", saleID); err != nil {
			return err
		}
		// Moves out of unknown outcome too (AdoptMoves): one that did not
		// arrive took nothing, or was lost with Redis.
		if err := s.forgetDegradedStock(ctx, tx, saleID); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, "DELETE FROM unsure_moves WHERE sale_id = ?", saleID)
		return err
	})
	if err != nil {
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
// units back, the orders of the sales that arrived (through Apply) after
// they were handed over as unsure, and forgets their records. The caller
// holds the sales' locks.
func (s *Store) voidArrivedUnsure(ctx context.Context, tx *sql.Tx, saleIDs []string, now time.Time) error {
	const void = `DELETE FROM unsure_orders WHERE %s
		AND EXISTS (SELECT 1 FROM orders o WHERE o.id = unsure_orders.order_id) RETURNING order_id, sale_id`
	type arrived struct{ order, sale string }
	var found []arrived
	scan := func(rows *sql.Rows, err error) error {
		if err != nil {
			return err
		}
		return scanEach(rows, func() error {
			var a arrived
			err := rows.Scan(&a.order, &a.sale)
			found = append(found, a)
			return err
		})
	}
	if s.dialect == Postgres { // one statement whatever the number of sales
		if err := scan(tx.QueryContext(ctx, fmt.Sprintf(void, "sale_id = ANY($1::text[])"), saleIDs)); err != nil {
			return err
		}
	} else {
		for _, id := range saleIDs {
			if err := scan(s.query(ctx, tx, fmt.Sprintf(void, "sale_id = ?"), id)); err != nil {
				return err
			}
		}
	}
	for _, a := range found {
		orders, err := s.readOrders(ctx, tx, "o.id = ?", a.order)
		if err != nil {
			return err
		}
		if len(orders) == 0 || orders[0].Status != inventory.OrderConfirmed {
			continue
		}
		o := orders[0]
		if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = ? WHERE id = ?",
			string(inventory.OrderCancelled), ms(now), a.order); err != nil {
			return err
		}
		ev := inventory.Event{ID: voidEvent(a.order), Type: inventory.EventCancelled, At: now, Order: o}
		if err := s.insertRows(ctx, tx, journalInsert, 8, appendJournalRows(nil, a.sale, ev), "ON CONFLICT (sale_id, event_id, sku) DO NOTHING", nil); err != nil {
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
