package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/seckill/seckill/internal/inventory"
)

// ErrPermanent matches the error of Apply for an event that can never be
// written: retrying cannot help, so the consumer should dead-letter it (see
// PermanentError) and apply the rest of its batch.
var ErrPermanent = errors.New("store: event can never be applied")

// PermanentError names the event Apply refused and why. It matches
// ErrPermanent. Apply refuses the whole batch before writing anything.
type PermanentError struct {
	SaleID  string
	EventID string
	Reason  string
}

// Error names the event and the reason.
func (e *PermanentError) Error() string {
	return fmt.Sprintf("store: event %s can never be applied: %s", e.EventID, e.Reason)
}

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Apply writes a batch of events of one sale, in order, in one transaction,
// idempotently: applying events again (a consumer crashed after the commit,
// before it acknowledged them) changes nothing.
//
// Each event gets its journal rows (one per sku it moves; the journal's
// unique key is (sale, event id, sku); an event whose id another event's
// rows hold gets an id of its own, see journalOne); its effect is applied
// only if those rows are new. A bought event's rows are its order's row
// when the order is new (orders.event_id, see boughtJournal), and rows in
// journal, each only if new, when the order was there already — see
// applyBought:
//
//   - created: inserts the sale and its items if the sale has no row (a sale
//     created through the library rather than the service), counting in
//     restocks of it applied before.
//   - bought: inserts the order as confirmed, with its items; an order that
//     is already there (cancelled by an event applied earlier) stays as is.
//     An order handed over as of unknown outcome (MarkUnsure) goes in
//     cancelled: voided, the database sold its units meanwhile.
//   - cancelled: marks the order cancelled, or inserts it cancelled if its
//     bought event has not been applied yet.
//   - restocked: adds the units to the item's stocked total.
//   - moved: adds the units (negative: moved out) to the item's stocked
//     total, once per move and sale: not if an instance handed the half
//     over already (AdoptMoves).
//   - paid: marks the order paid with its ref (inserting it, confirmed, if
//     its bought event has not been applied yet); expired: as cancelled,
//     and marks the order's payment expired (see payments.go).
//   - paused, resumed: sets the sale's paused flag, unless a pause or
//     resume later in the stream set it already (a crashed consumer's
//     entries are reclaimed after later ones are applied): state changes
//     take effect in stream order.
//
// Runs of consecutive bought events are written with a few multi-row
// statements, whatever their length.
//
// An event the engine could not have written (it fails the engine's own
// validation, or lacks a stream id, or belongs to another sale) can never be
// applied: Apply writes nothing and returns a *PermanentError (matching
// ErrPermanent) naming the first such event. An invalid saleID is an error
// matching inventory.ErrInvalid. Any other error is the database's (or the
// context's), wrapped: retry.
func (s *Store) Apply(ctx context.Context, saleID string, events []inventory.Event) error {
	if err := checkSale(saleID, events); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	if err := s.applyInTx(ctx, []SaleEvents{{SaleID: saleID, Events: events}}); err != nil {
		return fmt.Errorf("store: apply %d events of sale %s: %w", len(events), saleID, err)
	}
	return nil
}

// checkSale returns the error Apply refuses the events of saleID with, or nil.
func checkSale(saleID string, events []inventory.Event) error {
	if !inventory.ValidID(saleID) {
		return &inventory.InvalidError{Field: "sale", Reason: fmt.Sprintf("%q is not a sale id", truncate(saleID, 80))}
	}
	for _, ev := range events {
		if reason := checkEvent(saleID, ev); reason != "" {
			return &PermanentError{SaleID: saleID, EventID: ev.ID, Reason: reason}
		}
	}
	return nil
}

// checkEvent returns why ev can never be applied, or "". The rule: an event
// must be one the engine could have written, checked with the engine's own
// validation. Everything that passes fits both databases, and a snapshot
// made of such events is one the engine accepts when it rebuilds.
func checkEvent(saleID string, ev inventory.Event) string {
	if !validStreamID(ev.ID) {
		return fmt.Sprintf("stream id %q is not <ms>-<seq>", truncate(ev.ID, 80))
	}
	if ev.SaleID != "" && ev.SaleID != saleID {
		return fmt.Sprintf("is an event of sale %q", truncate(ev.SaleID, 80))
	}
	switch ev.Type {
	case inventory.EventBought, inventory.EventCancelled, inventory.EventPaid, inventory.EventExpired:
		o := ev.Order
		if err := inventory.ValidateBuy(saleID, o.UserID, o.Items, o.IdempotencyKey); err != nil {
			return err.Error()
		}
		if sale, err := inventory.SaleOfOrder(o.ID); err != nil || sale != saleID {
			return fmt.Sprintf("%q is not an order id of sale %s", truncate(o.ID, 80), saleID)
		}
		if t := ev.Spent; t.Token != "" && (ev.Type != inventory.EventBought || !inventory.ValidID(t.Token) || t.OrderID != o.ID || t.UserID != o.UserID) {
			return fmt.Sprintf("spent token %q", truncate(t.Token, 80))
		}
	case inventory.EventRestocked:
		if !inventory.ValidID(ev.SKU) {
			return fmt.Sprintf("sku %q is not an id", truncate(ev.SKU, 80))
		}
		if ev.Qty < 1 || ev.Qty > inventory.MaxQty {
			return fmt.Sprintf("restock of %d units", ev.Qty)
		}
	case inventory.EventMoved:
		if !inventory.ValidID(ev.SKU) {
			return fmt.Sprintf("sku %q is not an id", truncate(ev.SKU, 80))
		}
		if ev.Qty == 0 || ev.Qty < -inventory.MaxQty || ev.Qty > inventory.MaxQty {
			return fmt.Sprintf("move of %d units", ev.Qty)
		}
		if !inventory.ValidID(ev.Peer) || ev.Peer == saleID {
			return fmt.Sprintf("move to or from sale %q", truncate(ev.Peer, 80))
		}
		if ev.MoveID == "" || len(ev.MoveID) > 64 || strings.ContainsAny(ev.MoveID, "|\x00") {
			return fmt.Sprintf("move id %q", truncate(ev.MoveID, 80))
		}
	case inventory.EventCreated:
		sale := ev.Sale
		if sale.ID != "" && sale.ID != saleID {
			return fmt.Sprintf("creates sale %q", truncate(sale.ID, 80))
		}
		sale.ID = saleID
		if err := inventory.ValidateSale(sale); err != nil {
			return err.Error()
		}
	case inventory.EventPaused, inventory.EventResumed:
	case inventory.EventClosed:
		return checkClosed(ev)
	default:
		return fmt.Sprintf("unknown type %q", truncate(string(ev.Type), 80))
	}
	return ""
}

// validStreamID reports whether id looks like a Redis stream entry id.
func validStreamID(id string) bool {
	msPart, seq, ok := strings.Cut(id, "-")
	return ok && digits(msPart) && digits(seq)
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

const journalInsert = "INSERT INTO journal (sale_id, event_id, type, sku, order_id, user_id, qty, at)"

// journal inserts the journal rows of events and returns the ids of the
// events whose rows were new: the events not applied before.
func (s *Store) journal(ctx context.Context, tx *sql.Tx, saleID string, events []inventory.Event) (map[string]bool, error) {
	var args []any
	for _, ev := range events {
		args = appendJournalRows(args, saleID, ev)
	}
	fresh := make(map[string]bool, len(events))
	err := s.insertRows(ctx, tx, journalInsert, 8, args,
		"ON CONFLICT (sale_id, event_id, sku) DO NOTHING RETURNING event_id",
		func(id string) { fresh[id] = true })
	return fresh, err
}

// journalOne writes the journal rows of ev, an event that is not a bought
// event, and reports whether they are new: ev was not applied before.
//
// The journal tells events apart by stream id, and one id can name two
// events of a sale: a replica promoted on a clock behind the old master's
// ids hands out again the ids of events the old master wrote after the
// replica's last, and the repair's floor (the newest id the database
// holds) does not cover those the database gets only after the repair read
// it (a consumer's write of a batch it read from the old master that lands
// late: a slow transaction, a paused process). So when rows of ev's id
// are there already, they are compared with ev's own: the same rows are a
// replay; rows of another event mean ev is a new event under a taken id,
// and its rows go in under an id of its own (collisionID) instead, which a
// replay of ev finds again.
func (s *Store) journalOne(ctx context.Context, tx *sql.Tx, saleID string, ev inventory.Event) (bool, error) {
	args := appendJournalRows(nil, saleID, ev)
	n := len(args) / 8
	var fresh []string // skus whose rows went in now
	err := s.insertRows(ctx, tx, journalInsert, 8, args,
		"ON CONFLICT (sale_id, event_id, sku) DO NOTHING RETURNING sku", func(sku string) { fresh = append(fresh, sku) })
	if err != nil || len(fresh) == n {
		return err == nil, err
	}
	rows, err := s.query(ctx, tx, "SELECT sku, type, order_id, user_id, qty, at FROM journal WHERE sale_id = ? AND event_id = ?", saleID, ev.ID)
	if err != nil {
		return false, err
	}
	held := map[string][5]any{} // sku -> the row under ev.ID
	err = scanEach(rows, func() error {
		var sku, typ, order, user string
		var qty, at int64
		err := rows.Scan(&sku, &typ, &order, &user, &qty, &at)
		held[sku] = [5]any{typ, order, user, qty, at}
		return err
	})
	if err != nil {
		return false, err
	}
	same := len(fresh) == 0
	for i := 0; same && i < n; i++ {
		r := args[8*i : 8*i+8] // sale, event, type, sku, order, user, qty, at
		same = held[r[3].(string)] == [5]any{r[2], r[4], r[5], r[6], r[7]}
	}
	if same {
		return false, nil // applied before
	}
	// Another event holds the id: ev's rows go under an id of its own.
	for _, sku := range fresh {
		if _, err := s.exec(ctx, tx, "DELETE FROM journal WHERE sale_id = ? AND event_id = ? AND sku = ?", saleID, ev.ID, sku); err != nil {
			return false, err
		}
	}
	own := ev
	own.ID = collisionID(ev.ID, args)
	got := false
	err = s.insertRows(ctx, tx, journalInsert, 8, appendJournalRows(nil, saleID, own),
		"ON CONFLICT (sale_id, event_id, sku) DO NOTHING RETURNING sku", func(string) { got = true })
	return got, err
}

// collisionID is the journal's id of an event whose stream id another
// event of its sale holds (see journalOne): the stream id, "~", and a hash
// of the event's journal rows. It is never a stream id: the floor of a
// rebuild or a repair (newestEvent) is the stream id, which the other
// event's rows hold.
func collisionID(id string, rows []any) string {
	h := fnv.New64a()
	for i, v := range rows {
		if i%8 != 1 { // not the event id
			fmt.Fprint(h, v, "\x00")
		}
	}
	return fmt.Sprintf("%s~%016x", id, h.Sum64())
}

// streamIDOf is the stream id of a journal event id: the id itself, or the
// stream id an id of its own was made from (collisionID).
func streamIDOf(eventID string) string {
	id, _, _ := strings.Cut(eventID, "~")
	return id
}

// appendJournalRows appends the journal rows of ev (8 values each) to args
// (see journalRows.add).
func appendJournalRows(args []any, saleID string, ev inventory.Event) []any {
	var j journalRows
	j.add(saleID, ev)
	return append(args, rowsOf(j.columns())...)
}

// applyBought applies runs of bought events (each of one sale) with a few
// multi-row statements, whatever their number. The order rows go first,
// each with its bought event's id (orders.event_id): the order row is the
// event's journal rows (boughtJournal), and the orders that are new are
// the events not applied before, as orders are never deleted. Those get
// their lines with a plain insert (nothing of them can be there yet), and
// nothing in journal. An order that was there already (its cancel was
// applied first, or an instance handed it over, or it was stored before
// migration 015) keeps its row and lines; then its run's journal rows are
// written in journal, each only if new, in stream order, but for the
// events whose order carries them.
//
// With optimistic, every order is taken to be new and goes in with a plain
// insert: an order that is there already fails the transaction (see
// applyInTx).
func (s *Store) applyBought(ctx context.Context, tx *sql.Tx, runs []SaleEvents, optimistic bool) error {
	var orders orderRows
	for _, r := range runs {
		for _, ev := range r.Events {
			orders.add(r.SaleID, ev)
		}
	}
	inserted := make(map[string]bool, len(orders.id))
	tail, got := "ON CONFLICT (id) DO NOTHING RETURNING id", func(id string) { inserted[id] = true }
	if optimistic {
		tail, got = "", nil
		for _, id := range orders.id {
			inserted[id] = true
		}
	}
	if err := s.insertColumns(ctx, tx, ordersInsert, orders.columns(), tail, got); err != nil {
		return err
	}
	// The tokens the buys spent, whether their orders are new or not (an
	// instance handed an order over before its event arrived).
	var spent spentRows
	for _, r := range runs {
		for _, ev := range r.Events {
			spent.add(r.SaleID, ev.Spent)
		}
	}
	if err := s.insertSpent(ctx, tx, &spent); err != nil {
		return err
	}
	var items itemRows
	var known []SaleEvents // runs with an order that was there before (or twice)
	for _, r := range runs {
		before := false
		for _, ev := range r.Events {
			if inserted[ev.Order.ID] {
				delete(inserted, ev.Order.ID) // once, should the batch hold the event twice
				items.add(ev.Order)
			} else {
				before = true
			}
		}
		if before {
			known = append(known, r)
		}
	}
	if err := s.insertColumns(ctx, tx, itemsInsert, items.columns(), "", nil); err != nil {
		return err
	}
	for _, r := range known {
		evs, err := s.notCarried(ctx, tx, r.Events)
		if err != nil {
			return err
		}
		if _, err := s.journal(ctx, tx, r.SaleID, evs); err != nil {
			return err
		}
	}
	return nil
}

// notCarried returns the bought events of events whose order's row does
// not carry their journal rows (its event_id is not theirs), in order.
func (s *Store) notCarried(ctx context.Context, tx *sql.Tx, events []inventory.Event) ([]inventory.Event, error) {
	carried := map[string]string{} // order id -> event id
	for chunk := range slices.Chunk(events, s.maxParams) {
		args := make([]any, len(chunk))
		for i, ev := range chunk {
			args[i] = ev.Order.ID
		}
		rows, err := s.query(ctx, tx, "SELECT id, event_id FROM orders WHERE id IN (?"+strings.Repeat(", ?", len(chunk)-1)+")", args...)
		if err != nil {
			return nil, err
		}
		if err := scanEach(rows, func() error {
			var id, ev string
			err := rows.Scan(&id, &ev)
			carried[id] = ev
			return err
		}); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(slices.Clone(events), func(ev inventory.Event) bool { return carried[ev.Order.ID] == ev.ID }), nil
}

// appendOrderItems appends the order_items rows of o (4 values each).
func appendOrderItems(args []any, o inventory.Order) []any {
	var t itemRows
	t.add(o)
	return append(args, rowsOf(t.columns())...)
}

// insertOrderItems inserts order lines; lines already there stay as they are.
func (s *Store) insertOrderItems(ctx context.Context, tx *sql.Tx, items []any) error {
	return s.insertRows(ctx, tx, itemsInsert, 4, items, "ON CONFLICT (order_id, sku) DO NOTHING", nil)
}

// applyOne applies one event that is not a bought event.
func (s *Store) applyOne(ctx context.Context, tx *sql.Tx, saleID string, ev inventory.Event) error {
	fresh, err := s.journalOne(ctx, tx, saleID, ev)
	if err != nil || !fresh {
		return err
	}
	switch ev.Type {
	case inventory.EventCreated:
		return s.applyCreated(ctx, tx, saleID, ev)
	case inventory.EventCancelled:
		o := ev.Order
		// The order may not be here yet: its bought event can come later when
		// a crashed consumer's entries are reclaimed. Then it goes in
		// cancelled, and that bought event will leave it so.
		sku, qty := inlineLine(o)
		_, err := s.exec(ctx, tx, `INSERT INTO orders (id, sale_id, user_id, status, idempotency_key, created_at, cancelled_at, sku, qty)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, cancelled_at = excluded.cancelled_at`,
			o.ID, saleID, o.UserID, string(inventory.OrderCancelled), o.IdempotencyKey, ms(o.CreatedAt), ms(ev.At), sku, qty)
		if err != nil {
			return err
		}
		if err := s.dropVoid(ctx, tx, saleID, o.ID); err != nil { // the buyer's cancel gives the units back now
			return err
		}
		return s.insertOrderItems(ctx, tx, appendOrderItems(nil, o))
	case inventory.EventRestocked:
		return s.restock(ctx, tx, saleID, ev.SKU, ev.Qty)
	case inventory.EventMoved:
		_, err := s.applyMove(ctx, tx, inventory.MoveHalf{SaleID: saleID, Move: inventory.Move{ID: ev.MoveID, Peer: ev.Peer, SKU: ev.SKU, Units: ev.Qty}})
		return err
	case inventory.EventPaused, inventory.EventResumed:
		return s.applyPause(ctx, tx, saleID, ev.ID, ev.Type == inventory.EventPaused)
	case inventory.EventPaid, inventory.EventExpired:
		return s.applyPayment(ctx, tx, saleID, ev)
	case inventory.EventClosed:
		return s.applyClosed(ctx, tx, saleID, ms(ev.Sale.EndsAt))
	}
	return nil
}

// applyPause sets the sale's paused flag from the pause or resume event
// eventID, unless the flag was set by a later one. A sale with no row yet
// gets it from its created event (applyCreated).
func (s *Store) applyPause(ctx context.Context, tx *sql.Tx, saleID, eventID string, paused bool) error {
	var last string
	err := s.queryRow(ctx, tx, "SELECT paused_event FROM sales WHERE id = ?"+s.forUpdate(), saleID).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !streamIDAfter(eventID, last) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = s.exec(ctx, tx, "UPDATE sales SET paused = ?, paused_event = ? WHERE id = ?", flag(paused), eventID, saleID)
	return err
}

// streamIDAfter reports whether stream id a comes after b ("" is before
// every id). Both are "<ms>-<seq>" of digits (validStreamID), compared as
// numbers of any length.
func streamIDAfter(a, b string) bool {
	if b == "" {
		return true
	}
	num := func(x, y string) int { // compares decimal numbers
		x, y = strings.TrimLeft(x, "0"), strings.TrimLeft(y, "0")
		if len(x) != len(y) {
			return len(x) - len(y)
		}
		return strings.Compare(x, y)
	}
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if c := num(am, bm); c != 0 {
		return c > 0
	}
	return num(as, bs) > 0
}

// applyCreated inserts a sale from its created event unless the sale has a
// row already (created through the service, whose row also carries the
// service's settings).
func (s *Store) applyCreated(ctx context.Context, tx *sql.Tx, saleID string, ev inventory.Event) error {
	sale := Sale{Sale: ev.Sale, CreatedAt: ev.At}
	sale.ID = saleID
	if sale.PerUserLimit == 0 {
		sale.PerUserLimit = 1
	}
	created, err := s.insertSale(ctx, tx, sale)
	if err != nil || !created {
		return err
	}
	// Restocks and moves of this sale journaled before its created event (entries
	// reclaimed out of order) found no item to add to: add them now.
	rows, err := s.query(ctx, tx, `SELECT sku, CAST(SUM(qty) AS BIGINT) FROM journal
		WHERE sale_id = ? AND type IN (?, ?) GROUP BY sku`, saleID, string(inventory.EventRestocked), string(inventory.EventMoved))
	if err != nil {
		return err
	}
	var early []inventory.Item
	err = scanEach(rows, func() error {
		var it inventory.Item
		err := rows.Scan(&it.SKU, &it.Stock)
		early = append(early, it)
		return err
	})
	if err != nil {
		return err
	}
	for _, it := range early {
		if err := s.restock(ctx, tx, saleID, it.SKU, it.Stock); err != nil {
			return err
		}
	}
	if err := s.applyEarlyClose(ctx, tx, saleID); err != nil {
		return err
	}
	// Likewise pauses and resumes: the newest of them sets the flag.
	rows, err = s.query(ctx, tx, "SELECT event_id, type FROM journal WHERE sale_id = ? AND type IN (?, ?)",
		saleID, string(inventory.EventPaused), string(inventory.EventResumed))
	if err != nil {
		return err
	}
	var newest, kind string
	err = scanEach(rows, func() error {
		var id, typ string
		err := rows.Scan(&id, &typ)
		if id = streamIDOf(id); err == nil && streamIDAfter(id, newest) {
			newest, kind = id, typ
		}
		return err
	})
	if err != nil || newest == "" {
		return err
	}
	return s.applyPause(ctx, tx, saleID, newest, kind == string(inventory.EventPaused))
}

// restock adds qty units (negative: takes them) to a limited item's stocked total.
func (s *Store) restock(ctx context.Context, tx *sql.Tx, saleID, sku string, qty int64) error {
	_, err := s.exec(ctx, tx, "UPDATE sale_items SET stocked = stocked + ? WHERE sale_id = ? AND sku = ? AND stocked <> -1",
		qty, saleID, sku)
	return err
}
