package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Single-use tokens an accepted buy spent (inventory.SpentToken, migration
// 017) are kept with the orders that spent them: the order consumer writes
// a token's row in the transaction of its order, and Snapshot returns the
// ones whose life is not over, so that a sale Redis lost comes back with
// them still spent. A batch without a token buy writes nothing here.

// spentRows are rows of spent_tokens, one slice per column (insertColumns).
type spentRows struct {
	sale, token, user, order []string
	until                    []int64
}

// add adds sp, a token a buy of the sale spent; none for Token "".
func (t *spentRows) add(saleID string, sp inventory.SpentToken) {
	if sp.Token == "" {
		return
	}
	t.sale = append(t.sale, saleID)
	t.token = append(t.token, sp.Token)
	t.user = append(t.user, sp.UserID)
	t.order = append(t.order, sp.OrderID)
	t.until = append(t.until, ms(sp.Until))
}

func (t *spentRows) columns() []any { return []any{t.sale, t.token, t.user, t.order, t.until} }

// spentInsert writes spent tokens; a token there already (its bought event
// applied twice) stays as it is.
const (
	spentInsert = "INSERT INTO spent_tokens (sale_id, token, user_id, order_id, expires_at)"
	spentTail   = "ON CONFLICT (sale_id, token) DO NOTHING"
)

// insertSpent writes the rows of t, if any.
func (s *Store) insertSpent(ctx context.Context, q querier, t *spentRows) error {
	if len(t.sale) == 0 {
		return nil
	}
	return s.insertColumns(ctx, q, spentInsert, t.columns(), spentTail, nil)
}

// readSpentTokens returns the sale's spent tokens whose life is not over at now.
func (s *Store) readSpentTokens(ctx context.Context, q querier, saleID string, now time.Time) ([]inventory.SpentToken, error) {
	rows, err := s.query(ctx, q, `SELECT token, user_id, order_id, expires_at FROM spent_tokens
		WHERE sale_id = ? AND expires_at > ? ORDER BY token`, saleID, ms(now))
	if err != nil {
		return nil, err
	}
	var out []inventory.SpentToken
	err = scanEach(rows, func() error {
		var t inventory.SpentToken
		var until int64
		err := rows.Scan(&t.Token, &t.UserID, &t.OrderID, &until)
		t.Until = fromMs(until)
		out = append(out, t)
		return err
	})
	return out, err
}

// AdoptSpentTokens writes the purchase tokens the buys of orders an
// instance handed over (AdoptOrders) spent, each with its order's sale: a
// sale Redis lost with the stream that carried them still refuses them. A
// token there already stays as it is; none is nothing to write.
func (s *Store) AdoptSpentTokens(ctx context.Context, tokens []inventory.SpentToken) error {
	if len(tokens) == 0 {
		return nil
	}
	var rows spentRows
	for _, t := range tokens {
		sale, err := inventory.SaleOfOrder(t.OrderID)
		if err != nil {
			return err
		}
		rows.add(sale, t)
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.insertSpent(ctx, tx, &rows) })
	if err != nil {
		return fmt.Errorf("store: adopt %d spent tokens: %w", len(tokens), err)
	}
	return nil
}
