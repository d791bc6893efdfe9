package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/seckill/seckill/internal/inventory"
)

// CreateSegmentedSale records a segmented sale (package segment): its
// segments, each an ordinary sale (as CreateSale would insert it, in the
// order that decides every buyer's home segment), and its directory, in one
// transaction. The sale itself has no row of its own. If a sale or a
// segmented sale with the sale's id, or a sale with a segment's id, exists,
// it returns an error matching inventory.ErrExists and writes nothing.
func (s *Store) CreateSegmentedSale(ctx context.Context, saleID string, segments []Sale) error {
	if !inventory.ValidID(saleID) || len(segments) == 0 {
		return &inventory.InvalidError{Field: "sale", Reason: "a segmented sale needs an id and segments"}
	}
	for i := range segments {
		if err := inventory.ValidateSale(segments[i].Sale); err != nil {
			return err
		}
		if segments[i].PerUserLimit == 0 {
			segments[i].PerUserLimit = 1
		}
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.claimSaleID(ctx, tx, saleID); err != nil {
			return err
		}
		var n int
		if err := s.queryRow(ctx, tx, `SELECT (SELECT COUNT(*) FROM sales WHERE id = ?) +
			(SELECT COUNT(*) FROM sale_segments WHERE sale_id = ?)`, saleID, saleID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: sale %s", inventory.ErrExists, saleID)
		}
		args := make([]any, 0, 3*len(segments))
		for i, seg := range segments {
			args = append(args, saleID, i, seg.ID)
		}
		if err := s.insertRows(ctx, tx, "INSERT INTO sale_segments (sale_id, position, segment_id)", 3, args, "", nil); err != nil {
			return err
		}
		for _, seg := range segments {
			created, err := s.insertSale(ctx, tx, seg)
			if err != nil {
				return err
			}
			if !created {
				return fmt.Errorf("%w: sale %s (a segment of %s)", inventory.ErrExists, seg.ID, saleID)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, inventory.ErrExists) && !errors.Is(err, inventory.ErrInvalid) {
		return fmt.Errorf("store: create segmented sale %s: %w", saleID, err)
	}
	return err
}

// claimSaleID serializes the creates of one sale id (a sale, or a
// segmented sale, which have their rows in different tables) until the
// transaction ends; on SQLite writes are serialized anyway.
func (s *Store) claimSaleID(ctx context.Context, tx *sql.Tx, id string) error {
	if s.dialect != Postgres {
		return nil
	}
	_, err := s.exec(ctx, tx, "SELECT pg_advisory_xact_lock(hashtext('seckill sale id'), hashtext(?))", id)
	return err
}

// Segments returns the segment ids of a segmented sale, in the order they
// were created with (the order that decides every buyer's home segment),
// or nil if saleID is not a segmented sale. It is the directory package
// segment rebuilds Redis's from (segment.Options.Directory), and the one
// list of a sale's segments for whatever must reach each of them.
func (s *Store) Segments(ctx context.Context, saleID string) ([]string, error) {
	rows, err := s.query(ctx, s.db, "SELECT segment_id FROM sale_segments WHERE sale_id = ? ORDER BY position", saleID)
	if err != nil {
		return nil, fmt.Errorf("store: segments of %s: %w", saleID, err)
	}
	var ids []string
	err = scanEach(rows, func() error {
		var id string
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: segments of %s: %w", saleID, err)
	}
	return ids, nil
}

// SaleKind tells what a sale id names: a segmented sale (its segments), an
// ordinary sale (nil, true), or nothing (nil, false).
func (s *Store) SaleKind(ctx context.Context, saleID string) (segments []string, exists bool, err error) {
	if segments, err = s.Segments(ctx, saleID); err != nil || len(segments) > 0 {
		return segments, len(segments) > 0, err
	}
	var n int
	if err := s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM sales WHERE id = ?", saleID).Scan(&n); err != nil {
		return nil, false, fmt.Errorf("store: read sale %s: %w", saleID, err)
	}
	return nil, n > 0, nil
}

// SegmentedSales returns every segmented sale's segments, by sale id.
func (s *Store) SegmentedSales(ctx context.Context) (map[string][]string, error) {
	rows, err := s.query(ctx, s.db, "SELECT sale_id, segment_id FROM sale_segments ORDER BY sale_id, position")
	if err != nil {
		return nil, fmt.Errorf("store: list segmented sales: %w", err)
	}
	out := map[string][]string{}
	err = scanEach(rows, func() error {
		var sale, seg string
		err := rows.Scan(&sale, &seg)
		out[sale] = append(out[sale], seg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list segmented sales: %w", err)
	}
	return out, nil
}

// MovingUnits returns, per sku, the units on their way between the given
// sales (the segments of one sale), as the database has applied their
// moves: moved out of one of them and not (yet) into the other. A move
// that Redis left half done (its second half met a fenced segment as the
// database took over, say) shows here until Redis sells again and the
// move is finished; the units are in no segment's stock meanwhile.
func (s *Store) MovingUnits(ctx context.Context, saleIDs []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(saleIDs) == 0 {
		return out, nil
	}
	in := placeholders(1, len(saleIDs))
	args := make([]any, 0, 2*len(saleIDs))
	for range 2 {
		for _, id := range saleIDs {
			args = append(args, id)
		}
	}
	rows, err := s.query(ctx, s.db, `SELECT m.sku, -SUM(m.units) FROM moves m
		WHERE m.sale_id IN `+in+` AND m.units < 0 AND m.peer IN `+in+`
		AND NOT EXISTS (SELECT 1 FROM moves p WHERE p.sale_id = m.peer AND p.move_id = m.move_id)
		GROUP BY m.sku`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: units moving between %s: %w", saleIDs[0], err)
	}
	err = scanEach(rows, func() error {
		var sku string
		var n int64
		err := rows.Scan(&sku, &n)
		out[sku] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: units moving between %s: %w", saleIDs[0], err)
	}
	return out, nil
}
