package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckill/seckill/internal/inventory"
)

// SaleEvents is one sale's events, in stream order, for ApplyMany.
type SaleEvents struct {
	SaleID string
	Events []inventory.Event
}

// ApplyMany applies the events of several sales in one transaction, each
// sale's as Apply applies them, idempotently: with orders spread over many
// sales, one transaction (and a few statements) instead of one per sale.
// The bought events of every sale that has nothing else in the batch are
// written together, a few multi-row statements in all.
//
// The sales' rows are locked in order of their ids (bytes), as every
// writer that locks several sales does, so two of these (in other
// consumers or instances) and a hand-over never deadlock. Naming a sale
// twice applies its events of both, in turn.
//
// If an event of any sale can never be applied, ApplyMany writes nothing
// and returns a *PermanentError (matching ErrPermanent) naming the sale and
// the first such event of it: apply the sales one by one with Apply, which
// leaves the others unharmed. An invalid sale id is an error matching
// inventory.ErrInvalid. Any other error is the database's (or the
// context's), wrapped: retry.
func (s *Store) ApplyMany(ctx context.Context, sales []SaleEvents) error {
	var todo []SaleEvents
	n := 0
	for _, se := range sales {
		if err := checkSale(se.SaleID, se.Events); err != nil {
			return err
		}
		if len(se.Events) > 0 {
			todo = append(todo, se)
			n += len(se.Events)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	slices.SortStableFunc(todo, func(a, b SaleEvents) int { return strings.Compare(a.SaleID, b.SaleID) })
	if err := s.applyInTx(ctx, todo); err != nil {
		return fmt.Errorf("store: apply %d events of %d sales: %w", n, len(todo), err)
	}
	return nil
}

// applyInTx applies the events of sales (sorted by id, none empty, all
// checked) in one transaction. On PostgreSQL it first assumes that every
// bought event is new (as it is but after a consumer crashed between
// commit and ack, or a cancel overtook its buy): their rows go in with
// plain inserts, which cost PostgreSQL about a quarter less per order than
// inserts that check each row for a conflict (speculative insertion). Should
// one of them be there after all, the unique key refuses the transaction,
// nothing of it stays, and it is run again checking every row. That first
// try of a batch of bought events only is one pipeline (applyPipelined).
func (s *Store) applyInTx(ctx context.Context, sales []SaleEvents) error {
	if s.dialect == Postgres && !repeatsOrder(sales) {
		err := errNotPipelined
		if allBought(sales) { // the consumer's usual batch: see applyPipelined
			err = s.applyPipelined(ctx, sales)
		}
		if errors.Is(err, errNotPipelined) {
			err = s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applySales(ctx, tx, sales, true) })
		}
		if !isUniqueViolation(err) {
			return err
		}
	}
	return s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applySales(ctx, tx, sales, false) })
}

// repeatsOrder reports whether two bought events of sales name one order
// (an entry read twice): the optimistic path would refuse every try of it.
func repeatsOrder(sales []SaleEvents) bool {
	seen := map[string]bool{}
	for _, se := range sales {
		for _, ev := range se.Events {
			if ev.Type != inventory.EventBought {
				continue
			}
			if seen[ev.Order.ID] {
				return true
			}
			seen[ev.Order.ID] = true
		}
	}
	return false
}

// isUniqueViolation: PostgreSQL refused a row for a unique key (23505).
func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

// applySales applies the events of sales (sorted by id, none empty, all
// checked) in tx. With optimistic, every bought event's order and journal
// rows are taken to be new (see applyInTx).
func (s *Store) applySales(ctx context.Context, tx *sql.Tx, sales []SaleEvents, optimistic bool) error {
	ids := make([]string, 0, len(sales))
	for _, se := range sales {
		if len(ids) == 0 || ids[len(ids)-1] != se.SaleID {
			ids = append(ids, se.SaleID)
		}
	}
	// Orders written here are not in degraded mode's counters.
	if err := s.forgetDegradedStocks(ctx, tx, ids); err != nil {
		return err
	}
	var onlyBought []SaleEvents // applied together, after the others
	for _, se := range sales {
		if !slices.ContainsFunc(se.Events, func(ev inventory.Event) bool { return ev.Type != inventory.EventBought }) {
			onlyBought = append(onlyBought, se)
			continue
		}
		for rest := se.Events; len(rest) > 0; {
			n := 1
			if rest[0].Type == inventory.EventBought {
				for n < len(rest) && rest[n].Type == inventory.EventBought {
					n++
				}
				if err := s.applyBought(ctx, tx, []SaleEvents{{SaleID: se.SaleID, Events: rest[:n]}}, optimistic); err != nil {
					return err
				}
			} else if err := s.applyOne(ctx, tx, se.SaleID, rest[0]); err != nil {
				return err
			}
			rest = rest[n:]
		}
	}
	if len(onlyBought) > 0 {
		if err := s.applyBought(ctx, tx, onlyBought, optimistic); err != nil {
			return err
		}
	}
	// Orders an instance handed over as of unknown outcome arrive
	// voided: the database sold their units meanwhile.
	return s.voidArrivedUnsure(ctx, tx, ids, time.Now())
}

// forgetDegradedStocks takes the row locks of the sales (sorted ids) and
// deletes their rows of degraded mode's counters: anything that writes a
// sale's orders makes the next degraded buy count them again. On
// PostgreSQL it is two statements whatever the number of sales.
func (s *Store) forgetDegradedStocks(ctx context.Context, tx *sql.Tx, ids []string) error {
	if s.dialect != Postgres {
		for _, id := range ids {
			if err := s.forgetDegradedStock(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	}
	// Locked as sorted (LockRows takes the rows in the order the sort
	// returns them); COLLATE "C" sorts by bytes, as Go does.
	rows, err := tx.QueryContext(ctx, lockSalesSQL, ids)
	if err != nil {
		return err
	}
	if err := scanEach(rows, func() error { var id string; return rows.Scan(&id) }); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, forgetDegradedSQL, ids)
	return err
}
