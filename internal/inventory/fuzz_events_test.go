package inventory

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fuzz tests of the decoders of what Redis holds: stream events (read by
// the order pipeline) and order records (read by Order, Cancel and buy
// replays). Whatever the bytes, they decode or fail with ErrCorrupt; what
// the engine writes decodes to what it wrote.

// FuzzParseEvent: any stream entry either fails with ErrCorrupt or decodes
// to an event of a known type whose every number came from its field:
// bought and cancelled carry lines with valid skus and quantities >= 0,
// in the order of the "items" field; created carries items with stock
// >= -1; the time is the "at" field. Lines written back (formatLines)
// decode to the same lines.
func FuzzParseEvent(f *testing.F) {
	f.Add("bought", "1700000000000", "s1.01JD0000000000000000000000", "u1", "A=1,B=2", "k", "", "", "", "", "", "", "", "")
	f.Add("cancelled", "1700000000001", "s1.01JD0000000000000000000000", "u1", "A=1", "", "1700000000000", "", "", "", "", "", "", "")
	f.Add("created", "1", "", "", "A=100,B=-1", "", "", "", "", "", "2", "0", "0", "1")
	f.Add("restocked", "5", "", "", "", "", "", "A", "10", "12", "", "", "", "")
	f.Add("paused", "7", "", "", "", "", "", "", "", "", "", "", "", "")
	f.Add("bought", "x", "o", "u", "A=1", "", "", "", "", "", "", "", "", "")
	f.Add("bought", "1", "o", "u", "A=-1", "", "", "", "", "", "", "", "", "")
	f.Add("created", "1", "", "", "A=-2", "", "", "", "", "", "1", "0", "0", "0")
	f.Add("exploded", "1", "", "", "", "", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, typ, at, order, user, items, key, created, sku, qty, remaining, limit, start, end, paused string) {
		values := map[string]any{"type": typ, "at": at, "order": order, "user": user, "items": items, "key": key,
			"created": created, "sku": sku, "qty": qty, "remaining": remaining, "limit": limit, "start": start,
			"end": end, "paused": paused}
		ev, err := ParseEvent("s1", redis.XMessage{ID: "1-0", Values: values})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		ms, perr := strconv.ParseInt(at, 10, 64)
		if perr != nil || !ev.At.Equal(time.UnixMilli(ms)) || ev.SaleID != "s1" || ev.ID != "1-0" || string(ev.Type) != typ {
			t.Fatalf("at %q type %q decoded as %+v", at, typ, ev)
		}
		checkLines := func(lines []Line, min int64) {
			if len(lines) == 0 {
				t.Fatalf("no lines decoded from %q", items)
			}
			for _, l := range lines {
				if !ValidID(l.SKU) || l.Qty < min {
					t.Fatalf("items %q decoded to line %+v", items, l)
				}
			}
			if back, err := parseLines(formatLines(lines), min < 0); err != nil || !reflect.DeepEqual(back, lines) {
				t.Fatalf("lines %+v written back as %q decode as %+v, %v", lines, formatLines(lines), back, err)
			}
		}
		switch ev.Type {
		case EventBought, EventCancelled:
			checkLines(ev.Order.Items, 0)
			want := OrderPending
			if ev.Type == EventCancelled {
				want = OrderCancelled
			}
			if ev.Order.Status != want || ev.Order.ID != order || ev.Order.UserID != user || ev.Order.IdempotencyKey != key {
				t.Fatalf("order decoded as %+v", ev.Order)
			}
		case EventCreated:
			lines := make([]Line, len(ev.Sale.Items))
			for i, it := range ev.Sale.Items {
				lines[i] = Line{SKU: it.SKU, Qty: it.Stock}
			}
			checkLines(lines, Unlimited)
			if ev.Sale.Paused != (paused == "1") {
				t.Fatalf("paused %q decoded as %v", paused, ev.Sale.Paused)
			}
		case EventRestocked:
			q, err1 := strconv.ParseInt(qty, 10, 64)
			r, err2 := strconv.ParseInt(remaining, 10, 64)
			if err1 != nil || err2 != nil || ev.Qty != q || ev.Remaining != r || ev.SKU != sku {
				t.Fatalf("restock %q %q %q decoded as %+v", sku, qty, remaining, ev)
			}
		case EventPaused, EventResumed:
		default:
			t.Fatalf("unknown type %q accepted", ev.Type)
		}
	})
}

// FuzzParseBoughtEvent: any one-field bought entry (buy.lua's, "<order
// id>|<record>") either fails with ErrCorrupt or decodes to a pending order
// of the id before the first '|', whose record (the rest) decodes alike and
// whose time is the event's; with a "type" field it is read the old way.
func FuzzParseBoughtEvent(f *testing.F) {
	for _, v := range []string{"s1.01JD0000000000000000000000|p|u1|1700000000000|A=1,B=2|k", "o|p|u|1|A=1|",
		"o|c|u|1|A=1|", "|p|u|1|A=1|", "o|p|u|x|A=1|", "o|p|u|1|A=-1|", "o", "o|p|u|1|A=1|k|with|bars", ""} {
		f.Add(v, false)
	}
	f.Fuzz(func(t *testing.T, v string, typed bool) {
		values := map[string]any{"bought": v}
		if typed {
			values["type"] = "bought" // an old entry: no "at", no order
		}
		ev, err := ParseEvent("s1", redis.XMessage{ID: "1-0", Values: values})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if typed {
			t.Fatalf("an entry typed bought with no at decoded as %+v", ev)
		}
		id, rec, _ := strings.Cut(v, "|")
		want, err := decodeRecord(id, "s1", rec)
		if err != nil || ev.Type != EventBought || ev.ID != "1-0" || ev.SaleID != "s1" || id == "" ||
			!reflect.DeepEqual(ev.Order, want) || want.Status != OrderPending || !ev.At.Equal(want.CreatedAt) {
			t.Fatalf("bought %q decoded as %+v; the record decodes as %+v, %v", v, ev, want, err)
		}
	})
}

// FuzzEventRoundTrip: the events the scripts write (the fields of
// buy.lua's, cancel.lua's and create.lua's XADD) decode to the order or
// sale they were written for.
func FuzzEventRoundTrip(f *testing.F) {
	f.Add("u1", "A", int64(1), "B", int64(-1), "k", int64(1_700_000_000_000), int64(5), int64(0), int64(0), true)
	f.Add("user.2", "sku:1", int64(MaxQty), "sku-2", int64(7), "", int64(1), int64(1), int64(1_700_000_000_000), int64(1_800_000_000_000), false)
	f.Fuzz(func(t *testing.T, user, sku1 string, q1 int64, sku2 string, q2 int64, key string, ms, limit, start, end int64, paused bool) {
		if ValidateBuy("s1", user, []Line{{sku1, 1}, {sku2, 1}}, key) != nil || ms < 0 {
			return
		}
		// A buy's lines: quantities 1..MaxQty.
		lines := []Line{{sku1, 1 + abs(q1)%MaxQty}, {sku2, 1 + abs(q2)%MaxQty}}
		id := NewOrderID("s1")
		o := Order{ID: id, SaleID: "s1", UserID: user, Status: OrderPending, Items: lines, IdempotencyKey: key,
			CreatedAt: time.UnixMilli(ms).UTC()}
		bought := map[string]any{"type": "bought", "order": id, "user": user, "items": formatLines(lines), "key": key,
			"at": strconv.FormatInt(ms, 10)}
		ev, err := ParseEvent("s1", redis.XMessage{ID: "1-1", Values: bought})
		if err != nil || ev.Type != EventBought || !reflect.DeepEqual(ev.Order, o) {
			t.Fatalf("bought event of %+v decoded as %+v, %v", o, ev.Order, err)
		}
		// buy.lua's one-field entry: the order id and the record.
		packed := map[string]any{"bought": id + "|" + encodeRecord(o)}
		ev, err = ParseEvent("s1", redis.XMessage{ID: "1-4", Values: packed})
		if err != nil || ev.Type != EventBought || !reflect.DeepEqual(ev.Order, o) || !ev.At.Equal(o.CreatedAt) ||
			ev.ID != "1-4" || ev.SaleID != "s1" {
			t.Fatalf("one-field bought event of %+v decoded as %+v, %v", o, ev, err)
		}
		cancelled := map[string]any{"type": "cancelled", "order": id, "user": user, "items": formatLines(lines), "key": key,
			"at": strconv.FormatInt(ms+1, 10), "created": strconv.FormatInt(ms, 10)}
		o.Status = OrderCancelled
		ev, err = ParseEvent("s1", redis.XMessage{ID: "1-2", Values: cancelled})
		if err != nil || ev.Type != EventCancelled || !reflect.DeepEqual(ev.Order, o) || !ev.At.Equal(time.UnixMilli(ms+1)) {
			t.Fatalf("cancelled event of %+v decoded as %+v, %v", o, ev.Order, err)
		}
		rec := encodeRecord(o)
		if got, err := decodeRecord(id, "s1", rec); err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("record %q decoded as %+v, %v; want %+v", rec, got, err, o)
		}

		// A sale: stock -1 or 0..MaxQty, limit 1..MaxQty, bounds 0 or any time.
		items := []Item{{sku1, q1%(MaxQty+2) - 1}, {sku2, abs(q2) % (MaxQty + 1)}}
		if items[0].Stock < Unlimited {
			items[0].Stock = Unlimited
		}
		s := Sale{ID: "s1", PerUserLimit: 1 + abs(limit)%MaxQty, StartsAt: fromUnixMs(start), EndsAt: fromUnixMs(end),
			Paused: paused, Items: items}
		createdEv := map[string]any{"type": "created", "at": strconv.FormatInt(ms, 10), "items": formatItems(items),
			"limit": strconv.FormatInt(s.PerUserLimit, 10), "start": strconv.FormatInt(start, 10),
			"end": strconv.FormatInt(end, 10), "paused": flag(paused)}
		ev, err = ParseEvent("s1", redis.XMessage{ID: "1-3", Values: createdEv})
		if err != nil || ev.Type != EventCreated || !reflect.DeepEqual(ev.Sale, s) {
			t.Fatalf("created event of %+v decoded as %+v, %v", s, ev.Sale, err)
		}
	})
}

func abs(n int64) int64 {
	if n < 0 {
		return -(n + 1) // never overflows
	}
	return n
}

// FuzzDecodeRecord: any order record either fails with ErrCorrupt or
// decodes to an order whose lines have valid skus and quantities >= 0, and
// that encodes to a record decoding to the same order (a fixed point).
func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range []string{"p|u1|1700000000000|A=1,B=2|k", "c|u1|0|A=1|", "p|u1|1|A=1|key|with|bars",
		"x|u1|1|A=1|", "p|u1|-5|A=1|", "p|u1|1|A=-1|", "p|u1|1||", "p|u1|1|A=1", "", "p|u1|+7|A=01|k"} {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, rec string) {
		o, err := decodeRecord("s1.x", "s1", rec)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if o.ID != "s1.x" || o.SaleID != "s1" || o.Status != OrderPending && o.Status != OrderCancelled || len(o.Items) == 0 {
			t.Fatalf("record %q decoded as %+v", rec, o)
		}
		for _, l := range o.Items {
			if !ValidID(l.SKU) || l.Qty < 0 {
				t.Fatalf("record %q decoded with line %+v", rec, l)
			}
		}
		again, err := decodeRecord(o.ID, o.SaleID, encodeRecord(o))
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("record %q decoded as %+v, encoded as %q, decoded again as %+v, %v", rec, o, encodeRecord(o), again, err)
		}
	})
}
