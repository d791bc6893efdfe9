package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// rawClient sends one request shape (method, URL, headers, body; only the
// bearer token and one optional extra header line vary) over keep-alive HTTP/1.1 connections, each a rawConn
// owned by one sender goroutine and carrying one request at a time. It
// writes the request's bytes, built once, with one write(2) and reads the
// reply with a parser that knows only what a reply needs: the status line,
// the headers that frame the body (Content-Length, chunked
// Transfer-Encoding, Connection: close) and the body, which it discards.
//
// It stands in for net/http's client so that the generator, which shares
// the machine with the server it measures, costs as little CPU per request
// as it can: net/http's client spends about as much per request as the
// server's handler does (two goroutines per connection, a header map per
// request and per reply, a body reader to drain).
type rawClient struct {
	addr    string
	head    []byte // request line and fixed headers, before the token's
	tail    []byte // Content-Length, the blank line and the body
	timeout time.Duration
	// slack is how much later than its timeout a request may time out: a
	// connection's deadline is moved only when it would fall before the
	// request's own timeout, and then to timeout+slack after the send, so
	// that a busy connection sets it about once per slack, not per request.
	slack  time.Duration
	dialer net.Dialer
}

// rawConn is one connection of a rawClient, for one goroutine at a time. It
// dials on its first request, and again after an error or a reply that
// closes the connection.
type rawConn struct {
	c        *rawClient
	nc       net.Conn // nil until dialled, and after a close
	r        *bufio.Reader
	buf      []byte    // the request being written
	deadline time.Time // nc's deadline, zero for none
	sent     time.Time // the last request's send on nc
}

// staleAfter is how long a kept-alive connection may have been idle (since
// its last send) before a request checks that the server has not closed it
// meanwhile (an idle timeout), so that the request goes over a new
// connection rather than fail against the server's close; a connection
// busier than that is reused as it is, without the check's syscall.
const staleAfter = 10 * time.Millisecond

func newRawClient(method, rawURL string, header http.Header, body []byte, timeout time.Duration) (*rawClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("loadgen: %q: only http:// URLs", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, u.RequestURI(), u.Host)
	for name, values := range header {
		for _, v := range values {
			fmt.Fprintf(&head, "%s: %s\r\n", name, v)
		}
	}
	tail := fmt.Appendf(nil, "Content-Length: %d\r\n\r\n", len(body))
	tail = append(tail, body...)
	return &rawClient{
		addr: host, head: head.Bytes(), tail: tail, timeout: timeout,
		slack:  min(timeout/10, time.Second),
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
	}, nil
}

// conn returns a new connection, not yet dialled.
func (c *rawClient) conn() *rawConn { return &rawConn{c: c} }

// do sends the request with token as its bearer token ("" for none) and
// extra as one more header line ("Name: value", "" for none), and returns
// the reply's status once its body has been read. now is the caller's
// reading of the clock just before: the request's timeout counts from it
// (from the dial's end on a new connection).
func (conn *rawConn) do(token, extra string, now time.Time) (int, error) {
	if conn.nc != nil && now.Sub(conn.sent) >= staleAfter && (conn.r.Buffered() > 0 || closedByPeer(conn.nc)) {
		conn.close()
	}
	if conn.nc == nil {
		nc, err := conn.c.dialer.Dial("tcp", conn.c.addr)
		if err != nil {
			return 0, err
		}
		conn.nc, conn.deadline = nc, time.Time{}
		if conn.r == nil {
			conn.r = bufio.NewReaderSize(nc, 4096)
		} else {
			conn.r.Reset(nc)
		}
		now = time.Now()
	}
	conn.sent = now
	status, keep, err := conn.roundTrip(token, extra, now)
	if err != nil || !keep {
		conn.close()
	}
	return status, err
}

// close closes the connection if it is open.
func (conn *rawConn) close() {
	if conn.nc != nil {
		conn.nc.Close()
		conn.nc = nil
	}
}

func (conn *rawConn) roundTrip(token, extra string, now time.Time) (status int, keep bool, err error) {
	c := conn.c
	if c.timeout > 0 {
		// The deadline falls between timeout and timeout+slack after the
		// send: a request times out no sooner than timeout, no later than
		// slack after it.
		if due := now.Add(c.timeout); conn.deadline.Before(due) {
			conn.deadline = due.Add(c.slack)
			if err := conn.nc.SetDeadline(conn.deadline); err != nil {
				return 0, false, err
			}
		}
	}
	b := append(conn.buf[:0], c.head...)
	if token != "" {
		b = append(b, "Authorization: Bearer "...)
		b = append(b, token...)
		b = append(b, "\r\n"...)
	}
	if extra != "" {
		b = append(b, extra...)
		b = append(b, "\r\n"...)
	}
	b = append(b, c.tail...)
	conn.buf = b
	if _, err := conn.nc.Write(b); err != nil {
		return 0, false, err
	}
	return readReply(conn.r)
}

var errMalformed = errors.New("loadgen: malformed HTTP reply")

// readReply reads one reply and discards its body: its status, and
// whether the connection may carry another request. Interim replies (1xx:
// 100 Continue, 103 Early Hints) are skipped: the reply, and the
// request's latency, end with the final one.
func readReply(r *bufio.Reader) (status int, keep bool, err error) {
	for {
		status, keep, err = readOneReply(r)
		if err != nil || status >= 200 || status == http.StatusSwitchingProtocols {
			return status, keep, err
		}
	}
}

// readOneReply reads one reply, interim or final, as readReply does.
func readOneReply(r *bufio.Reader) (status int, keep bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, errMalformed
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, false, errMalformed
	}
	keep = line[7] == '1'
	length, chunked := int64(-1), false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		if len(line) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, errMalformed
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return 0, false, errMalformed
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case status == http.StatusSwitchingProtocols: // not HTTP any more
		return status, false, nil
	case status < 200: // interim: no body, the final reply follows
		return status, true, nil
	case status == http.StatusNoContent || status == http.StatusNotModified: // no body
	case chunked:
		err = discardChunks(r)
	case length >= 0:
		_, err = r.Discard(int(length))
	default: // the body runs to the connection's end
		for err == nil {
			_, err = r.Discard(r.Buffered() + 1)
		}
		return status, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return status, keep, nil
}

// discardChunks reads a chunked body and its trailer.
func discardChunks(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size := bytes.TrimSpace(line)
		if i := bytes.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil || n < 0 {
			return errMalformed
		}
		if n == 0 {
			for { // the trailer, up to its blank line
				line, err := r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(line) <= 2 {
					return nil
				}
			}
		}
		if _, err := r.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}
