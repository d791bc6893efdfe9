package service

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
)

// Where a request's body ends must read one way only. A request that
// carries both Content-Length and Transfer-Encoding, or a Transfer-Encoding
// folded onto a second line (obs-fold), has two readings: a proxy in front
// that goes by the Content-Length (or does not unfold) and a server that
// goes by the chunks see different requests on one connection, and what
// one takes for a body the other serves as a request of its own ("request
// smuggling"). Both servers read such a request by its chunks; net/http
// then keeps the connection. Either server here answers it 400 and closes
// the connection (RFC 9112, 6.1: close; 5.2: a folded line may be refused).

// errAmbiguousFraming is the answer to such a request.
var errAmbiguousFraming = errInvalid("a request may not carry both Content-Length and Transfer-Encoding, nor a Transfer-Encoding folded onto another line")

// headerBlock is what the framing rule needs of one request's header lines.
type headerBlock struct {
	te, teFolded, cl bool
	lastTE           bool  // the line before was Transfer-Encoding (or its fold)
	length           int64 // the Content-Length; -1 if it is not one number
}

// field reads one header line, without its line end. Only its start is
// needed: its name, and a Content-Length's value.
func (h *headerBlock) field(line []byte) {
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') { // obs-fold
		h.teFolded = h.teFolded || h.lastTE
		return
	}
	h.lastTE = false
	if len(line) < len("Content-Length:") || line[0]|0x20 != 't' && line[0]|0x20 != 'c' {
		return // neither name: most lines
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	name = bytes.TrimRight(name, " \t")
	switch {
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		h.te, h.lastTE = true, true
	case bytes.EqualFold(name, []byte("Content-Length")):
		h.cl, h.length = true, -1
		if v := bytes.Trim(value, " \t"); len(v) > 0 && len(v) <= 18 {
			h.length = 0
			for _, c := range v {
				if c < '0' || c > '9' {
					h.length = -1
					break
				}
				h.length = h.length*10 + int64(c-'0')
			}
		}
	}
}

// ambiguous: the block's body has two readings.
func (h *headerBlock) ambiguous() bool { return h.te && (h.cl || h.teFolded) }

// ambiguousHeaders applies the rule to a whole header block (fasthttp's
// RawHeaders: the header lines, the request line not among them).
func ambiguousHeaders(raw []byte) bool {
	var h headerBlock
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte("\n"))
		raw = rest
		if line = bytes.TrimSuffix(line, []byte("\r")); len(line) > 0 {
			h.field(line)
		}
	}
	return h.ambiguous()
}

// A framing verdict on a net/http connection (framingConn).
const (
	framingClear     int32 = iota
	framingLost            // a chunked body follows: what comes after it is not followed
	framingAmbiguous       // a request broke the rule
)

// framingConn is a connection of the net/http server that reads the header
// blocks of its requests as they go by — net/http keeps neither a request's
// Content-Length beside its Transfer-Encoding nor a fold — and tells the
// request's handler (checkFraming). It follows a body by its Content-Length
// and stops at the first chunked one (framingLost: that request's reply
// closes the connection) or the first ambiguous block. Its verdict may
// come from a request net/http has read ahead of the one it serves: a
// client that sends such a request is answered 400 on every request of
// its connection from then on, and the connection closed.
type framingConn struct {
	net.Conn
	verdict atomic.Int32

	// Read's alone (net/http reads a connection from one goroutine at a
	// time).
	lines    int      // lines of the block so far, the request line first
	line     [64]byte // the current line's start
	lineLen  int      // its length, even past len(line), less the white space after its first ':'
	value    int8     // 0 before the line's first ':', 1 in the white space after it, 2 after that
	block    headerBlock
	bodyLeft int64 // bytes of a body still to pass
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.verdict.Load() == framingClear {
		c.scan(p[:n])
	}
	return n, err
}

// scan follows the connection's bytes.
func (c *framingConn) scan(p []byte) {
	for len(p) > 0 && c.verdict.Load() == framingClear {
		if c.bodyLeft > 0 {
			skip := min(int64(len(p)), c.bodyLeft)
			c.bodyLeft -= skip
			p = p[skip:]
			continue
		}
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		c.keep(part)
		if i < 0 {
			return
		}
		p = p[i+1:]
		c.endLine()
	}
}

// keep adds part of the current line to its start, leaving out the white
// space between the first ':' and the value: a Content-Length may follow
// any amount of it (RFC 9110, 5.6.3), and its digits must be in the start
// kept. Only the line's first bytes are looked at once it is long.
func (c *framingConn) keep(part []byte) {
	if c.value == 2 && c.lineLen >= len(c.line) {
		c.lineLen += len(part)
		return
	}
	for _, b := range part {
		switch {
		case c.value == 1 && (b == ' ' || b == '\t'):
			continue
		case c.value == 1:
			c.value = 2
		case c.value == 0 && b == ':':
			c.value = 1
		}
		if c.lineLen < len(c.line) {
			c.line[c.lineLen] = b
		}
		c.lineLen++
	}
}

// endLine takes the line just read.
func (c *framingConn) endLine() {
	line := c.line[:min(c.lineLen, len(c.line))]
	if c.lineLen <= len(c.line) {
		line = bytes.TrimSuffix(line, []byte("\r"))
	}
	c.lineLen, c.value = 0, 0
	switch {
	case len(line) > 0 && c.lines == 0: // the request line
		c.lines++
	case len(line) > 0:
		c.lines++
		c.block.field(line)
	case c.lines > 0: // the block's end
		switch b := c.block; {
		case b.ambiguous():
			c.verdict.Store(framingAmbiguous)
		case b.te || b.cl && b.length < 0:
			c.verdict.Store(framingLost)
		case b.cl:
			c.bodyLeft = b.length
		}
		c.lines, c.block = 0, headerBlock{}
	}
}

// framingListener gives the net/http server framingConns.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingKey is the connection context's key of its framingConn.
type framingKey struct{}

// framingContext is net/http's ConnContext: the connection's framingConn
// in its requests' contexts.
func framingContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// checkFraming refuses a request of an ambiguous block (and closes the
// connection), and closes the connection after a request net/http has
// read past a chunked body of. Only net/http's requests have a verdict.
func checkFraming(w http.ResponseWriter, r *http.Request) error {
	fc, ok := r.Context().Value(framingKey{}).(*framingConn)
	if !ok {
		return nil
	}
	switch fc.verdict.Load() {
	case framingAmbiguous:
		w.Header().Set("Connection", "close")
		return errAmbiguousFraming
	case framingLost:
		w.Header().Set("Connection", "close")
	}
	return nil
}
