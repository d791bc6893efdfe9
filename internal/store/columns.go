package store

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/seckill/seckill/internal/inventory"
)

// The rows the order consumer writes for every order, held one slice per
// column: what PostgreSQL's unnest takes as they are (insertColumns),
// without the value per cell boxed in an interface and sorted back into
// columns that rows of []any cost (insertRows).

// orderRows are rows of orders, confirmed, each stored from its bought
// event (its journal rows implied, see boughtJournal).
type orderRows struct {
	id, sale, user, status, key, sku, event []string
	created, qty                            []int64
}

func (t *orderRows) add(saleID string, ev inventory.Event) {
	o := ev.Order
	sku, qty := inlineLine(o)
	t.event = append(t.event, ev.ID)
	t.id = append(t.id, o.ID)
	t.sale = append(t.sale, saleID)
	t.user = append(t.user, o.UserID)
	t.status = append(t.status, string(inventory.OrderConfirmed))
	t.key = append(t.key, o.IdempotencyKey)
	t.created = append(t.created, ms(o.CreatedAt))
	t.sku = append(t.sku, sku)
	t.qty = append(t.qty, qty)
}

func (t *orderRows) columns() []any {
	return []any{t.id, t.sale, t.user, t.status, t.key, t.created, t.sku, t.qty, t.event}
}

const ordersInsert = "INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at, sku, qty, event_id)"

// An order's lines (migration 014): an order of one line carries it in its
// own row (orders.sku, orders.qty) and has no order_items row; an order of
// several lines has orders.sku '' and a row of order_items per line, as
// has every order stored before 014. Every writer of orders follows
// inlineLine and itemRows.add; every reader of lines reads both
// (orderLines, readOrders).

// inlineLine returns the line o carries in its own row: its only line, or
// "" and 0 for an order of several lines (they go in order_items).
func inlineLine(o inventory.Order) (sku string, qty int64) {
	if len(o.Items) == 1 {
		return o.Items[0].SKU, o.Items[0].Qty
	}
	return "", 0
}

// orderLines returns a subquery (to alias after FROM) of the lines
// (order_id, sku, qty, position, and the order's event_id, user_id,
// created_at) of the orders o that match where, a condition on orders o
// whose parameters the caller passes twice, once per branch.
func orderLines(where string) string {
	return `(SELECT o.id AS order_id, o.sku AS sku, o.qty AS qty, 0 AS position, o.event_id AS event_id, o.user_id AS user_id, o.created_at AS created_at
		FROM orders o WHERE (` + where + `) AND o.sku <> ''
		UNION ALL SELECT oi.order_id, oi.sku, oi.qty, oi.position, o.event_id, o.user_id, o.created_at
		FROM orders o JOIN order_items oi ON oi.order_id = o.id WHERE ` + where + `)`
}

// boughtJournal returns a query of cols (of the lines l of orderLines) of
// the journal rows implied by the sale's orders that match where, a
// condition on orders o: the rows of the bought events the order consumer
// stored them from (orders.event_id, migration 015), one per line. Its
// parameters: the sale's id then where's, twice (twice).
func boughtJournal(cols, where string) string {
	return "SELECT " + cols + " FROM " + orderLines("o.sale_id = ? AND o.event_id <> '' AND ("+where+")") + " l"
}

// twice returns args followed by args again, for orderLines.
func twice(args ...any) []any { return slices.Concat(args, args) }

// itemRows are rows of order_items.
type itemRows struct {
	order, sku []string
	qty, pos   []int64
}

// add adds the lines of o, unless it carries its one line in its own row
// (inlineLine).
func (t *itemRows) add(o inventory.Order) {
	if len(o.Items) == 1 {
		return
	}
	for i, l := range o.Items {
		t.order = append(t.order, o.ID)
		t.sku = append(t.sku, l.SKU)
		t.qty = append(t.qty, l.Qty)
		t.pos = append(t.pos, int64(i))
	}
}

func (t *itemRows) columns() []any { return []any{t.order, t.sku, t.qty, t.pos} }

const itemsInsert = "INSERT INTO order_items (order_id, sku, qty, position)"

// journalRows are rows of the journal (journalInsert's columns).
type journalRows struct {
	sale, event, typ, sku, order, user []string
	qty, at                            []int64
}

// add adds the journal rows of ev: one per line, item or restocked sku;
// one with sku "" for pause and resume.
func (t *journalRows) add(saleID string, ev inventory.Event) {
	row := func(sku, orderID, userID string, qty int64) {
		t.sale = append(t.sale, saleID)
		t.event = append(t.event, ev.ID)
		t.typ = append(t.typ, string(ev.Type))
		t.sku = append(t.sku, sku)
		t.order = append(t.order, orderID)
		t.user = append(t.user, userID)
		t.qty = append(t.qty, qty)
		t.at = append(t.at, ms(ev.At))
	}
	switch ev.Type {
	case inventory.EventBought, inventory.EventCancelled, inventory.EventPaid, inventory.EventExpired:
		for _, l := range ev.Order.Items {
			row(l.SKU, ev.Order.ID, ev.Order.UserID, l.Qty)
		}
	case inventory.EventCreated:
		for _, it := range ev.Sale.Items {
			row(it.SKU, "", "", it.Stock)
		}
	case inventory.EventRestocked, inventory.EventMoved:
		row(ev.SKU, "", "", ev.Qty)
	default:
		row("", "", "", 0)
	}
}

func (t *journalRows) len() int { return len(t.sale) }

// truncate keeps the first n rows.
func (t *journalRows) truncate(n int) {
	t.sale, t.event, t.typ, t.sku = t.sale[:n], t.event[:n], t.typ[:n], t.sku[:n]
	t.order, t.user, t.qty, t.at = t.order[:n], t.user[:n], t.qty[:n], t.at[:n]
}

func (t *journalRows) columns() []any {
	return []any{t.sale, t.event, t.typ, t.sku, t.order, t.user, t.qty, t.at}
}

// insertColumns inserts rows given one slice per column (each a []string
// or an []int64, all of one length) with "head <rows> tail", as
// insertRows does; got as there.
func (s *Store) insertColumns(ctx context.Context, q querier, head string, cols []any, tail string, got func(string)) error {
	if s.dialect != Postgres {
		return s.insertRows(ctx, q, head, len(cols), rowsOf(cols), tail, got)
	}
	if columnLen(cols[0]) == 0 {
		return nil
	}
	return s.insertQuery(ctx, q, unnestInsert(head, cols, tail), cols, got)
}

// unnestInsert returns PostgreSQL's "head SELECT * FROM unnest($1::text[],
// $2::bigint[], ...) tail" for cols (as insertColumns takes them): one text
// per table whatever the number of rows.
func unnestInsert(head string, cols []any, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(" SELECT * FROM unnest(")
	for c, col := range cols {
		if c > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(c + 1))
		if _, text := col.([]string); text {
			b.WriteString("::text[]")
		} else {
			b.WriteString("::bigint[]")
		}
	}
	b.WriteString(") ")
	b.WriteString(tail)
	return b.String()
}

func columnLen(col any) int {
	if c, ok := col.([]string); ok {
		return len(c)
	}
	return len(col.([]int64))
}

// rowsOf turns columns into rows of values, row after row.
func rowsOf(cols []any) []any {
	n := columnLen(cols[0])
	args := make([]any, 0, n*len(cols))
	for r := range n {
		for _, col := range cols {
			if c, ok := col.([]string); ok {
				args = append(args, c[r])
			} else {
				args = append(args, col.([]int64)[r])
			}
		}
	}
	return args
}
