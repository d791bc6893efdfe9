package service

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/waitfor"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestServerLogBoundsItsLines: 100 lines at once log one; the 99 others
// are counted in a line of their own when the quiet ends; after stop,
// nothing. A line's request bytes never reach the log, whatever fasthttp
// puts in its arguments: only addresses, numbers and the kind of error.
func TestServerLogBoundsItsLines(t *testing.T) {
	var buf lockedBuffer
	l := newServerLog(slog.New(slog.NewTextHandler(&buf, nil)), 200*time.Millisecond)
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242}
	secret := errors.New(`error when reading request headers: invalid header key "Content-Type ": contents: "Authorization: Bearer SECRET"`)
	for range 100 {
		l.Printf(fastServeError, remote, remote, secret)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("100 lines at once logged %d:\n%s", n, buf.String())
	}
	waitfor.Until(t, waitfor.Patience, "the count of the lines left out", func() error {
		if !strings.Contains(buf.String(), "left_out=99") {
			return fmt.Errorf("log:\n%s", buf.String())
		}
		return nil
	})
	l.Printf(fastServeError, remote, remote, secret) // in the quiet after that line
	l.stop()
	l.Printf(fastServeError, remote, remote, secret)
	got := buf.String()
	if strings.Contains(got, "SECRET") || strings.Count(got, "\n") != 3 || !strings.Contains(got, "left_out=1") ||
		!strings.Contains(got, `remote=192.0.2.1:4242 reason="bad request line or headers"`) {
		t.Fatalf("log (want 3 lines: a request not read, 99 left out, 1 left out; no request bytes):\n%s", got)
	}

	// fasthttp's other lines: addresses and numbers as they are, errors by
	// their kind, anything else left out.
	var all lockedBuffer
	l = newServerLog(slog.New(slog.NewTextHandler(&all, nil)), 0)
	l.Printf("cannot parse requestURI %q: %v", "/x?token=SECRET", secret)
	l.Printf("%d connections from %s, %s", 7, remote, []byte("SECRET"))
	got = all.String()
	for _, want := range []string{`cannot parse requestURI \"…\": bad request line or headers`, "7 connections from 192.0.2.1:4242, …"} {
		if !strings.Contains(got, want) || strings.Contains(got, "SECRET") {
			t.Errorf("log has no %q, or a request's bytes:\n%s", want, got)
		}
	}
}
