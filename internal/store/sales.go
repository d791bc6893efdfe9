package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// ErrSaleInUse matches the error of DeleteSale for a sale that has orders
// or applied events: it is live, not a create to roll back.
var ErrSaleInUse = errors.New("store: sale has orders or applied events")

// Sale is a sale as stored: the definition, whose Items[i].Stock is every
// unit ever stocked (initial plus applied restocks, or inventory.Unlimited),
// in creation order, plus the service's settings of the sale.
type Sale struct {
	inventory.Sale
	// Settings are the service's settings of the sale (its rate limits, its
	// purchase tokens), encoded by the service: the store keeps them as
	// they are and never reads them. "" : none.
	Settings string
	// CreatedAt is when the sale was created (millisecond precision).
	CreatedAt time.Time
}

// CreateSale inserts a sale and its items, each item's Stock as its initial
// stock. A zero CreatedAt is set to now and a zero PerUserLimit to 1, as the
// engine reads them. The definition is checked as the engine checks it
// (inventory.ValidateSale: errors match inventory.ErrInvalid). If a sale with
// that id exists, it returns an error matching inventory.ErrExists and
// writes nothing.
func (s *Store) CreateSale(ctx context.Context, sale Sale) error {
	if err := inventory.ValidateSale(sale.Sale); err != nil {
		return err
	}
	if sale.PerUserLimit == 0 {
		sale.PerUserLimit = 1
	}
	if sale.CreatedAt.IsZero() {
		sale.CreatedAt = time.Now()
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.claimSaleID(ctx, tx, sale.ID); err != nil {
			return err
		}
		var segmented int // a segmented sale of that id (segments.go)
		if err := s.queryRow(ctx, tx, "SELECT COUNT(*) FROM sale_segments WHERE sale_id = ?", sale.ID).Scan(&segmented); err != nil {
			return err
		}
		if segmented > 0 {
			return fmt.Errorf("%w: sale %s", inventory.ErrExists, sale.ID)
		}
		created, err := s.insertSale(ctx, tx, sale)
		if err != nil {
			return err
		}
		if !created {
			return fmt.Errorf("%w: sale %s", inventory.ErrExists, sale.ID)
		}
		return nil
	})
	if err != nil && !errors.Is(err, inventory.ErrExists) {
		return fmt.Errorf("store: create sale %s: %w", sale.ID, err)
	}
	return err
}

// insertSale inserts the sale and its items unless a sale with its id
// exists; created says whether it did.
func (s *Store) insertSale(ctx context.Context, tx *sql.Tx, sale Sale) (created bool, err error) {
	res, err := s.exec(ctx, tx, `INSERT INTO sales (id, per_user_limit, starts_at, ends_at, paused, settings, created_at, payment_timeout_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		sale.ID, sale.PerUserLimit, ms(sale.StartsAt), ms(sale.EndsAt), flag(sale.Paused), sale.Settings, ms(sale.CreatedAt),
		sale.PaymentTimeout.Milliseconds())
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	args := make([]any, 0, 5*len(sale.Items))
	for i, it := range sale.Items {
		args = append(args, sale.ID, it.SKU, i, it.Stock, it.Stock)
	}
	err = s.insertRows(ctx, tx, "INSERT INTO sale_items (sale_id, sku, position, initial_stock, stocked)", 5, args, "", nil)
	return err == nil, err
}

// DeleteSale removes a sale that has neither orders nor applied events: it
// rolls back a CreateSale that Redis then refused. An unknown id is an error
// matching inventory.ErrNotFound; a sale with orders or journal rows is left
// alone with an error matching ErrSaleInUse.
func (s *Store) DeleteSale(ctx context.Context, id string) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		// One statement, so no order or event can slip in between a check
		// and the delete.
		res, err := s.exec(ctx, tx, `DELETE FROM sales WHERE id = ?
			AND NOT EXISTS (SELECT 1 FROM orders WHERE sale_id = ?)
			AND NOT EXISTS (SELECT 1 FROM journal WHERE sale_id = ?)`, id, id, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var exists int
		if err := s.queryRow(ctx, tx, "SELECT COUNT(*) FROM sales WHERE id = ?", id).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return saleNotFound(id)
		}
		return fmt.Errorf("%w: %s", ErrSaleInUse, id)
	})
	if err != nil && !errors.Is(err, inventory.ErrNotFound) && !errors.Is(err, ErrSaleInUse) {
		return fmt.Errorf("store: delete sale %s: %w", id, err)
	}
	return err
}

// Sale returns a sale; an unknown id is an error matching inventory.ErrNotFound.
func (s *Store) Sale(ctx context.Context, id string) (Sale, error) {
	var sale Sale
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		sale, err = s.readSale(ctx, tx, id)
		return err
	})
	if err != nil && !errors.Is(err, inventory.ErrNotFound) {
		return Sale{}, fmt.Errorf("store: read sale %s: %w", id, err)
	}
	return sale, err
}

func (s *Store) readSale(ctx context.Context, q querier, id string) (Sale, error) {
	sale := Sale{Sale: inventory.Sale{ID: id}}
	var startsAt, endsAt, paused, createdAt, payMs int64
	err := s.queryRow(ctx, q, `SELECT per_user_limit, starts_at, ends_at, paused, settings, created_at, payment_timeout_ms
		FROM sales WHERE id = ?`, id).Scan(&sale.PerUserLimit, &startsAt, &endsAt, &paused, &sale.Settings, &createdAt, &payMs)
	if errors.Is(err, sql.ErrNoRows) {
		return Sale{}, saleNotFound(id)
	}
	if err != nil {
		return Sale{}, err
	}
	sale.StartsAt, sale.EndsAt, sale.CreatedAt = fromMs(startsAt), fromMs(endsAt), fromMs(createdAt)
	sale.Paused = paused != 0
	sale.PaymentTimeout = time.Duration(payMs) * time.Millisecond
	rows, err := s.query(ctx, q, "SELECT sku, stocked FROM sale_items WHERE sale_id = ? ORDER BY position", id)
	if err != nil {
		return Sale{}, err
	}
	err = scanEach(rows, func() error {
		var it inventory.Item
		if err := rows.Scan(&it.SKU, &it.Stock); err != nil {
			return err
		}
		sale.Items = append(sale.Items, it)
		return nil
	})
	return sale, err
}

// SaleIDs returns the id of every sale, sorted.
func (s *Store) SaleIDs(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, s.db, "SELECT id FROM sales")
	if err != nil {
		return nil, fmt.Errorf("store: list sales: %w", err)
	}
	var ids []string
	err = scanEach(rows, func() error {
		var id string
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list sales: %w", err)
	}
	slices.Sort(ids) // byte order, whatever the database's collation
	return ids, nil
}

// SaleEnds returns every sale's end (ends_at; zero for a sale without
// one), by id: what the order consumer needs to know which sales can still
// take orders. Archived sales, whose streams are gone, are left out.
func (s *Store) SaleEnds(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.query(ctx, s.db, "SELECT id, ends_at FROM sales WHERE archived_at = 0")
	if err != nil {
		return nil, fmt.Errorf("store: list sales: %w", err)
	}
	ends := map[string]time.Time{}
	err = scanEach(rows, func() error {
		var id string
		var end int64
		err := rows.Scan(&id, &end)
		ends[id] = fromMs(end)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list sales: %w", err)
	}
	return ends, nil
}

// Snapshot returns the sale as the engine needs it to rebuild it: the
// definition (each item's Stock is every unit ever stocked) and every order
// of the sale with its items and idempotency key, confirmed ones with
// Status inventory.OrderConfirmed (the engine counts them as sold) and
// cancelled ones with inventory.OrderCancelled. EventsApplied is left ""
// for the caller to set. It reads one consistent state of the database. An
// unknown sale is an error matching inventory.ErrNotFound.
func (s *Store) Snapshot(ctx context.Context, saleID string) (inventory.Snapshot, error) {
	var snap inventory.Snapshot
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		sale, err := s.readSale(ctx, tx, saleID)
		if err != nil {
			return err
		}
		snap.Sale = sale.Sale
		if snap.Orders, err = s.readOrders(ctx, tx, "o.sale_id = ?", saleID); err != nil {
			return err
		}
		if snap.Moves, err = s.readMoves(ctx, tx, saleID); err != nil {
			return err
		}
		if snap.SpentTokens, err = s.readSpentTokens(ctx, tx, saleID, time.Now()); err != nil {
			return err
		}
		snap.NewestEvent, err = s.newestEvent(ctx, tx, saleID)
		return err
	})
	if err != nil && !errors.Is(err, inventory.ErrNotFound) {
		return inventory.Snapshot{}, fmt.Errorf("store: snapshot of sale %s: %w", saleID, err)
	}
	return snap, err
}

// newestEventSQL orders a sale's event ids ("<ms>-<seq>") as numbers, the
// newest first: ids are text, and "9-0" sorts after "10-0" as text.
var newestEventSQL = map[string]string{
	Postgres: `SELECT event_id FROM (
		SELECT event_id FROM journal WHERE sale_id = ? UNION ALL SELECT event_id FROM dead_letters WHERE sale_id = ?
		UNION ALL SELECT event_id FROM orders WHERE sale_id = ? AND event_id <> '') e
		WHERE event_id ~ '^[0-9]{1,19}-[0-9]{1,19}$'
		ORDER BY split_part(event_id, '-', 1)::numeric DESC, split_part(event_id, '-', 2)::numeric DESC LIMIT 1`,
	SQLite: `SELECT event_id FROM (
		SELECT event_id FROM journal WHERE sale_id = ? UNION ALL SELECT event_id FROM dead_letters WHERE sale_id = ?
		UNION ALL SELECT event_id FROM orders WHERE sale_id = ? AND event_id <> '')
		WHERE event_id GLOB '[0-9]*-[0-9]*' AND event_id NOT GLOB '*[^0-9-]*'
		ORDER BY CAST(substr(event_id, 1, instr(event_id, '-') - 1) AS INTEGER) DESC,
			CAST(substr(event_id, instr(event_id, '-') + 1) AS INTEGER) DESC LIMIT 1`,
}

// newestEvent returns the id of the newest event of the sale's stream the
// database has seen, applied (the journal, and the bought events its
// orders were stored from) or dead-lettered; "" for none.
func (s *Store) newestEvent(ctx context.Context, q querier, saleID string) (string, error) {
	rows, err := s.query(ctx, q, newestEventSQL[s.dialect], saleID, saleID, saleID)
	if err != nil {
		return "", err
	}
	var id string
	err = scanEach(rows, func() error { return rows.Scan(&id) })
	return id, err
}

// readMoves returns the sale's moves; a move out has arrived when its peer
// holds the row of its in half.
func (s *Store) readMoves(ctx context.Context, q querier, saleID string) ([]inventory.Move, error) {
	rows, err := s.query(ctx, q, `SELECT m.move_id, m.peer, m.sku, m.units,
		CASE WHEN EXISTS (SELECT 1 FROM moves p WHERE p.sale_id = m.peer AND p.move_id = m.move_id) THEN 1 ELSE 0 END
		FROM moves m WHERE m.sale_id = ? ORDER BY m.move_id`, saleID)
	if err != nil {
		return nil, err
	}
	var out []inventory.Move
	err = scanEach(rows, func() error {
		var m inventory.Move
		var arrived int
		if err := rows.Scan(&m.ID, &m.Peer, &m.SKU, &m.Units, &arrived); err != nil {
			return err
		}
		m.Arrived = m.Units < 0 && arrived == 1
		out = append(out, m)
		return nil
	})
	return out, err
}

// Order returns an order as stored: Status is inventory.OrderConfirmed or
// inventory.OrderCancelled, Items in line order. An unknown id is an error
// matching inventory.ErrNotFound.
func (s *Store) Order(ctx context.Context, id string) (inventory.Order, error) {
	var orders []inventory.Order
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		orders, err = s.readOrders(ctx, tx, "o.id = ?", id)
		return err
	})
	if err != nil {
		return inventory.Order{}, fmt.Errorf("store: read order %s: %w", id, err)
	}
	if len(orders) == 0 {
		return inventory.Order{}, &inventory.NotFoundError{Kind: "order", IDs: []string{id}}
	}
	return orders[0], nil
}

// readOrders returns the orders matching where (a condition on orders o
// with parameters args) with their items, by creation time then id.
func (s *Store) readOrders(ctx context.Context, q querier, where string, args ...any) ([]inventory.Order, error) {
	rows, err := s.query(ctx, q, `SELECT o.id, o.sale_id, o.user_id, o.status, o.idempotency_key, o.created_at,
		o.payment_status, o.payment_ref, COALESCE((SELECT s.payment_timeout_ms FROM sales s WHERE s.id = o.sale_id), 0), o.sku, o.qty
		FROM orders o WHERE `+where+` ORDER BY o.created_at, o.id`, args...)
	if err != nil {
		return nil, err
	}
	var orders []inventory.Order
	index := map[string]int{}
	listed := false // an order has its lines in order_items
	err = scanEach(rows, func() error {
		var o inventory.Order
		var created, payMs int64
		var payment string
		var l inventory.Line
		if err := rows.Scan(&o.ID, &o.SaleID, &o.UserID, &o.Status, &o.IdempotencyKey, &created,
			&payment, &o.PaymentRef, &payMs, &l.SKU, &l.Qty); err != nil {
			return err
		}
		if l.SKU != "" { // its one line (inlineLine); else its lines are in order_items
			o.Items = []inventory.Line{l}
		} else {
			listed = true
		}
		o.CreatedAt = fromMs(created)
		paymentOf(&o, payment, payMs)
		index[o.ID] = len(orders)
		orders = append(orders, o)
		return nil
	})
	if err != nil || !listed {
		return orders, err
	}
	rows, err = s.query(ctx, q, `SELECT oi.order_id, oi.sku, oi.qty FROM order_items oi
		JOIN orders o ON o.id = oi.order_id WHERE `+where+` ORDER BY oi.order_id, oi.position`, args...)
	if err != nil {
		return nil, err
	}
	err = scanEach(rows, func() error {
		var id string
		var l inventory.Line
		if err := rows.Scan(&id, &l.SKU, &l.Qty); err != nil {
			return err
		}
		if i, ok := index[id]; ok {
			orders[i].Items = append(orders[i].Items, l)
		}
		return nil
	})
	return orders, err
}

// ItemTotals is what the database alone says of one item of a sale.
type ItemTotals struct {
	SKU string
	// Stocked is the initial stock plus applied restocks (-1: unlimited).
	Stocked int64
	// Sold is the units of the item in confirmed (not cancelled) orders.
	Sold int64
}

// Totals returns each item's totals, in item order, for reconciliation. An
// unknown sale is an error matching inventory.ErrNotFound.
func (s *Store) Totals(ctx context.Context, saleID string) ([]ItemTotals, error) {
	totals, _, err := s.TotalsWith(ctx, saleID, nil, "")
	return totals, err
}

// JournalRow is one row of the journal: what one applied event moved of
// one sku (Qty: units of an order line, restocked or moved; 0 for a pause).
type JournalRow struct {
	EventID string
	Type    inventory.EventType
	SKU     string
	Qty     int64
}

// TotalsWith is Totals together with the journal rows, read in the same
// transaction, of the sale's applied events whose stream ids are among ids
// or, if from is not "", are not before from as text: for stream ids
// "<ms>-<seq>" whose ms have as many digits (every id Redis generates
// between 2001 and 2286), every event of from's millisecond or later, and
// maybe some of later ids than ids with more digits. A caller that read
// Redis first learns which events the database applied since: those it
// holds in flight and those past the stream position it read.
func (s *Store) TotalsWith(ctx context.Context, saleID string, ids []string, from string) ([]ItemTotals, []JournalRow, error) {
	var (
		totals []ItemTotals
		rows   []JournalRow
	)
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		rs, err := s.query(ctx, tx, `SELECT i.sku, i.stocked, COALESCE(sold.qty, 0)
			FROM sale_items i LEFT JOIN (
				SELECT l.sku AS sku, CAST(SUM(l.qty) AS BIGINT) AS qty FROM `+orderLines("o.sale_id = ? AND o.status = ?")+` l GROUP BY l.sku
			) sold ON sold.sku = i.sku
			WHERE i.sale_id = ? ORDER BY i.position`, append(twice(saleID, string(inventory.OrderConfirmed)), saleID)...)
		if err != nil {
			return err
		}
		err = scanEach(rs, func() error {
			var t ItemTotals
			err := rs.Scan(&t.SKU, &t.Stocked, &t.Sold)
			totals = append(totals, t)
			return err
		})
		if err != nil {
			return err
		}
		if len(totals) == 0 {
			return s.saleExists(ctx, tx, saleID)
		}
		scanRows := func(rs *sql.Rows) error {
			return scanEach(rs, func() error {
				var r JournalRow
				err := rs.Scan(&r.EventID, &r.Type, &r.SKU, &r.Qty)
				rows = append(rows, r)
				return err
			})
		}
		// The journal's rows, then the bought events' its orders carry.
		const head = "SELECT event_id, type, sku, qty FROM journal WHERE sale_id = ? AND "
		read := func(where string, args ...any) error {
			rs, err := s.query(ctx, tx, head+strings.ReplaceAll(where, "o.", ""), append([]any{saleID}, args...)...)
			if err != nil {
				return err
			}
			if err := scanRows(rs); err != nil {
				return err
			}
			rs, err = s.query(ctx, tx, boughtJournal("l.event_id, '"+string(inventory.EventBought)+"', l.sku, l.qty", where),
				twice(append([]any{saleID}, args...)...)...)
			if err != nil {
				return err
			}
			return scanRows(rs)
		}
		if from != "" {
			if err := read("o.event_id >= ?", from); err != nil {
				return err
			}
		}
		for chunk := range slices.Chunk(ids, s.maxParams/4) {
			args := make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			if err := read("o.event_id IN (?"+strings.Repeat(", ?", len(chunk)-1)+")", args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, inventory.ErrNotFound) {
		return nil, nil, fmt.Errorf("store: totals of sale %s: %w", saleID, err)
	}
	return totals, rows, err
}

// CountOrders returns how many orders of the sale the database holds, by
// status; both inventory.OrderConfirmed and inventory.OrderCancelled are
// always in the map. Orders are counted even if the sale row is missing.
func (s *Store) CountOrders(ctx context.Context, saleID string) (map[inventory.OrderStatus]int, error) {
	counts := map[inventory.OrderStatus]int{inventory.OrderConfirmed: 0, inventory.OrderCancelled: 0}
	rows, err := s.query(ctx, s.db, "SELECT status, COUNT(*) FROM orders WHERE sale_id = ? GROUP BY status", saleID)
	if err != nil {
		return nil, fmt.Errorf("store: count orders of sale %s: %w", saleID, err)
	}
	err = scanEach(rows, func() error {
		var status inventory.OrderStatus
		var n int
		err := rows.Scan(&status, &n)
		counts[status] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: count orders of sale %s: %w", saleID, err)
	}
	return counts, nil
}

// CountOrdersOf is CountOrders of several sales in one query (per 500
// sales): counts[id] is sale id's, by status. It reads the counts the
// triggers of migration 013 keep (order_counts), a few rows per sale
// however many orders it has: the live view asks every second.
func (s *Store) CountOrdersOf(ctx context.Context, saleIDs []string) (map[string]map[inventory.OrderStatus]int, error) {
	counts := make(map[string]map[inventory.OrderStatus]int, len(saleIDs))
	for _, id := range saleIDs {
		counts[id] = map[inventory.OrderStatus]int{inventory.OrderConfirmed: 0, inventory.OrderCancelled: 0}
	}
	for chunk := range slices.Chunk(saleIDs, 500) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.query(ctx, s.db, "SELECT sale_id, status, CAST(SUM(n) AS BIGINT) FROM order_counts WHERE sale_id IN ("+
			strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+") GROUP BY sale_id, status", args...)
		if err != nil {
			return nil, fmt.Errorf("store: count orders: %w", err)
		}
		err = scanEach(rows, func() error {
			var id string
			var status inventory.OrderStatus
			var n int
			err := rows.Scan(&id, &status, &n)
			if c := counts[id]; c != nil {
				c[status] = n
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("store: count orders: %w", err)
		}
	}
	return counts, nil
}

// saleExists returns nil if the sale has a row, else an error matching
// inventory.ErrNotFound.
func (s *Store) saleExists(ctx context.Context, q querier, id string) error {
	var n int
	if err := s.queryRow(ctx, q, "SELECT COUNT(*) FROM sales WHERE id = ?", id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return saleNotFound(id)
	}
	return nil
}

func saleNotFound(id string) error {
	return &inventory.NotFoundError{Kind: "sale", IDs: []string{id}}
}
