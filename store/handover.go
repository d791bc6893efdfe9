package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"github.com/seckill/seckill/inventory"
)

// The hand-over of degraded mode, beyond AdoptOrders and MarkUnsure
// (degraded.go): an order an instance acknowledged is never voided.

// voidEvent is the journal's event id of the void of an order
// (voidArrivedUnsure). Its row exists exactly while the void alone
// cancels the order: a cancel of the buyer's that comes after (the
// stream's cancelled or expired event, or a hand-over of the cancel)
// removes it, its own row then giving the units back, and an
// acknowledgement that comes after makes the order live again (unvoid).
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
		if _, err := s.exec(ctx, tx, "UPDATE orders SET status = ?, cancelled_at = 0 WHERE id = ?", string(inventory.OrderConfirmed), id); err != nil {
			return err
		}
		if err := s.dropVoid(ctx, tx, o.SaleID, id); err != nil {
			return err
		}
	}
	return nil
}

// heldUnits is a query of (sku, qty) rows, one per sku, of a sale's units
// that are stocked and not for sale: those of its live orders. Its
// parameters are heldArgs.
func heldUnits() string {
	return `SELECT l.sku AS sku, CAST(SUM(l.qty) AS BIGINT) AS qty FROM ` + orderLines("o.sale_id = ? AND o.status = ?") + ` l GROUP BY l.sku`
}

// heldArgs are the parameters of heldUnits for a sale.
func heldArgs(saleID string) []any { return twice(saleID, string(inventory.OrderConfirmed)) }

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
