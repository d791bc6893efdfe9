package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// A sale that has ended is archived in two steps (migration 012): the
// archiver marks it archiving (BeginArchive) once the database holds every
// event of its stream, then removes its keys from Redis, then marks it
// archived (FinishArchive). From the first step on the service never
// rebuilds it in Redis: the database alone answers for it once its keys are
// gone. The order consumer reads the stream of an archiving sale still (a
// late cancel may have reached Redis after the mark; the archiver then
// waits for it), and stops at archived (SaleEnds leaves those out).

// ArchiveState is where a sale is in its archiving: both zero while it
// lives in Redis.
type ArchiveState struct {
	ArchivingAt time.Time // the archiver began removing its keys
	ArchivedAt  time.Time // its keys are gone
}

// Archiving reports whether the sale must not be rebuilt in Redis.
func (a ArchiveState) Archiving() bool { return !a.ArchivingAt.IsZero() }

// Archive returns the sale's archiving state; an unknown sale is an error
// matching inventory.ErrNotFound.
func (s *Store) Archive(ctx context.Context, saleID string) (ArchiveState, error) {
	var archiving, archived int64
	err := s.queryRow(ctx, s.db, "SELECT archiving_at, archived_at FROM sales WHERE id = ?", saleID).Scan(&archiving, &archived)
	if errors.Is(err, sql.ErrNoRows) {
		return ArchiveState{}, saleNotFound(saleID)
	}
	if err != nil {
		return ArchiveState{}, fmt.Errorf("store: archive state of sale %s: %w", saleID, err)
	}
	return ArchiveState{ArchivingAt: fromMs(archiving), ArchivedAt: fromMs(archived)}, nil
}

// ArchiveCandidates returns the sales to archive, sorted: not archived yet,
// and either archiving or ended by now (the archiver checks the end again
// by the Redis server's clock); and those archived since recent, whose
// keys the archiver sweeps once more (a consumer reading the stream a last
// time may have made it again, empty).
func (s *Store) ArchiveCandidates(ctx context.Context, now, recent time.Time) (todo, swept []string, err error) {
	rows, err := s.query(ctx, s.db, `SELECT id, archived_at FROM sales
		WHERE (archived_at = 0 AND (archiving_at <> 0 OR (ends_at <> 0 AND ends_at <= ?))) OR archived_at >= ?
		ORDER BY id`, ms(now), ms(recent))
	if err != nil {
		return nil, nil, fmt.Errorf("store: sales to archive: %w", err)
	}
	err = scanEach(rows, func() error {
		var id string
		var archived int64
		if err := rows.Scan(&id, &archived); err != nil {
			return err
		}
		if archived == 0 {
			todo = append(todo, id)
		} else {
			swept = append(swept, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: sales to archive: %w", err)
	}
	return todo, swept, nil
}

// NewestEvent returns the id of the newest event of the sale's stream the
// database has seen (applied or dead-lettered), "" for none.
func (s *Store) NewestEvent(ctx context.Context, saleID string) (string, error) {
	id, err := s.newestEvent(ctx, s.db, saleID)
	if err != nil {
		return "", fmt.Errorf("store: newest event of sale %s: %w", saleID, err)
	}
	return id, nil
}

// BeginArchive marks the sale archiving at at, unless it is already.
func (s *Store) BeginArchive(ctx context.Context, saleID string, at time.Time) error {
	_, err := s.exec(ctx, s.db, "UPDATE sales SET archiving_at = ? WHERE id = ? AND archiving_at = 0", ms(at), saleID)
	if err != nil {
		return fmt.Errorf("store: begin archiving sale %s: %w", saleID, err)
	}
	return nil
}

// FinishArchive marks an archiving sale archived at at: its keys are gone.
// The tokens its orders spent go with them: nothing brings the sale back
// to Redis, where they would be marked spent again.
func (s *Store) FinishArchive(ctx context.Context, saleID string, at time.Time) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := s.exec(ctx, tx, "UPDATE sales SET archived_at = ? WHERE id = ? AND archiving_at <> 0 AND archived_at = 0",
			ms(at), saleID)
		if err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, "DELETE FROM spent_tokens WHERE sale_id = ? AND EXISTS (SELECT 1 FROM sales WHERE id = ? AND archived_at <> 0)",
			saleID, saleID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: finish archiving sale %s: %w", saleID, err)
	}
	return nil
}

// CancelArchived cancels an order of an archiving or archived sale on the
// database, the only place it lives once its sale's keys are gone. The
// sale has ended: the units go back to no one. user "" is an operator;
// otherwise the order must be user's (else ErrNotFound). Cancelling a
// cancelled order returns it unchanged, Replayed. An order of a sale that
// is not archiving is ErrNotArchived, and nothing is written.
func (s *Store) CancelArchived(ctx context.Context, orderID, user string, now time.Time) (inventory.Receipt, error) {
	saleID, err := inventory.SaleOfOrder(orderID)
	if err != nil {
		return inventory.Receipt{}, err
	}
	var rc inventory.Receipt
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		var archiving int64
		err := s.queryRow(ctx, tx, "SELECT archiving_at FROM sales WHERE id = ?"+s.forUpdate(), saleID).Scan(&archiving)
		if errors.Is(err, sql.ErrNoRows) {
			return &inventory.NotFoundError{Kind: "order", IDs: []string{orderID}}
		}
		if err != nil {
			return err
		}
		if archiving == 0 {
			return ErrNotArchived
		}
		rc, err = s.cancelInTx(ctx, tx, orderID, user, now, nil) // the sale has ended: no stock to give back
		return err
	})
	if err != nil && !errors.Is(err, ErrNotArchived) && !errors.Is(err, inventory.ErrNotFound) {
		err = fmt.Errorf("store: cancel %s of an archived sale: %w", orderID, err)
	}
	return rc, err
}

// OrderByKey returns the order user made in the sale with the
// idempotency key, found false if none: a buy resent once its sale's keys
// are gone from Redis is answered from here. A live order comes first (a
// key may also name a voided one, see MarkUnsure).
func (s *Store) OrderByKey(ctx context.Context, saleID, user, key string) (o inventory.Order, found bool, err error) {
	var orders []inventory.Order
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		orders, err = s.readOrders(ctx, tx, "o.sale_id = ? AND o.user_id = ? AND o.idempotency_key = ?", saleID, user, key)
		return err
	})
	if err != nil {
		return inventory.Order{}, false, fmt.Errorf("store: order of key %q in sale %s: %w", key, saleID, err)
	}
	if len(orders) == 0 {
		return inventory.Order{}, false, nil
	}
	return orders[inventory.KeyedOrder(orders)], true, nil
}

// ErrNotArchived: CancelArchived was given an order of a sale that still
// lives in Redis; nothing was written.
var ErrNotArchived = errors.New("store: sale not archived")

// checkClosed returns why a closed event can never be applied, or "": its
// end is its time (close.lua writes both from one clock reading) and after
// its start.
func checkClosed(ev inventory.Event) string {
	end, start := ev.Sale.EndsAt, ev.Sale.StartsAt
	if end.UnixMilli() <= 0 || !end.Equal(ev.At) {
		return fmt.Sprintf("closed at %d with end %d", ev.At.UnixMilli(), end.UnixMilli())
	}
	if !start.IsZero() && !start.Before(end) {
		return fmt.Sprintf("closed with start %d not before end %d", start.UnixMilli(), end.UnixMilli())
	}
	return ""
}

// CloseSale ends the sale at end in the database, as its closed event
// does once the order consumer stores it (the earliest close wins): the
// service records a close here as soon as Redis made it, so that a sale
// Redis loses before the event is stored is rebuilt ended.
func (s *Store) CloseSale(ctx context.Context, saleID string, end time.Time) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		return s.applyClosed(ctx, tx, saleID, ms(end))
	})
	if err != nil {
		return fmt.Errorf("store: close sale %s: %w", saleID, err)
	}
	return nil
}

// applyClosed ends the sale at end (unix ms) unless it ends earlier
// already; a start at or after it goes just below it, as close.lua does.
// The earliest close wins whatever order the events arrive in.
func (s *Store) applyClosed(ctx context.Context, tx *sql.Tx, saleID string, end int64) error {
	_, err := s.exec(ctx, tx, `UPDATE sales SET ends_at = ?,
		starts_at = CASE WHEN starts_at >= ? THEN ? ELSE starts_at END
		WHERE id = ? AND (ends_at = 0 OR ends_at > ?)`, end, end, end-1, saleID, end)
	return err
}

// applyEarlyClose applies a close journaled before the sale's created event
// (entries reclaimed out of order found no row to end): the earliest.
func (s *Store) applyEarlyClose(ctx context.Context, tx *sql.Tx, saleID string) error {
	var end sql.NullInt64
	err := s.queryRow(ctx, tx, "SELECT MIN(at) FROM journal WHERE sale_id = ? AND type = ?",
		saleID, string(inventory.EventClosed)).Scan(&end)
	if err != nil || !end.Valid {
		return err
	}
	return s.applyClosed(ctx, tx, saleID, end.Int64)
}
