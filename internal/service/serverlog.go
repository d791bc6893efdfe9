package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// serverLogEvery is the least time between two lines of the HTTP servers'
// own log (serverLog).
const serverLogEvery = 10 * time.Second

// serverLog is what the HTTP servers log of their own: a request they
// could not read, an error accepting a connection. Anyone can send an
// unreadable request without a token, so these lines are bounded — at
// most one per `every`; the lines left out meanwhile are counted in the
// next line, or in a line of their own when the quiet ends — and never
// hold a byte of a request (fasthttp would quote the headers it could not
// parse, Authorization included: Printf).
type serverLog struct {
	log   *slog.Logger
	every time.Duration

	mu         sync.Mutex
	quietUntil time.Time   // no line before then
	leftOut    int         // lines not logged since the last one
	flush      *time.Timer // logs leftOut when the quiet ends
	stopped    bool
}

func newServerLog(log *slog.Logger, every time.Duration) *serverLog {
	return &serverLog{log: log, every: every}
}

// line logs msg and args at WARN, unless a line was logged less than
// `every` ago: then it is counted, and the count logged later.
func (l *serverLog) line(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	now := time.Now()
	if now.Before(l.quietUntil) {
		l.leftOut++
		if l.flush == nil {
			l.flush = time.AfterFunc(l.quietUntil.Sub(now), l.flushLeftOut)
		}
		return
	}
	l.emit(now, msg, args...)
}

// emit logs a line with the count of those left out before it; l.mu held.
func (l *serverLog) emit(now time.Time, msg string, args ...any) {
	if l.leftOut > 0 {
		args = append(args, "left_out", l.leftOut)
		l.leftOut = 0
	}
	l.quietUntil = now.Add(l.every)
	l.log.Warn(msg, args...)
}

// flushLeftOut logs how many lines were left out, when the quiet ends.
func (l *serverLog) flushLeftOut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush = nil
	if l.leftOut > 0 && !l.stopped {
		l.emit(time.Now(), "http server: more lines like the last one were left out")
	}
}

// stop logs what is left out now and nothing after.
func (l *serverLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
	if l.leftOut > 0 && !l.stopped {
		l.emit(time.Now(), "http server: more lines like the last one were left out")
	}
	l.stopped = true
}

// Write is net/http's ErrorLog (through a log.Logger): its lines hold no
// request bytes (a panic's, which would, is recovered before: harden).
func (l *serverLog) Write(p []byte) (int, error) {
	l.line("http server: " + strings.TrimSpace(string(p)))
	return len(p), nil
}

// fastServeError is the format of fasthttp's line for a connection it
// stopped serving (a request it could not read, mostly): its arguments
// are the two ends' addresses and the error.
const fastServeError = "error when serving connection %q<->%q: %v"

// Printf is fasthttp's Logger. Its formats are its own; its arguments may
// hold a request's bytes, so each but an address or a number is replaced:
// an error by its kind (readFailure), anything else by "…".
func (l *serverLog) Printf(format string, args ...any) {
	if format == fastServeError && len(args) == 3 {
		if err, ok := args[2].(error); ok {
			l.line("http server: a request could not be read", "remote", fmt.Sprint(args[1]), "reason", readFailure(err))
			return
		}
	}
	safe := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case net.Addr, int, int64, uint64, float64, time.Duration:
			safe[i] = v
		case error:
			safe[i] = readFailure(v)
		default:
			safe[i] = "…"
		}
	}
	l.line("http server: " + fmt.Sprintf(format, safe...))
}

// readFailure names what went wrong reading a request, in words of our
// own: fasthttp's error texts quote the request.
func readFailure(err error) string {
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	var chunk fasthttp.ErrBrokenChunk
	switch {
	case errors.As(err, &small):
		return "headers too large"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return "body too large"
	case errors.As(err, &chunk):
		return "bad chunked body"
	case strings.Contains(err.Error(), "request headers"):
		return "bad request line or headers"
	default:
		return "malformed request"
	}
}
