package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// RepairEntry is one quantity of a sale that a repair set in Redis from the
// database: one inventory.RepairChange, with why and when.
type RepairEntry struct {
	SaleID string
	SKU    string // "" for a quantity of the whole sale
	Field  inventory.RepairField
	Before int64 // in Redis, before the repair
	After  int64 // what it was set to: the database's
	Fixed  int64 // Redis fields written or removed for it
	Reason string
	At     time.Time
}

// JournalRepair records every change of one repair, in one transaction, all
// with reason and the time at (zero: now). A repair without changes writes
// nothing.
func (s *Store) JournalRepair(ctx context.Context, r inventory.Repaired, reason string, at time.Time) error {
	if len(r.Changes) == 0 {
		return nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	args := make([]any, 0, 8*len(r.Changes))
	for _, c := range r.Changes {
		args = append(args, r.SaleID, c.SKU, string(c.Field), c.Before, c.After, int64(c.Fixed), reason, ms(at))
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		return s.insertRows(ctx, tx, "INSERT INTO repairs (sale_id, sku, field, before, after, fixed, reason, at)", 8, args, "", nil)
	})
	if err != nil {
		return fmt.Errorf("store: journal repair of sale %s: %w", r.SaleID, err)
	}
	return nil
}

// Repairs lists the journaled repairs of a sale ("": of every sale), in the
// order they were written.
func (s *Store) Repairs(ctx context.Context, saleID string) ([]RepairEntry, error) {
	where, args := "", []any(nil)
	if saleID != "" {
		where, args = "WHERE sale_id = ? ", []any{saleID}
	}
	rows, err := s.query(ctx, s.db, `SELECT sale_id, sku, field, before, after, fixed, reason, at FROM repairs `+where+`ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: repairs: %w", err)
	}
	var out []RepairEntry
	err = scanEach(rows, func() error {
		var e RepairEntry
		var at int64
		err := rows.Scan(&e.SaleID, &e.SKU, &e.Field, &e.Before, &e.After, &e.Fixed, &e.Reason, &at)
		e.At = fromMs(at)
		out = append(out, e)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: repairs: %w", err)
	}
	return out, nil
}
