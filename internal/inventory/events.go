package inventory

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// EventType names a stock movement in a sale's event stream.
type EventType string

// The events the scripts append, each in the same script as the change it
// journals. A bought event is one field, "bought": "<order id>|<order
// record>" (the record as the orders hash holds it, see record.go: status
// "p", user, created (the event's time), lines, idempotency key), the
// cheapest entry for the stream to take, one per order; one whose buy
// spent a single-use token also has "tokens" (see spent.go). Fields of every
// other entry: "type" and "at" (unix ms) always; then
//
//	created:   items ("A=100,B=-1"), limit, start, end (unix ms, 0 none), paused ("1"/"0")
//	bought:    order, user, items ("A=1,B=2"), key (idempotency key or ""),
//	           as buy.lua wrote it before the one-field entry (a stream may
//	           still hold such entries; they decode alike; a reader older
//	           than the one-field entry fails on it, so readers upgrade first)
//	cancelled: order, user, items, key, created (the order's creation, unix ms)
//	restocked: sku, qty, remaining
//	moved:     sku, qty (negative out of the sale, positive into it), move
//	           (the move id), peer (the other sale), remaining (see Engine.Move)
//	paused, resumed: nothing more
//	paid:      order, user, items, key, created (as cancelled), ref (the
//	           payment ref): the order awaiting payment was paid (pay.lua)
//	expired:   order, user, items, key, created (as cancelled): the order
//	           was cancelled at its payment deadline (expire.lua)
//	closed:    start, end (unix ms): the sale's window as the close left it
//	           (end is the close's time; start is lowered below it for a
//	           sale closed before it started)
const (
	EventCreated   EventType = "created"
	EventBought    EventType = "bought"
	EventCancelled EventType = "cancelled"
	EventRestocked EventType = "restocked"
	EventMoved     EventType = "moved"
	EventPaused    EventType = "paused"
	EventResumed   EventType = "resumed"
)

// The events of the payment step (pay.go).
const (
	EventPaid    EventType = "paid"
	EventExpired EventType = "expired"
)

// EventClosed: Engine.Close ended the sale (see close.lua).
const EventClosed EventType = "closed"

// Event is one decoded entry of a sale's event stream.
type Event struct {
	ID     string // stream entry id
	SaleID string
	Type   EventType
	At     time.Time

	// bought, cancelled, paid and expired
	Order Order // Status is pending for bought and paid, cancelled for cancelled and expired

	// restocked and moved (Qty < 0: moved out of the sale)
	SKU       string
	Qty       int64
	Remaining int64
	// moved: the move's id and the other sale of it
	MoveID, Peer string

	// created: the definition with the initial stock of each item
	Sale Sale

	// bought: the single-use token the buy spent (BuyRequest.Token), kept
	// spent as long as the order (see spent.go); Token "" for none
	Spent SpentToken
}

// ParseEvent decodes one entry read from the stream at EventsKey(saleID)
// that holds one event. An entry of several orders ("orders", see
// ParseEntry) is an error: read a stream with ParseEntry.
func ParseEvent(saleID string, msg redis.XMessage) (Event, error) {
	if p, ok := packedOrders(msg); ok {
		if strings.IndexByte(p.lines, '\n') >= 0 {
			return Event{}, fmt.Errorf("%w: entry %s of sale %s holds %d orders (ParseEntry decodes it)",
				ErrSeveralEvents, msg.ID, saleID, strings.Count(p.lines, "\n")+1)
		}
		if err := p.check(saleID, msg.ID, p.lines); err != nil {
			return Event{}, err
		}
		return boughtSpending(saleID, msg, p.group+p.lines)
	}
	return parseOne(saleID, msg)
}

// boughtSpending decodes the one bought event of the entry msg (v its
// "<order id>|<record>") and the token it spent, if any.
func boughtSpending(saleID string, msg redis.XMessage, v string) (Event, error) {
	ev, err := parseBought(saleID, msg.ID, v)
	if err != nil {
		return Event{}, err
	}
	one := []Event{ev}
	if err := attachSpent(one, msg); err != nil {
		return Event{}, fmt.Errorf("event %s of sale %s: %w", msg.ID, saleID, err)
	}
	return one[0], nil
}

// HoldsOrders reports whether msg is a buy.lua call's entry of bought
// orders (field "orders", see ParseEntry) rather than an entry of one
// event.
func HoldsOrders(msg redis.XMessage) bool {
	_, ok := packedOrders(msg)
	return ok
}

// packed is the orders of a buy.lua call's entry of bought orders: lines
// "<order id>|<record>" joined by newlines (field "orders"), or, with
// byTail, lines "<tail>|<record>" of the orders of group (fields "lines"
// and "group": the text the call added to the group's value in the orders
// hash, see record.go).
type packed struct {
	lines, group string
	byTail       bool
}

// packedOrders returns the orders of a buy.lua call's entry of bought
// orders: its "lines" and "group" fields, or its "orders" field, in an
// entry without "type" (a typed entry is one event, whatever else it
// holds).
func packedOrders(msg redis.XMessage) (packed, bool) {
	if _, typed := msg.Values["type"]; typed {
		return packed{}, false
	}
	if v, ok := msg.Values[fieldLines]; ok {
		p := packed{byTail: true}
		p.lines, _ = v.(string)
		p.group, _ = msg.Values[fieldGroup].(string)
		return p, true
	}
	v, ok := msg.Values[fieldOrders]
	if !ok {
		return packed{}, false
	}
	p := packed{}
	p.lines, _ = v.(string)
	return p, true
}

// check reports a line of p that does not name its order: a line by tail
// needs a group and a tail of orderGroupTail characters (its order is then
// "<group><line>"; a line by id is "<order id>|<record>" as it is, and
// group is ""); id is its event's stream id.
func (p packed) check(saleID, id, line string) error {
	if !p.byTail {
		return nil
	}
	tail, _, ok := strings.Cut(line, "|")
	if !ok || len(tail) != orderGroupTail || p.group == "" {
		return fmt.Errorf("%w: event %s of sale %s: line %q of group %q", ErrCorrupt, id, saleID,
			truncate(line, 200), truncate(p.group, 100))
	}
	return nil
}

// ErrSeveralEvents: ParseEvent was handed an entry of several events.
var ErrSeveralEvents = errors.New("seckill: stream entry of several events")

// BadEvent is an event of an entry that does not decode: the id it has
// (its entry's, or an order's of an entry of several), its fields as an
// entry of its own (what a dead letter keeps), and why.
type BadEvent struct {
	ID     string
	Values map[string]any
	Err    error
}

// ParseEntry decodes one entry read from the stream at EventsKey(saleID)
// and appends its events to dst: one for every entry but a buy.lua call's
// entry of several orders (fields "group" and "lines": the orders' lines
// "<tail>|<order record>" joined by newlines, which no id, record or key
// contains, an order's id its group and its tail; or, written by a
// release before, or for orders of several groups, field "orders": the
// orders' "<order id>|<order record>" lines). Order
// k (from 0) of such an entry <ms>-<seq> is the event <ms>-<seq+k>: the
// script moved the stream's last id past them (XSETID), so no other entry
// ever has these ids. An event that does not decode is left out of dst and
// returned in bad (an order of an entry of several on its own: the others
// decode all the same).
func ParseEntry(dst []Event, saleID string, msg redis.XMessage) (events []Event, bad []BadEvent) {
	p, ok := packedOrders(msg)
	v := p.lines
	if !ok { // one event ("type" decides when there is one: an unknown one is corrupt)
		ev, err := parseOne(saleID, msg)
		if err != nil {
			return dst, []BadEvent{{ID: msg.ID, Values: msg.Values, Err: err}}
		}
		return append(dst, ev), nil
	}
	ms, seq, idOK := parseEntryID(msg.ID)
	start := len(dst)
	for k := uint64(0); ; k++ {
		line, rest, more := strings.Cut(v, "\n")
		id := msg.ID
		var err error
		if k > 0 {
			if !idOK || seq+k < seq {
				err = fmt.Errorf("%w: entry %s of sale %s: order %d has no stream id", ErrCorrupt, msg.ID, saleID, k)
			}
			id = strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+k, 10)
		}
		var ev Event
		order := p.group + line // "<order id>|<record>" (a line by tail after its group)
		if err == nil {
			err = p.check(saleID, id, line)
		}
		if err == nil {
			ev, err = parseBought(saleID, id, order)
		}
		if err != nil {
			values := map[string]any{fieldBought: order}
			if id, _, _ := strings.Cut(order, "|"); id != "" {
				if tl, ok := tokenLine(msg, id); ok { // the token it spent goes with it
					values[fieldTokens] = tl
				}
			}
			bad = append(bad, BadEvent{ID: id, Values: values, Err: err})
		} else {
			dst = append(dst, ev)
		}
		if !more {
			break
		}
		v = rest
	}
	// The tokens its orders spent: a field the engine writes right or not
	// at all, so a wrong one makes every order of the entry a dead letter.
	if err := attachSpent(dst[start:], msg); err != nil {
		for _, ev := range dst[start:] {
			bad = append(bad, BadEvent{ID: ev.ID, Values: OrderEntry(ev), Err: fmt.Errorf("event %s of sale %s: %w", ev.ID, saleID, err)})
		}
		dst = dst[:start]
	}
	return dst, bad
}

// ParseEntries decodes entries read from the stream at EventsKey(saleID),
// in order, as ParseEntry does; the first event that does not decode is
// the error.
func ParseEntries(saleID string, msgs []redis.XMessage) ([]Event, error) {
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		var bad []BadEvent
		if out, bad = ParseEntry(out, saleID, m); len(bad) > 0 {
			return out, bad[0].Err
		}
	}
	return out, nil
}

// parseEntryID splits a stream entry id "<ms>-<seq>".
func parseEntryID(id string) (ms, seq uint64, ok bool) {
	m, q, found := strings.Cut(id, "-")
	var err1, err2 error
	ms, err1 = strconv.ParseUint(m, 10, 64)
	seq, err2 = strconv.ParseUint(q, 10, 64)
	return ms, seq, found && err1 == nil && err2 == nil
}

// parseOne decodes an entry of one event.
func parseOne(saleID string, msg redis.XMessage) (Event, error) {
	get := func(f string) string { s, _ := msg.Values[f].(string); return s }
	if packed, ok := msg.Values[fieldBought]; ok {
		if _, typed := msg.Values["type"]; !typed {
			v, _ := packed.(string)
			return boughtSpending(saleID, msg, v)
		}
	}
	num := func(f string) (int64, error) {
		n, err := strconv.ParseInt(get(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: event %s of sale %s: field %q: %q", ErrCorrupt, msg.ID, saleID, f, get(f))
		}
		return n, nil
	}
	at, err := num("at")
	if err != nil {
		return Event{}, err
	}
	ev := Event{ID: msg.ID, SaleID: saleID, Type: EventType(get("type")), At: time.UnixMilli(at).UTC()}
	switch ev.Type {
	case EventBought, EventCancelled, EventPaid, EventExpired:
		lines, err := parseLines(get("items"), false)
		if err != nil {
			return Event{}, fmt.Errorf("%w: event %s of sale %s: %v", ErrCorrupt, msg.ID, saleID, err)
		}
		ev.Order = Order{ID: get("order"), SaleID: saleID, UserID: get("user"), Items: lines,
			IdempotencyKey: get("key"), CreatedAt: ev.At, Status: OrderPending}
		if ev.Type != EventBought {
			created, err := num("created")
			if err != nil {
				return Event{}, err
			}
			ev.Order.CreatedAt = time.UnixMilli(created).UTC()
		}
		switch ev.Type {
		case EventCancelled:
			ev.Order.Status = OrderCancelled
		case EventExpired:
			ev.Order.Status, ev.Order.Payment = OrderCancelled, PaymentExpired
		case EventPaid:
			ev.Order.Payment, ev.Order.PaymentRef = PaymentPaid, get("ref")
			if ValidatePaymentRef(ev.Order.PaymentRef) != nil {
				return Event{}, fmt.Errorf("%w: event %s of sale %s: ref %q", ErrCorrupt, msg.ID, saleID, truncate(ev.Order.PaymentRef, 200))
			}
		}
	case EventRestocked, EventMoved:
		ev.SKU = get("sku")
		ev.MoveID, ev.Peer = get("move"), get("peer")
		if ev.Qty, err = num("qty"); err != nil {
			return Event{}, err
		}
		if ev.Remaining, err = num("remaining"); err != nil {
			return Event{}, err
		}
	case EventCreated:
		items, err := parseLines(get("items"), true)
		if err != nil {
			return Event{}, fmt.Errorf("%w: event %s of sale %s: %v", ErrCorrupt, msg.ID, saleID, err)
		}
		var limit, start, end int64
		if limit, err = num("limit"); err == nil {
			if start, err = num("start"); err == nil {
				end, err = num("end")
			}
		}
		if err != nil {
			return Event{}, err
		}
		ev.Sale = Sale{ID: saleID, PerUserLimit: limit, StartsAt: fromUnixMs(start), EndsAt: fromUnixMs(end),
			Paused: get("paused") == "1"}
		if get("pay") != "" {
			pay, err := num("pay")
			if err != nil || pay < 0 {
				return Event{}, fmt.Errorf("%w: event %s of sale %s: field \"pay\": %q", ErrCorrupt, msg.ID, saleID, get("pay"))
			}
			ev.Sale.PaymentTimeout = time.Duration(pay) * time.Millisecond
		}
		for _, l := range items {
			ev.Sale.Items = append(ev.Sale.Items, Item{SKU: l.SKU, Stock: l.Qty})
		}
	case EventPaused, EventResumed:
	case EventClosed:
		start, err := num("start")
		if err != nil {
			return Event{}, err
		}
		end, err := num("end")
		if err != nil {
			return Event{}, err
		}
		ev.Sale = Sale{ID: saleID, StartsAt: fromUnixMs(start), EndsAt: fromUnixMs(end)}
	default:
		return Event{}, fmt.Errorf("%w: event %s of sale %s: unknown type %q", ErrCorrupt, msg.ID, saleID, ev.Type)
	}
	return ev, nil
}

// fieldBought is the one field of a bought event; fieldOrders the one
// field of a buy.lua call's entry of several by order id, fieldLines and
// fieldGroup the two of one by tail (see ParseEntry).
const (
	fieldBought = "bought"
	fieldOrders = "orders"
	fieldLines  = "lines"
	fieldGroup  = "group"
)

// OrderEntry is the fields of a bought event as an entry of its own (field
// "bought", and "tokens" for an order that spent a token, see spent.go):
// what a dead letter of one order of an entry of several keeps, so that
// replayed it stores the order with its token spent.
func OrderEntry(ev Event) map[string]any {
	m := map[string]any{fieldBought: ev.Order.ID + "|" + encodeRecord(ev.Order)}
	if t := ev.Spent; t.Token != "" {
		m[fieldTokens] = ev.Order.ID + "|" + t.Token + "|" + strconv.FormatInt(t.Until.UnixMilli(), 10)
	}
	return m
}

// tokenLine returns the line of msg's "tokens" that names orderID.
func tokenLine(msg redis.XMessage, orderID string) (string, bool) {
	v, ok := msg.Values[fieldTokens].(string)
	if !ok {
		return "", false
	}
	for line := range strings.SplitSeq(v, "\n") {
		if id, _, _ := strings.Cut(line, "|"); id == orderID {
			return line, true
		}
	}
	return "", false
}

// parseBought decodes a bought event's one field: "<order id>|<record>".
func parseBought(saleID, id string, v string) (Event, error) {
	orderID, rec, ok := strings.Cut(v, "|")
	if !ok || orderID == "" {
		return Event{}, fmt.Errorf("%w: event %s of sale %s: bought %q", ErrCorrupt, id, saleID, truncate(v, 200))
	}
	o, err := decodeRecord(orderID, saleID, rec)
	if err != nil {
		return Event{}, fmt.Errorf("event %s of sale %s: %w", id, saleID, err)
	}
	if o.Status != OrderPending {
		return Event{}, fmt.Errorf("%w: event %s of sale %s: bought %q is not pending", ErrCorrupt, id, saleID, truncate(v, 200))
	}
	return Event{ID: id, SaleID: saleID, Type: EventBought, At: o.CreatedAt, Order: o}, nil
}

// CompareEventIDs orders stream entry ids "<ms>-<seq>": -1, 0 or 1 as a
// is before, the same as or after b. "" and ids that do not parse count
// as 0-0, before every id Redis generates.
func CompareEventIDs(a, b string) int {
	am, as := SplitEventID(a)
	bm, bs := SplitEventID(b)
	if am != bm {
		return cmp.Compare(am, bm)
	}
	return cmp.Compare(as, bs)
}

// SplitEventID returns the two parts of a stream entry id "<ms>-<seq>"
// (0 for a part that does not parse).
func SplitEventID(id string) (ms, seq uint64) {
	ms, seq, _ = parseEntryID(id)
	return ms, seq
}
