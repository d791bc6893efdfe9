package service

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// The service over fasthttp (Config.HTTPServer "fasthttp"; `seckill serve`'s
// default). The buy, most of the traffic, is served on fasthttp itself,
// through the same buyIn as over net/http (a fastExchange instead of an
// httpExchange), and so are a waiting room's joins and place reads
// (queueIn), the traffic of a crowd in line; every other request goes
// through fasthttpadaptor to the service's http.Handler (routes),
// unchanged. Why: net/http costs ~10 µs
// more CPU per request than fasthttp at a buy's rate on this kind of
// machine (docs/performance.md, "seckill bench --cost").

// newFastServer is the fasthttp server of the service's handler h,
// with net/http's limits (Start's): fastServer's.
func (s *Service) newFastServer(h http.Handler) *fasthttp.Server {
	return fastServer(s.fastHandler(fasthttpadaptor.NewFastHTTPHandler(ownedRequest(h))), s.serverLog)
}

// fastServer is a fasthttp server of h with the service's options, its
// own lines written to logger: the service's (newFastServer) and the
// benchmark's floor (NewFloorServer) are the same server but for h.
//
// A request's body is streamed (StreamRequestBody): the handler runs once
// the headers are in (and at most 8 KiB of the body, which fasthttp reads
// ahead), and reads the body itself, if at all, after its checks — the
// token's first — as over net/http. Read whole before the handler, as
// fasthttp does by default, a body was held before anyone knew who sent
// it: 200 slow uploads without a token held 100 MB. What the handler
// leaves unread fasthttp discards, up to 256 KiB, or it closes the
// connection (net/http's bound too).
func fastServer(h fasthttp.RequestHandler, logger fasthttp.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      h,
		ErrorHandler: fastError,
		// ReadTimeout bounds the request's line and headers (net/http's
		// ReadHeaderTimeout: slowloris); once they are in, the body has
		// readTimeout of its own (net/http's counts from the request's
		// start: the whole request may take 15 s here, 10 s there).
		ReadTimeout: readHeaderTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: readTimeout}
		},
		WriteTimeout:       writeTimeout,
		IdleTimeout:        idleTimeout,
		ReadBufferSize:     maxHeaderBytes + 4096, // a request's line and headers must fit (net/http allows 4 KiB over)
		StreamRequestBody:  true,
		MaxRequestBodySize: maxBody, // streamed: only what fasthttp reads ahead (8 KiB at most)
		// A multipart body is not read ahead into memory or files either.
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		// Its own lines, bounded and without a request's bytes (serverLog);
		// and its errors quote no request either.
		Logger:                logger,
		SecureErrorLogMessage: true,
	}
}

// fastHandler serves a buy and a buyer's place natively (fastRoute) and
// hands anything else to adapted, the service's handler through
// fasthttpadaptor.
func (s *Service) fastHandler(adapted fasthttp.RequestHandler) fasthttp.RequestHandler {
	debugLog := s.log.Enabled(context.Background(), slog.LevelDebug)
	return func(c *fasthttp.RequestCtx) {
		sale, queue, join, ok := fastRoute(c)
		// A chunked body (ContentLength -1) whose length has another
		// reading (framing.go): 400, and the connection closed.
		ambiguous := c.Request.Header.ContentLength() == -1 && ambiguousHeaders(c.Request.Header.RawHeaders())
		if !ok && !ambiguous {
			// The adaptor reads a body whole before the handler runs
			// (PostBody): it is given none, and ownedRequest hands the
			// handler the server's stream instead, read when it reads it.
			if body := c.RequestBodyStream(); body != nil {
				c.SetUserValue(bodyStreamKey{}, body)
				c.Request.ResetBody() // the server still drains and releases the stream
			}
			adapted(c)
			return
		}
		x := &fastExchange{c: c}
		given, _ := x.header("X-Request-Id")
		id := requestIDFor(given)
		setFastReplyHeaders(&c.Response.Header, id)
		var began time.Time
		if debugLog {
			began = time.Now()
		}
		defer func() {
			// the peer's address as text only for the debug log: made for
			// every request, it was about 0.5% of a buy's CPU
			s.endRequest(x, id, recover(), x.wrote, x.statusCode, began, debugLog, c.RemoteAddr())
		}()
		if ambiguous {
			c.SetConnectionClose()
			writeErrorTo(x, s.logWithID(id), errAmbiguousFraming)
			return
		}
		var err error
		if queue {
			err = s.queueIn(x, sale, join)
		} else {
			err = s.buyIn(x, sale)
		}
		if err != nil {
			writeErrorTo(x, s.logWithID(id), err)
		}
	}
}

// ownedRequest serves h the adapted request with strings of its own.
// fasthttpadaptor's method, host, request-target (so the URL and every
// path value), header names and values point into the connection's
// buffers, which fasthttp overwrites with its next request once the
// handler returns — or while h still runs, when h streams its reply (a
// flushed reply returns the fasthttp handler early). Anything h keeps (a
// sale id as a cache's key, a header in a log written later) would turn
// into another request's bytes. Only the routes other than the buy pay
// for the copy (the buy's exchange copies what it reads).
//
// Its context is the RequestCtx's without its end: that ends when the
// server begins shutting down, which would fail the requests Shutdown
// drains (as the buy's exchange does, fastExchange.ctx; net/http ends a
// request's context when its client goes away, never at Shutdown).
//
// Its body is the server's stream (fastHandler), read only as h reads it:
// the stream stays the server's to read until the reply is written, which
// is after h returns (a reply h streams included). A request made without
// a connection (a test's) has its body copied instead.
func ownedRequest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := *r.WithContext(context.WithoutCancel(r.Context()))
		o.Method = strings.Clone(r.Method)
		o.Proto = strings.Clone(r.Proto)
		o.Host = strings.Clone(r.Host)
		o.RequestURI = strings.Clone(r.RequestURI)
		if u, err := url.ParseRequestURI(o.RequestURI); err == nil {
			o.URL = u // as the adaptor parsed it, from the copy
		} else {
			u := *r.URL // unreachable: the adaptor parsed the same string
			u.Path, u.RawPath, u.RawQuery = strings.Clone(u.Path), strings.Clone(u.RawPath), strings.Clone(u.RawQuery)
			o.URL = &u
		}
		o.Header = make(http.Header, len(r.Header))
		for k, vs := range r.Header {
			c := make([]string, len(vs))
			for i, v := range vs {
				c[i] = strings.Clone(v)
			}
			o.Header[strings.Clone(k)] = c
		}
		if len(r.TransferEncoding) > 0 {
			o.TransferEncoding = make([]string, len(r.TransferEncoding))
			for i, v := range r.TransferEncoding {
				o.TransferEncoding[i] = strings.Clone(v)
			}
		}
		if body, c := streamedBody(r); body != nil {
			o.Body = io.NopCloser(body)
			o.ContentLength = int64(c.Request.Header.ContentLength()) // -1: chunked
		} else if r.Body != nil && r.ContentLength != 0 {
			b, _ := io.ReadAll(r.Body) // a bytes.Reader over fasthttp's body: cannot fail
			o.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, &o)
	})
}

// bodyStreamKey is the RequestCtx's user value that holds the body stream
// of a request handed to the adaptor (fastHandler, ownedRequest).
type bodyStreamKey struct{}

// streamedBody is the body stream of an adapted request, and its
// RequestCtx (the request's context); nil if it has none.
func streamedBody(r *http.Request) (io.Reader, *fasthttp.RequestCtx) {
	c, ok := r.Context().(*fasthttp.RequestCtx)
	if !ok {
		return nil, nil
	}
	body, _ := c.UserValue(bodyStreamKey{}).(io.Reader)
	return body, c
}

// fastRoute is the route of a fasthttp request served natively: a buy
// (buyPath), or a buyer's place (queue: POST a join, GET a read;
// queuePathOf), of a request whose request-target is a path (not a URL),
// nothing in it escaped, no '#' in it (fasthttp's path ends there;
// net/http's path keeps it, so the mux answers 404, or redirects a
// "#/../" elsewhere: the adaptor's way). ok is false for anything else.
func fastRoute(c *fasthttp.RequestCtx) (sale string, queue, join, ok bool) {
	post := c.IsPost()
	if !post && !c.IsGet() {
		return "", false, false, false
	}
	uri := c.Request.Header.RequestURI()
	if len(uri) == 0 || uri[0] != '/' || bytes.IndexByte(uri, '#') >= 0 {
		return "", false, false, false
	}
	p := c.Request.URI().PathOriginal()
	if bytes.IndexByte(p, '%') >= 0 {
		return "", false, false, false // net/http decodes it: the mux's, through the adaptor
	}
	path := string(p)
	if post {
		if sale, ok := buyPathOf(http.MethodPost, path); ok {
			return sale, false, false, true
		}
	}
	method := http.MethodGet
	if post {
		method = http.MethodPost
	}
	sale, join, ok = queuePathOf(method, path)
	return sale, ok, join, ok
}

// fastError answers a request fasthttp could not read: fasthttp's own
// plain answer, as net/http's are its own. (A body too large is the
// handler's to refuse, as over net/http: it is streamed.)
func fastError(c *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var netErr *net.OpError
	switch {
	case errors.As(err, &small):
		c.Error("431 Request Header Fields Too Large", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &netErr) && netErr.Timeout():
		c.Error("408 Request Timeout", fasthttp.StatusRequestTimeout)
	default:
		c.Error("400 Bad Request", fasthttp.StatusBadRequest)
	}
}

// fastReplyHeaders are replyHeaders' but the request's id, as fasthttp
// takes them without rework: names canonical, names and values as bytes.
// Made once from replyHeaders: ResponseHeader.Set copies and normalizes
// each name on every reply, twice the cost of SetCanonical for the seven
// headers of a buy's reply.
var fastReplyHeaders, fastRequestID = func() (hs [][2][]byte, id []byte) {
	replyHeaders([]string{""}, func(name string, value []string) {
		if name == "X-Request-Id" {
			id = []byte(http.CanonicalHeaderKey(name))
			return
		}
		hs = append(hs, [2][]byte{[]byte(http.CanonicalHeaderKey(name)), []byte(value[0])})
	})
	return hs, id
}()

// setFastReplyHeaders sets every reply's headers (replyHeaders) on h, the
// request's id as X-Request-Id.
func setFastReplyHeaders(h *fasthttp.ResponseHeader, id string) {
	h.SetCanonical(fastRequestID, []byte(id))
	for _, kv := range fastReplyHeaders {
		h.SetCanonical(kv[0], kv[1])
	}
}

// fastExchange is an exchange over fasthttp.
type fastExchange struct {
	c      *fasthttp.RequestCtx
	wrote  bool
	status int
}

// ctx is not the RequestCtx (whose Done closes when the server begins
// shutting down, which would cancel the in-flight buys Shutdown drains):
// a buy is bounded by its coalescer's and Redis's timeouts, as over
// net/http when its client goes away.
func (x *fastExchange) ctx() context.Context { return context.Background() }
func (x *fastExchange) method() string       { return string(x.c.Method()) }
func (x *fastExchange) path() string         { return string(x.c.Path()) }

func (x *fastExchange) header(name string) (string, bool) {
	v := x.c.Request.Header.PeekAll(name)
	if len(v) == 0 {
		return "", false
	}
	return string(v[0]), true
}

func (x *fastExchange) headerValues(name string) []string {
	var out []string
	for _, v := range x.c.Request.Header.PeekAll(name) {
		out = append(out, string(v))
	}
	return out
}

func (x *fastExchange) peer() netip.AddrPort {
	if a, ok := x.c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

func (x *fastExchange) body(dst []byte) ([]byte, error) {
	if body := x.c.RequestBodyStream(); body != nil {
		return appendBody(dst, body, int64(x.c.Request.Header.ContentLength()), nil)
	}
	// No body, or one set without a connection (a benchmark's).
	b := x.c.PostBody()
	if len(b) > maxBody {
		return append(dst, b[:maxBody]...), &http.MaxBytesError{Limit: maxBody}
	}
	return append(dst, b...), nil
}

func (x *fastExchange) setHeader(name, value string) { x.c.Response.Header.Set(name, value) }

func (x *fastExchange) replyJSON(status int, body []byte) {
	h := &x.c.Response.Header
	// Cache-Control: no-store is among the reply headers every
	// fastExchange's reply got first (setFastReplyHeaders).
	h.SetContentType(contentTypeJSON[0])
	x.c.SetStatusCode(status)
	x.c.SetBody(body)
	x.wrote, x.status = true, status
}

func (x *fastExchange) statusCode() int {
	if x.status == 0 {
		return http.StatusOK
	}
	return x.status
}

// serveFast serves the service's handler on fasthttp until Shutdown.
func (s *Service) serveFast(ln net.Listener) {
	if err := s.fast.Serve(ln); err != nil {
		s.log.Error("http server", "err", err)
	}
}

// shutdownFast ends the live streams (net/http's RegisterOnShutdown) and
// drains the server: no new connection, idle ones closed, in-flight
// requests answered (with Connection: close) until ctx ends.
func (s *Service) shutdownFast(ctx context.Context) error {
	s.closeStreams()
	return s.fast.ShutdownWithContext(ctx)
}
