package store

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/seckill/seckill/internal/inventory"
)

// The hand-over of degraded mode, beyond AdoptOrders and MarkUnsure
// (degraded.go): an order an instance acknowledged is never voided, and
// the moves between segments an instance made are handed over as its
// orders are.

// voidEvent is the journal's event id of the void of an order
// (voidArrivedUnsure). Its row exists exactly while the void alone
// cancels the order: a cancel of the buyer's that comes after (the
// stream's cancelled or expired event, or a hand-over of the cancel)
// removes it, the units then given back by the cancel's own journal row
// (the stream's event's), and an acknowledgement that comes after makes
// the order live again (settleVoided).
func voidEvent(orderID string) string { return voidPrefix + orderID }

const voidPrefix = "void:"

// dropVoid removes the void's journal row of an order a cancel of the
// buyer's cancels now (see voidEvent).
func (s *Store) dropVoid(ctx context.Context, tx *sql.Tx, saleID, orderID string) error {
	_, err := s.exec(ctx, tx, "DELETE FROM journal WHERE sale_id = ? AND event_id = ?", saleID, voidEvent(orderID))
	return err
}

// settleVoided settles the orders of a hand-over (AdoptOrders, the
// orders just written) that the database voided: an instance handed one
// over as unsure, and it arrived from the stream before this hand-over.
// One handed over cancelled was cancelled by its buyer: the void no longer
// decides it (dropVoid). One handed over live was acknowledged to its
// buyer (a replay of its key on another instance, say): it is live again,
// whatever order the hand-overs came in, if its units are still free. The
// database sells once every instance has handed over, so they are, unless
// the instance that acknowledged it was passed over (it stopped ticking)
// and the database sold them meanwhile: it then stays voided rather than
// oversold. The caller holds the sales' locks.
func (s *Store) settleVoided(ctx context.Context, tx *sql.Tx, orders []inventory.Order) error {
	handed := make(map[string]inventory.Order, len(orders))
	ids := make([]string, 0, len(orders))
	for _, o := range orders {
		handed[o.ID] = o
		ids = append(ids, o.ID)
	}
	var voided []string
	for chunk := range slices.Chunk(ids, s.maxParams-1) {
		args := make([]any, 0, len(chunk)+1)
		args = append(args, string(inventory.OrderCancelled))
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := s.query(ctx, tx, `SELECT o.id FROM orders o WHERE o.status = ? AND o.id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)
			AND EXISTS (SELECT 1 FROM journal j WHERE j.sale_id = o.sale_id AND j.event_id = '`+voidPrefix+`' || o.id)`, args...)
		if err != nil {
			return err
		}
		if err := scanEach(rows, func() error {
			var id string
			err := rows.Scan(&id)
			voided = append(voided, id)
			return err
		}); err != nil {
			return err
		}
	}
	for _, id := range voided {
		o := handed[id]
		if o.Status == inventory.OrderCancelled {
			if err := s.dropVoid(ctx, tx, o.SaleID, id); err != nil {
				return err
			}
			continue
		}
		stored, err := s.readOrders(ctx, tx, "o.id = ?", id)
		if err != nil || len(stored) == 0 {
			return err
		}
		free, err := s.freeUnits(ctx, tx, o.SaleID)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(stored[0].Items, func(l inventory.Line) bool { return free[l.SKU] != inventory.Unlimited && free[l.SKU] < l.Qty }) {
			continue
		}
		if ok, err := s.mayLiveAgain(ctx, tx, stored[0]); err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = 0 WHERE id = ?", string(inventory.OrderConfirmed), id); err != nil {
			return err
		}
		if err := s.dropVoid(ctx, tx, o.SaleID, id); err != nil {
			return err
		}
	}
	return nil
}

// mayLiveAgain reports whether a voided order can be made live again
// without breaking what the database kept while it was voided: its buyer
// under the sale's per-user limit with it (the voided order no longer
// counted, so the buyer may have bought again meanwhile, in degraded
// mode), and its idempotency key naming no other live order of the buyer
// (a retry of the key the database sold). If either would break, the
// order stays voided: its buyer holds what the database sold instead.
func (s *Store) mayLiveAgain(ctx context.Context, tx *sql.Tx, o inventory.Order) (bool, error) {
	var limit int64
	if err := s.queryRow(ctx, tx, "SELECT per_user_limit FROM sales WHERE id = ?", o.SaleID).Scan(&limit); err != nil {
		return false, err
	}
	for _, l := range o.Items {
		var held int64
		err := s.queryRow(ctx, tx, `SELECT COALESCE(CAST(SUM(l.qty) AS BIGINT), 0) FROM `+
			orderLines("o.sale_id = ? AND o.user_id = ? AND o.status = ?")+` l WHERE l.sku = ?`,
			append(twice(o.SaleID, o.UserID, string(inventory.OrderConfirmed)), l.SKU)...).Scan(&held)
		if err != nil {
			return false, err
		}
		if held+l.Qty > limit {
			return false, nil
		}
	}
	if o.IdempotencyKey == "" {
		return true, nil
	}
	var n int
	err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM orders WHERE sale_id = ? AND user_id = ? AND idempotency_key = ?
		AND status = ? AND id <> ?`, o.SaleID, o.UserID, o.IdempotencyKey, string(inventory.OrderConfirmed), o.ID).Scan(&n)
	return n == 0, err
}

// heldUnits is a query of (sku, qty) rows, one per sku, of a sale's units
// that are stocked and not for sale: those of its live orders, and those
// an out half of a move of unknown outcome may have taken out of it
// (AdoptMoves) while its moved event has not arrived. Its parameters are
// heldArgs.
func heldUnits() string {
	return `SELECT h.sku AS sku, CAST(SUM(h.qty) AS BIGINT) AS qty FROM (
		SELECT l.sku AS sku, l.qty AS qty FROM ` + orderLines("o.sale_id = ? AND o.status = ?") + ` l
		UNION ALL SELECT u.sku, -u.units FROM unsure_moves u WHERE u.sale_id = ?
			AND NOT EXISTS (SELECT 1 FROM moves m WHERE m.sale_id = u.sale_id AND m.move_id = u.move_id)
	) h GROUP BY h.sku`
}

// heldArgs are the parameters of heldUnits for a sale.
func heldArgs(saleID string) []any {
	return append(twice(saleID, string(inventory.OrderConfirmed)), saleID)
}

// freeUnits returns what is for sale of each item of a sale: its stocked
// total less the units held (heldUnits), or inventory.Unlimited.
func (s *Store) freeUnits(ctx context.Context, tx *sql.Tx, saleID string) (map[string]int64, error) {
	rows, err := s.query(ctx, tx, `SELECT i.sku, i.stocked, COALESCE(h.qty, 0) FROM sale_items i
		LEFT JOIN (`+heldUnits()+`) h ON h.sku = i.sku WHERE i.sale_id = ?`, append(heldArgs(saleID), saleID)...)
	if err != nil {
		return nil, err
	}
	free := map[string]int64{}
	err = scanEach(rows, func() error {
		var sku string
		var stocked, held int64
		err := rows.Scan(&sku, &stocked, &held)
		free[sku] = stocked - held
		if stocked == inventory.Unlimited {
			free[sku] = inventory.Unlimited
		}
		return err
	})
	return free, err
}

// AdoptMoves writes the halves of moves between a sale's segments that
// Redis acknowledged and that may not have reached the database through
// the streams yet (an instance hands over the ones it made, with its
// orders, before the database starts selling), and records the out halves
// it sent whose outcome it never learned (unsure). Each half is applied
// once per sale and move, whoever brings it, a hand-over or the stream's
// moved event (the moves table's key): the stream's events for them,
// should Redis return with them, then change nothing. An unsure out half
// holds the units it may have taken out of its sale (heldUnits) until its
// moved event arrives, or the recovery has drained the stream
// (SettleUnsure): the database never sells units that may be on their way
// to another segment. A half of a sale the database has no item of (a
// sale created in Redis alone, whose created event is still in its
// stream) is left to that stream.
func (s *Store) AdoptMoves(ctx context.Context, moves, unsure []inventory.MoveHalf) error {
	if len(moves)+len(unsure) == 0 {
		return nil
	}
	sales := map[string]bool{}
	for _, h := range slices.Concat(moves, unsure) {
		sales[h.SaleID] = true
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		for _, id := range slices.Sorted(maps.Keys(sales)) { // in order: two hand-overs never deadlock
			if err := s.forgetDegradedStock(ctx, tx, id); err != nil {
				return err
			}
		}
		for _, h := range moves {
			var n int
			if err := s.queryRow(ctx, tx, "SELECT COUNT(*) FROM sale_items WHERE sale_id = ? AND sku = ?", h.SaleID, h.SKU).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			if _, err := s.applyMove(ctx, tx, h); err != nil {
				return err
			}
		}
		for _, h := range unsure {
			if _, err := s.exec(ctx, tx, `INSERT INTO unsure_moves (sale_id, move_id, peer, sku, units) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (sale_id, move_id) DO NOTHING`, h.SaleID, h.ID, h.Peer, h.SKU, h.Units); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: adopt %d halves of moves (%d unsure): %w", len(moves)+len(unsure), len(unsure), err)
	}
	return nil
}

// applyMove applies a half of a move to its sale once per move: its row
// in moves and, if the row is new, its units added to (or taken from) the
// item's stocked total. It reports whether the row was new.
func (s *Store) applyMove(ctx context.Context, tx *sql.Tx, h inventory.MoveHalf) (bool, error) {
	fresh := false
	err := s.insertRows(ctx, tx, "INSERT INTO moves (sale_id, move_id, peer, sku, units)", 5, []any{h.SaleID, h.ID, h.Peer, h.SKU, h.Units},
		"ON CONFLICT (sale_id, move_id) DO NOTHING RETURNING move_id", func(string) { fresh = true })
	if err != nil || !fresh {
		return false, err
	}
	return true, s.restock(ctx, tx, h.SaleID, h.SKU, h.Units)
}
