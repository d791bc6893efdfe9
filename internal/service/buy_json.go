package service

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// The buy path's JSON, read and written without reflection: a buy's body
// ({"items":[{"sku":"A","qty":1}]}) and the order it answers with.
//
// The reader takes the body as clients send it and leaves anything else
// (a key in other case, a null, an escape in a sku, a fraction, a second
// value, invalid JSON...) to decode, the strict reflective reader every
// other endpoint uses, for its exact message: what the fast reader
// accepts, decode reads as the same lines (FuzzBuyBody checks it).

// bufPool holds the buffers a buy's body is read into and its answer
// written from.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf: a buffer grown beyond this goes to the collector.
const maxPooledBuf = 16 << 10

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// decodeBuy reads a buy's body into its lines.
func decodeBuy(x exchange) ([]inventory.Line, error) {
	buf := getBuf()
	defer putBuf(buf)
	body, err := x.body((*buf)[:0])
	*buf = body[:0]
	if err != nil {
		return nil, errInvalid(jsonProblem(err))
	}
	return buyLines(body)
}

// readBody appends the request's body to dst: at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request, dst []byte) ([]byte, error) {
	return appendBody(dst, r.Body, r.ContentLength, w)
}

// appendBody appends body, of length bytes (-1: unknown), to dst: at most
// maxBody bytes, else an *http.MaxBytesError. A body with a length within
// the bound cannot be longer (either server reads no further), so only
// others are read through MaxBytesReader, which tells w (net/http's
// writer, or nil) of a body over the bound: net/http then closes the
// connection after the reply.
func appendBody(dst []byte, body io.Reader, length int64, w http.ResponseWriter) ([]byte, error) {
	if length < 0 || length > maxBody {
		rc, ok := body.(io.ReadCloser)
		if !ok {
			rc = io.NopCloser(body)
		}
		body = http.MaxBytesReader(w, rc, maxBody)
	} else if need := int(length); cap(dst)-len(dst) < need+1 {
		dst = append(dst, make([]byte, need+1)...)[:len(dst)]
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := body.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// buyLines reads a buy's body: the fast reader, or decode's for anything
// it does not take.
func buyLines(body []byte) ([]inventory.Line, error) {
	if lines, ok := fastBuyLines(body); ok {
		return lines, nil
	}
	return slowBuyLines(body)
}

// slowBuyLines is decode's reading of a buy's body, with its messages.
func slowBuyLines(body []byte) ([]inventory.Line, error) {
	var req struct {
		Items []struct {
			SKU *string `json:"sku"`
			Qty *int64  `json:"qty"`
		} `json:"items"`
	}
	if err := decodeBody(body, &req); err != nil {
		return nil, err
	}
	lines := make([]inventory.Line, 0, len(req.Items))
	for i, it := range req.Items {
		if it.SKU == nil || it.Qty == nil {
			return nil, errInvalid("items[" + itoa(i) + "] needs sku and qty")
		}
		lines = append(lines, inventory.Line{SKU: *it.SKU, Qty: *it.Qty})
	}
	return lines, nil
}

// fastBuyLines reads {"items":[{"sku":S,"qty":N},...]} (keys in either
// order, whitespace anywhere JSON allows it), where each S is a string of
// printable ASCII without escapes and each N an integer of at most 18
// digits. ok is false for anything else.
func fastBuyLines(body []byte) (lines []inventory.Line, ok bool) {
	s := jsonScanner{b: body}
	if !s.consume('{') || s.peek() != '"' {
		return nil, false
	}
	if key, esc, ok := s.str(); !ok || esc || string(key) != "items" || !s.consume(':') || !s.consume('[') {
		return nil, false
	}
	lines = make([]inventory.Line, 0, 1)
	if !s.consume(']') {
		for {
			l, ok := fastLine(&s)
			if !ok {
				return nil, false
			}
			lines = append(lines, l)
			if s.consume(']') {
				break
			}
			if !s.consume(',') {
				return nil, false
			}
		}
	}
	if !s.consume('}') {
		return nil, false
	}
	if s.ws(); s.i != len(s.b) {
		return nil, false
	}
	return lines, true
}

func fastLine(s *jsonScanner) (inventory.Line, bool) {
	var l inventory.Line
	var sku, qty bool
	if !s.consume('{') {
		return l, false
	}
	for n := 0; ; n++ {
		// Two members at most; a ',' must be followed by another.
		if n == 2 || s.peek() != '"' {
			return l, false
		}
		key, esc, ok := s.str()
		if !ok || esc || !s.consume(':') {
			return l, false
		}
		switch {
		case string(key) == "sku" && !sku && s.peek() == '"':
			text, esc, ok := s.str()
			if !ok || esc || !printableASCII(text) {
				return l, false
			}
			l.SKU, sku = string(text), true
		case string(key) == "qty" && !qty:
			if c := s.peek(); c != '-' && (c < '0' || c > '9') {
				return l, false
			}
			text, ok := s.num()
			if !ok {
				return l, false
			}
			if l.Qty, ok = smallInt(text); !ok {
				return l, false
			}
			qty = true
		default:
			return l, false
		}
		if !s.consume(',') {
			break
		}
	}
	return l, sku && qty && s.consume('}')
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// writeOrder answers with an order as writeJSON(w, status,
// orderBody(o, remaining)) does, byte for byte (TestWriteOrder).
func writeOrder(w http.ResponseWriter, status int, o inventory.Order, remaining []int64) {
	writeOrderTo(exchangeOf(w, nil), status, o, remaining) // harden's exchange: no allocation
}

// writeOrderTo is writeOrder on any server's exchange.
func writeOrderTo(x exchange, status int, o inventory.Order, remaining []int64) {
	buf := getBuf()
	defer putBuf(buf)
	b, ok := appendOrder((*buf)[:0], o, remaining)
	if !ok {
		var err error
		if b, err = json.Marshal(orderBody(o, remaining)); err == nil {
			b = append(b, '\n') // as json.Encoder writes it
		} // else (a year beyond 9999) the status alone, as json.Encoder left it
	}
	*buf = b[:0]
	x.replyJSON(status, b)
}

// Shared header values: net/http only reads them (see securityHeaders).
var (
	contentTypeJSON     = []string{"application/json"}
	cacheControlNoStore = []string{"no-store"}
)

// jsonHeaders sets a JSON reply's Content-Type and Cache-Control: no-store.
// Cache-Control is assigned only when it is not that already (harden sets
// it on every response): a Go map of 8 entries — harden's 7 and
// Content-Type — is full in its small form, and assigning to it, even a
// key it holds, grows it to a table first (1.2% of the service's CPU per
// buy, by profile).
func jsonHeaders(h http.Header) {
	h["Content-Type"] = contentTypeJSON
	if v := h["Cache-Control"]; len(v) != 1 || v[0] != "no-store" {
		h["Cache-Control"] = cacheControlNoStore
	}
}

// appendOrder appends orderBody(o, remaining) as json.Encoder writes it,
// newline included; ok is false if a string or the time needs what only
// encoding/json does (escapes, a year beyond 9999).
func appendOrder(b []byte, o inventory.Order, remaining []int64) ([]byte, bool) {
	ok := true
	str := func(key, v string) {
		b = append(b, key...)
		if !plainJSON(v) {
			ok = false
		}
		b = append(b, '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	str(`{"order_id":`, o.ID)
	str(`,"sale_id":`, o.SaleID)
	str(`,"user_id":`, o.UserID)
	str(`,"status":`, string(o.Status))
	b = append(b, `,"items":[`...)
	for i, l := range o.Items {
		if i > 0 {
			b = append(b, ',')
		}
		str(`{"sku":`, l.SKU)
		b = append(b, `,"qty":`...)
		b = strconv.AppendInt(b, l.Qty, 10)
		if i < len(remaining) {
			b = append(b, `,"remaining":`...)
			b = strconv.AppendInt(b, remaining[i], 10)
		}
		b = append(b, '}')
	}
	b = append(b, `],"created_at":"`...)
	if y := o.CreatedAt.Year(); y < 0 || y > 9999 {
		ok = false
	}
	if _, off := o.CreatedAt.Zone(); off <= -24*3600 || off >= 24*3600 {
		ok = false
	}
	b = o.CreatedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if o.Payment != "" {
		str(`,"payment_status":`, string(o.Payment))
	}
	if !o.PayBy.IsZero() {
		if y := o.PayBy.Year(); y < 0 || y > 9999 {
			ok = false
		}
		if _, off := o.PayBy.Zone(); off <= -24*3600 || off >= 24*3600 {
			ok = false
		}
		b = append(b, `,"pay_by":"`...)
		b = o.PayBy.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if o.PaymentRef != "" {
		str(`,"payment_ref":`, o.PaymentRef)
	}
	b = append(b, "}\n"...)
	return b, ok
}

// plainJSON: s is written by encoding/json as it is, between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
