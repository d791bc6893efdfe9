package service

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"
)

// exchange is one request and its reply as the buy sees them, whatever
// server carries them: net/http (httpExchange, below) or fasthttp
// (fastExchange, fast.go). Everything the buy decides — who the buyer
// is, the limits, the body, the call to the seller, the reply's status,
// headers and bytes, its metrics and logs — is decided once, in buyIn and
// what it calls, against this interface; an exchange only moves bytes.
type exchange interface {
	ctx() context.Context
	method() string
	path() string
	// header is the first value of the request's header name, and
	// whether the request has it at all.
	header(name string) (string, bool)
	// headerValues is every value of the request's header name (read
	// for X-Forwarded-For, from trusted proxies only).
	headerValues(name string) []string
	// peer is the connection's remote address; invalid when not over TCP.
	peer() netip.AddrPort
	// body appends the request's body to dst: at most maxBody bytes, else
	// an *http.MaxBytesError.
	body(dst []byte) ([]byte, error)
	// setHeader sets a reply header (replacing any value).
	setHeader(name, value string)
	// replyJSON answers status with a JSON body: Content-Type
	// application/json and Cache-Control no-store (jsonHeaders).
	replyJSON(status int, body []byte)
}

// httpExchange is an exchange over net/http.
type httpExchange struct {
	w http.ResponseWriter
	r *http.Request
}

func (x *httpExchange) ctx() context.Context { return x.r.Context() }
func (x *httpExchange) method() string       { return x.r.Method }
func (x *httpExchange) path() string         { return x.r.URL.Path }

func (x *httpExchange) header(name string) (string, bool) {
	v := x.r.Header[name] // name is canonical (every caller's is a constant)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

func (x *httpExchange) headerValues(name string) []string { return x.r.Header.Values(name) }

func (x *httpExchange) peer() netip.AddrPort {
	ap, _ := netip.ParseAddrPort(x.r.RemoteAddr)
	return ap
}

func (x *httpExchange) body(dst []byte) ([]byte, error) { return readBody(x.w, x.r, dst) }

func (x *httpExchange) setHeader(name, value string) { x.w.Header().Set(name, value) }

func (x *httpExchange) replyJSON(status int, body []byte) {
	jsonHeaders(x.w.Header())
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
}

// exchangeOf is the request's exchange: harden's, made with its writer,
// or a new one outside harden.
func exchangeOf(w http.ResponseWriter, r *http.Request) exchange {
	if sw, ok := w.(*statusWriter); ok && sw.x.r != nil {
		return &sw.x
	}
	return &httpExchange{w: w, r: r}
}

// requestIDFor is a request's id: the client's X-Request-Id if it is a
// plausible one, else a new one.
func requestIDFor(given string) string {
	if validRequestID(given) {
		return given
	}
	return newRequestID()
}

// endRequest is the end of every request, whatever server carried it: a
// panic (v, recovered) becomes a logged stack and, if nothing was written
// yet, the contract's 500; and with debug logging on, one line of the
// request, remote the peer's address.
func (s *Service) endRequest(x exchange, id string, v any, wrote bool, status func() int, began time.Time, debugLog bool, remote fmt.Stringer) {
	if v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		log := s.logWithID(id)
		log.Error("panic serving request", "method", x.method(), "path", x.path(), "panic", v, "stack", stack())
		if !wrote {
			writeErrorTo(x, log, errInternal)
		}
	}
	if debugLog {
		s.logWithID(id).Debug("request", "method", x.method(), "path", x.path(), "status", status(),
			"took", time.Since(began), "remote", remote.String())
	}
}

// remoteAddr is net/http's peer address (http.Request.RemoteAddr) as
// endRequest takes it, by pointer: a string in an interface would cost an
// allocation per request.
type remoteAddr string

func (a *remoteAddr) String() string { return string(*a) }
