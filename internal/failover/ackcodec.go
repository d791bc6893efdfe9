package failover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// The ring's encoding of an order (ackRing): its fields in declaration
// order, each string as a uvarint length and its bytes, Items as a uvarint
// count plus one (0: nil) followed by each line's SKU and its Qty as a
// varint, each time as its length (one byte, a uvarint below 128) and time.Time's
// binary form. An order whose buy spent a purchase token has the token
// after it (appendSpent): a string and its time (until), nothing for the
// others. Only this process reads it back, so it has no version.

// errBadRecord is a ring record that does not decode.
var errBadRecord = errors.New("failover: malformed record in the ring of acknowledged orders")

// appendOrder appends o's encoding to b.
func appendOrder(b []byte, o inventory.Order) []byte {
	b = appendString(b, o.ID)
	b = appendString(b, o.SaleID)
	b = appendString(b, o.UserID)
	b = appendString(b, string(o.Status))
	if o.Items == nil {
		b = binary.AppendUvarint(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(o.Items))+1)
		for _, l := range o.Items {
			b = appendString(b, l.SKU)
			b = binary.AppendVarint(b, l.Qty)
		}
	}
	b = appendString(b, o.IdempotencyKey)
	b = appendTime(b, o.CreatedAt)
	b = appendString(b, string(o.Payment))
	b = appendTime(b, o.PayBy)
	return appendString(b, o.PaymentRef)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	at := len(b)
	b = append(b, 0) // the length, one byte: the binary form has 15 or 16
	out, err := t.AppendBinary(b)
	if err != nil {
		// Only a zone offset that is not a whole minute fails, which no
		// time this service makes has; keep the instant, in UTC.
		out, _ = t.UTC().AppendBinary(b)
	}
	out[at] = byte(len(out) - at - 1)
	return out
}

// appendSpent appends, after its order's encoding, the token the order's
// buy spent.
func appendSpent(b []byte, t inventory.SpentToken) []byte {
	b = appendString(b, t.Token)
	return appendTime(b, t.Until)
}

// decodeOrder is appendOrder's inverse (a token after it is left aside).
func decodeOrder(b []byte) (inventory.Order, error) {
	o, _, err := decodeAck(b)
	return o, err
}

// decodeAck decodes a record of the ring: an order, and the token its buy
// spent (appendSpent) if the record has one (Token "" if not).
func decodeAck(b []byte) (inventory.Order, inventory.SpentToken, error) {
	d := decoder{b: b}
	var o inventory.Order
	o.ID = d.string()
	o.SaleID = d.string()
	o.UserID = d.string()
	o.Status = inventory.OrderStatus(d.string())
	if n := d.uvarint(); n > 0 && d.err == nil {
		if n-1 > uint64(len(d.b)) { // each line takes two bytes at least
			return inventory.Order{}, inventory.SpentToken{}, fmt.Errorf("%w: %d lines in %d bytes", errBadRecord, n-1, len(d.b))
		}
		o.Items = make([]inventory.Line, n-1)
		for i := range o.Items {
			o.Items[i].SKU = d.string()
			o.Items[i].Qty = d.varint()
		}
	}
	o.IdempotencyKey = d.string()
	o.CreatedAt = d.time()
	o.Payment = inventory.PaymentStatus(d.string())
	o.PayBy = d.time()
	o.PaymentRef = d.string()
	var t inventory.SpentToken
	if d.err == nil && len(d.b) > 0 {
		t = inventory.SpentToken{Token: d.string(), UserID: o.UserID, OrderID: o.ID}
		t.Until = d.time()
		if d.err == nil && t.Token == "" {
			d.err = fmt.Errorf("%w: an empty token", errBadRecord)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes left over", errBadRecord, len(d.b))
	}
	if d.err != nil {
		return inventory.Order{}, inventory.SpentToken{}, d.err
	}
	return o, t, nil
}

// decoder reads a record; its first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadRecord
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) time() time.Time {
	enc := d.bytes()
	if d.err != nil {
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalBinary(enc); err != nil {
		d.err = fmt.Errorf("%w: %v", errBadRecord, err)
	}
	return t
}
