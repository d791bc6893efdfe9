package service

import (
	"bytes"
	"context"
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

// harden makes two allocations for a request that brings its own id: one
// for the request's state (its writer, the id's header value and the
// context carrying them) and the request's copy with that context (the
// test's header map is the other two of the count). The context it hands
// on still carries the request's values and ends with the request's own.
// (Seen failing with the writer, the header value and context.WithValue's
// context allocated each on its own: 6 allocations in all.)
func TestHardenAllocationsAndContext(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler)}
	type probe struct{}
	var seen *http.Request
	h := s.harden(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = r }))
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), probe{}, "v"))
	req := httptest.NewRequest("GET", "/v1/sales/s1", nil).WithContext(parent)
	req.Header.Set("X-Request-Id", "req-1")
	w := headerOnlyWriter{h: http.Header{}}
	n := testing.AllocsPerRun(100, func() {
		w.h = make(http.Header)
		sinkHeader = w.h
		h.ServeHTTP(w, req)
	})
	if n > 4 {
		t.Errorf("harden and the header map: %v allocations, want at most 4", n)
	}
	if got := w.h.Get("X-Request-Id"); got != "req-1" || requestID(seen) != "req-1" {
		t.Fatalf("request id %q, in the context %q", got, requestID(seen))
	}
	if w.h.Add("X-Request-Id", "b"); len(w.h["X-Request-Id"]) != 2 {
		t.Fatalf("header %v", w.h)
	}
	ctx := seen.Context()
	if ctx.Value(probe{}) != "v" {
		t.Fatal("the request's context values are lost")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // hangs if the request's end does not reach the handler's contexts
	if ctx.Err() != context.Canceled {
		t.Fatalf("err %v", ctx.Err())
	}
}
