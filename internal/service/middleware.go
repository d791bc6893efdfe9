package service

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/seckill/seckill/internal/store"

	"github.com/seckill/seckill/internal/inventory"
)

// harden wraps every request: a request id (the client's X-Request-Id if it
// is a plausible one, else a new one) echoed in the response and carried by
// every log line of the request; security headers; and a recover that turns
// a panic into a logged stack and a plain 500 body, never the stack itself.
func (s *Service) harden(next http.Handler) http.Handler {
	debugLog := s.log.Enabled(context.Background(), slog.LevelDebug)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestIDFor(r.Header.Get("X-Request-Id"))
		// One allocation holds the request's writer, its exchange, its id's
		// header value and the context that carries them.
		rs := &requestState{Context: r.Context(), sw: statusWriter{ResponseWriter: w, requestID: id}, idHeader: [1]string{id}}
		sw := &rs.sw
		h := w.Header()
		replyHeaders(rs.idHeader[:], func(name string, value []string) { h[name] = value })
		r = r.WithContext(rs)
		sw.x = httpExchange{w: sw, r: r}
		var began time.Time // read for the debug log alone
		if debugLog {
			began = time.Now()
		}
		defer func() {
			s.endRequest(&sw.x, id, recover(), sw.wrote, sw.statusCode, began, debugLog, (*remoteAddr)(&r.RemoteAddr))
		}()
		next.ServeHTTP(sw, r)
	})
}

// replyHeaders gives set the headers of every reply, whatever server
// carries it: the request's id (idValue, one value) and the security
// headers. set may keep the slices, never modify them.
func replyHeaders(idValue []string, set func(name string, value []string)) {
	set("X-Request-Id", idValue)
	for _, sh := range securityHeaders {
		set(sh.name, sh.value)
	}
}

// securityHeaders are set on every response. The names are canonical and
// the values shared by every response: net/http only reads them, and a
// handler's Set replaces, never modifies, them (Add appends to a slice of
// capacity 1, so it copies).
var securityHeaders = []struct {
	name  string
	value []string
}{
	{"X-Content-Type-Options", []string{"nosniff"}},
	{"X-Frame-Options", []string{"DENY"}},
	{"Referrer-Policy", []string{"no-referrer"}},
	{"Cross-Origin-Resource-Policy", []string{"same-origin"}},
	// The API serves data, never pages; the dashboard sets its own.
	{"Content-Security-Policy", []string{"default-src 'none'; frame-ancestors 'none'"}},
	{"Cache-Control", []string{"no-store"}},
}

// requestKey is the context key of the request's *statusWriter.
type requestKey struct{}

// requestState is a request's context under harden: its parent's, and the
// value of requestKey, the request's writer. (It is context.WithValue's
// context, made in the same allocation as the writer: the context
// package's cancellations see through it to the parent's, as through
// WithValue's.) idHeader is the X-Request-Id header's value: a slice of
// capacity 1, so that a handler's Add copies it, as it copies the security
// headers' shared values.
type requestState struct {
	context.Context
	sw       statusWriter
	idHeader [1]string
}

// Value is the request's writer for requestKey, else the parent's value.
func (s *requestState) Value(key any) any {
	if key == (requestKey{}) {
		return &s.sw
	}
	return s.Context.Value(key)
}

// logFor is the logger of a request: the service's, with its request id.
// Made when needed: most requests log nothing.
func (s *Service) logFor(r *http.Request) *slog.Logger { return s.logWithID(requestID(r)) }

// logWithID is the service's logger with a request's id ("": none).
func (s *Service) logWithID(id string) *slog.Logger {
	if id != "" {
		return s.log.With("request_id", id)
	}
	return s.log
}

// requestID is the id harden gave the request ("" outside harden).
func requestID(r *http.Request) string {
	if sw, _ := r.Context().Value(requestKey{}).(*statusWriter); sw != nil {
		return sw.requestID
	}
	return ""
}

// validRequestID accepts 1 to 64 characters of A-Z a-z 0-9 _ . : - ; anything
// else (log injection, huge values) is replaced.
func validRequestID(id string) bool { return inventory.ValidID(id) }

// newRequestID returns 24 random hex digits from the runtime's generator
// (ChaCha8 per thread, seeded by the system): random enough to tell
// requests apart, and cheaper than crypto/rand's (getrandom) on every
// request that brings no id of its own.
func newRequestID() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status written, and the request's id. Unwrap lets
// http.ResponseController reach the connection (flushes, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status    int
	wrote     bool
	requestID string
	x         httpExchange // the request's exchange (exchangeOf), over this writer
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// audit records an operator's action that changed something: a log line
// and a row of the audit journal (store.AuditEntry). The action is done
// already, so a failure to record it is logged, not answered.
func (s *Service) audit(r *http.Request, action, saleID, target string, detail map[string]any) {
	log := s.logFor(r)
	args := []any{"sale", saleID, "remote", r.RemoteAddr}
	if target != "" {
		args = append(args, "target", target)
	}
	for k, v := range detail {
		args = append(args, k, v)
	}
	log.Info("admin: "+action, args...)
	err := s.db.Audit(context.WithoutCancel(r.Context()), store.AuditEntry{Action: action, SaleID: saleID, Target: target,
		Detail: detail, Remote: r.RemoteAddr, RequestID: requestID(r)})
	if err != nil {
		log.Error("admin: audit journal write failed", "action", action, "err", err)
	}
}

// stack is the panicking goroutine's stack, for the log.
func stack() string { return string(debug.Stack()) }
