package service

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A panicking handler answers a plain 500 whose body says nothing of the
// panic; the stack goes to the log, with the request id.
func TestPanicIsAnsweredWithoutInternals(t *testing.T) {
	var logs bytes.Buffer
	s := &Service{log: slog.New(slog.NewTextHandler(&logs, nil))}
	h := s.harden(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("secret detail: db password hunter2")
	}))
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/sales/s1", nil)
	req.Header.Set("X-Request-Id", "req-1")
	h.ServeHTTP(w, req)
	if w.Code != http.StatusInternalServerError {
		t.Fatalf("status %d", w.Code)
	}
	if body := strings.TrimSpace(w.Body.String()); body != `{"error":{"code":"internal","message":"internal error"}}` {
		t.Fatalf("body %s", body)
	}
	if l := logs.String(); !strings.Contains(l, "hunter2") || !strings.Contains(l, "request_id=req-1") || !strings.Contains(l, "goroutine") {
		t.Fatalf("log lacks the panic, its stack or the request id:\n%s", l)
	}
}
