package store

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seckill/seckill/internal/inventory"
)

// The consumer's usual transaction on PostgreSQL: only bought events, all
// new. Through database/sql it is up to seven round trips (begin, the
// sales' locks, degraded mode's counters, the orders and, for orders of
// several lines, order_items, the unsure orders, commit), and each costs PostgreSQL more than the statement it carries
// when the inserts are small (a read of the socket, a reply, a wake-up).
// applyPipelined sends the same statements, in the same order and
// transaction, as one pipeline, then commits: two round trips.

// Statements applySales and applyPipelined share.
const (
	// lockSalesSQL locks the sales' rows in order of their ids as bytes
	// (COLLATE "C"), as Go sorts them.
	lockSalesSQL = `SELECT id FROM sales WHERE id = ANY($1::text[]) ORDER BY id COLLATE "C" FOR UPDATE`
	// forgetDegradedSQL deletes the sales' rows of degraded mode's counters.
	forgetDegradedSQL = "DELETE FROM degraded_stock WHERE sale_id = ANY($1::text[])"
	// unsureArrivedSQL finds an order of the sales handed over as of
	// unknown outcome that is stored now (see voidArrivedUnsure).
	unsureArrivedSQL = `SELECT 1 FROM unsure_orders u WHERE sale_id = ANY($1::text[])
		AND EXISTS (SELECT 1 FROM orders o WHERE o.id = u.order_id) LIMIT 1`
)

// errNotPipelined: applyPipelined wrote nothing, and the batch needs the
// ordinary path (an order handed over as unsure arrived: it is voided
// there).
var errNotPipelined = errors.New("store: batch needs the ordinary path")

// allBought reports whether every event of sales is a bought event.
func allBought(sales []SaleEvents) bool {
	for _, se := range sales {
		if slices.ContainsFunc(se.Events, func(ev inventory.Event) bool { return ev.Type != inventory.EventBought }) {
			return false
		}
	}
	return true
}

// applyPipelined writes the bought events of sales (sorted by id, checked,
// no order twice) as applySales does with optimistic set, on PostgreSQL:
// the sales locked, their degraded-mode counters deleted, every order (its
// journal rows with it, see boughtJournal) and line inserted with plain
// inserts. An order stored before
// fails it with the unique key's error (23505), as there; an unsure order
// that arrived makes it roll back with errNotPipelined. Either way nothing
// of it stays.
func (s *Store) applyPipelined(ctx context.Context, sales []SaleEvents) error {
	var (
		ids    []string
		orders orderRows
		items  itemRows
		spent  spentRows
	)
	for _, se := range sales {
		if len(ids) == 0 || ids[len(ids)-1] != se.SaleID {
			ids = append(ids, se.SaleID)
		}
		for _, ev := range se.Events {
			orders.add(se.SaleID, ev)
			items.add(ev.Order)
			spent.add(se.SaleID, ev.Spent)
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockSalesSQL, ids)
	b.Queue(forgetDegradedSQL, ids)
	for _, ins := range []struct {
		head string
		cols []any
		tail string
	}{{ordersInsert, orders.columns(), ""}, {itemsInsert, items.columns(), ""}, {spentInsert, spent.columns(), spentTail}} {
		// No lines in order_items when every order has one (inlineLine),
		// no spent tokens when no buy had one.
		if columnLen(ins.cols[0]) > 0 {
			b.Queue(unnestInsert(ins.head, ins.cols, ins.tail), ins.cols...)
		}
	}
	b.Queue(unsureArrivedSQL, ids)

	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	s.txs.Add(1)
	return conn.Raw(func(driverConn any) error {
		c := driverConn.(*stdlib.Conn).Conn()
		err := sendPipeline(ctx, c, b)
		if err == nil {
			_, err = c.Exec(ctx, "COMMIT")
		} else {
			_, _ = c.Exec(ctx, "ROLLBACK")
		}
		// Still in the transaction (ctx ended after the pipeline, before
		// COMMIT or ROLLBACK was sent: pgx then sends nothing and leaves
		// the connection open): closed, which rolls it back, rather than
		// back to the pool holding the sales' locks and the orders
		// uncommitted until the connection's next use
		// (TestAdvPipelinedCancelledBeforeCommit). A COMMIT sent whose
		// reply was lost is an error too: the caller retries, and the
		// retry is refused by the unique key and stores nothing twice.
		if !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
			_ = c.Close(ctx)
		}
		return err
	})
}

// sendPipeline sends b (BEGIN, then statements, the last one a query of at
// most one row) and reads every result: the first error, or errNotPipelined
// if the last statement found a row.
func sendPipeline(ctx context.Context, c *pgx.Conn, b *pgx.Batch) error {
	br := c.SendBatch(ctx, b)
	var err error
	for i := range b.Len() {
		tag, e := br.Exec()
		if e != nil {
			err = e
			break
		}
		if i == b.Len()-1 && tag.RowsAffected() > 0 {
			err = errNotPipelined
		}
	}
	if e := br.Close(); err == nil {
		err = e
	}
	return err
}
