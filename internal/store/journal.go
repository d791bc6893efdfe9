package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// JournalEntry is one row of the journal: one stock movement of one sku.
// Paused and resumed events have one row with SKU "" and Qty 0; a created
// event has one row per item with its initial stock (-1 unlimited).
type JournalEntry struct {
	SaleID  string
	EventID string // the stream entry id (an event whose id another event held: "<id>~<hash>", see journalOne)
	Type    inventory.EventType
	SKU     string
	OrderID string // bought and cancelled; "" otherwise
	UserID  string // bought and cancelled; "" otherwise
	Qty     int64
	At      time.Time // when the engine made the movement
}

// Journal lists the sale's journal rows: those of the journal table in the
// order they were written, and merged among them, by stream id (by time
// against a row of another id, such as degraded mode's), the rows of the
// bought events the sale's orders carry (boughtJournal), in stream order.
func (s *Store) Journal(ctx context.Context, saleID string) ([]JournalEntry, error) {
	read := func(query string, args ...any) ([]JournalEntry, error) {
		rows, err := s.query(ctx, s.db, query, args...)
		if err != nil {
			return nil, err
		}
		var entries []JournalEntry
		err = scanEach(rows, func() error {
			var e JournalEntry
			var at int64
			err := rows.Scan(&e.SaleID, &e.EventID, &e.Type, &e.SKU, &e.OrderID, &e.UserID, &e.Qty, &at)
			e.At = fromMs(at)
			entries = append(entries, e)
			return err
		})
		return entries, err
	}
	written, err := read(`SELECT sale_id, event_id, type, sku, order_id, user_id, qty, at
		FROM journal WHERE sale_id = ? ORDER BY id`, saleID)
	if err != nil {
		return nil, fmt.Errorf("store: journal of sale %s: %w", saleID, err)
	}
	carried, err := read(boughtJournal("?, l.event_id, '"+string(inventory.EventBought)+"', l.sku, l.order_id, l.user_id, l.qty, l.created_at", "1 = 1")+
		" ORDER BY l.created_at, l.order_id, l.position", append([]any{saleID}, twice(saleID)...)...)
	if err != nil {
		return nil, fmt.Errorf("store: journal of sale %s: %w", saleID, err)
	}
	slices.SortStableFunc(carried, func(a, b JournalEntry) int {
		switch {
		case journalBefore(a, b):
			return -1
		case journalBefore(b, a):
			return 1
		}
		return 0
	})
	entries := make([]JournalEntry, 0, len(written)+len(carried))
	for len(written) > 0 || len(carried) > 0 {
		if len(carried) > 0 && (len(written) == 0 || journalBefore(carried[0], written[0])) {
			entries, carried = append(entries, carried[0]), carried[1:]
		} else {
			entries, written = append(entries, written[0]), written[1:]
		}
	}
	return entries, nil
}

// journalBefore reports whether a is of an event before b's: by stream id
// if both have one (an id of its own counts as the one it was made from,
// see journalOne), else by time.
func journalBefore(a, b JournalEntry) bool {
	if ai, bi := streamIDOf(a.EventID), streamIDOf(b.EventID); validStreamID(ai) && validStreamID(bi) {
		return streamIDAfter(bi, ai)
	}
	return a.At.Before(b.At)
}

// DeadLetter is an event that could never be applied.
type DeadLetter struct {
	SaleID, EventID string
	Reason          string
	Payload         string // the stream entry's fields as a JSON object
	At              time.Time
}

// DeadLetter records an event that can never be applied: why, and the raw
// fields of its stream entry (stored as JSON). Recording the same (sale,
// event) again changes nothing: the first record stays.
func (s *Store) DeadLetter(ctx context.Context, saleID, eventID, reason string, fields map[string]any) error {
	payload, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("store: dead letter %s of sale %s: fields: %w", eventID, saleID, err)
	}
	_, err = s.exec(ctx, s.db, `INSERT INTO dead_letters (sale_id, event_id, reason, payload, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (sale_id, event_id) DO NOTHING`, saleID, eventID, reason, string(payload), time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("store: dead letter %s of sale %s: %w", eventID, saleID, err)
	}
	return nil
}

// DeadLetters lists the sale's dead letters, oldest first.
func (s *Store) DeadLetters(ctx context.Context, saleID string) ([]DeadLetter, error) {
	rows, err := s.query(ctx, s.db, `SELECT sale_id, event_id, reason, payload, at FROM dead_letters
		WHERE sale_id = ? ORDER BY at, event_id`, saleID)
	if err != nil {
		return nil, fmt.Errorf("store: dead letters of sale %s: %w", saleID, err)
	}
	var dls []DeadLetter
	err = scanEach(rows, func() error {
		var d DeadLetter
		var at int64
		err := rows.Scan(&d.SaleID, &d.EventID, &d.Reason, &d.Payload, &at)
		d.At = fromMs(at)
		dls = append(dls, d)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: dead letters of sale %s: %w", saleID, err)
	}
	return dls, nil
}

// AuditEntry is one operator action that changed something.
type AuditEntry struct {
	At        time.Time
	Action    string // "sale created", "restocked", "paused", ...
	SaleID    string
	Target    string         // a sku or an order id, if the action has one
	Detail    map[string]any // stored as a JSON object
	Remote    string         // the client's address
	RequestID string
}

// Audit records an operator's action. A zero At is set to now.
func (s *Store) Audit(ctx context.Context, e AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	detail := ""
	if len(e.Detail) > 0 {
		b, err := json.Marshal(e.Detail)
		if err != nil {
			return fmt.Errorf("store: audit %s: %w", e.Action, err)
		}
		detail = string(b)
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO admin_audit (at, action, sale_id, target, detail, remote, request_id)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, ms(e.At), e.Action, e.SaleID, e.Target, detail, truncate(e.Remote, 200), truncate(e.RequestID, 64))
	if err != nil {
		return fmt.Errorf("store: audit %s: %w", e.Action, err)
	}
	return nil
}

// AuditLog lists the audit entries of a sale ("" : of every sale), oldest first.
func (s *Store) AuditLog(ctx context.Context, saleID string) ([]AuditEntry, error) {
	where, args := "", []any(nil)
	if saleID != "" {
		where, args = "WHERE sale_id = ? ", []any{saleID}
	}
	rows, err := s.query(ctx, s.db, `SELECT at, action, sale_id, target, detail, remote, request_id FROM admin_audit `+where+`ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: audit log: %w", err)
	}
	var out []AuditEntry
	err = scanEach(rows, func() error {
		var e AuditEntry
		var at int64
		var detail string
		if err := rows.Scan(&at, &e.Action, &e.SaleID, &e.Target, &detail, &e.Remote, &e.RequestID); err != nil {
			return err
		}
		e.At = fromMs(at)
		if detail != "" {
			if err := json.Unmarshal([]byte(detail), &e.Detail); err != nil {
				return err
			}
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: audit log: %w", err)
	}
	return out, nil
}
