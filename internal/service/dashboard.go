package service

import (
	_ "embed"
	"net/http"
	"time"
)

//go:embed dashboard.html
var dashboardPage []byte

// dashboard serves the live page. Everything it needs is in the page; its
// numbers come from GET /v1/live.
func (s *Service) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self' data:")
	_, _ = w.Write(dashboardPage)
}

// liveEvents streams the live view as server-sent events: the newest sample
// at once, then each new one (event "sample", data the JSON of liveView).
// With Accept other than text/event-stream it answers the newest sample
// once, as JSON. Streams are capped per client address and in all
// (streams.go).
func (s *Service) liveEvents(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("Accept") != "text/event-stream" {
		_, b := s.live.current()
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write(append(b, '\n'))
		return err
	}
	release, err := s.streams.take(s.clientIP(r))
	if err != nil {
		return err
	}
	defer release()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	samples, unsubscribe := s.live.subscribe()
	defer unsubscribe()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		var chunk []byte
		select {
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		case b := <-samples:
			chunk = append(append(append([]byte("event: sample\ndata: "), b...), '\n'), '\n')
		case <-keepAlive.C:
			chunk = []byte(": keep-alive\n\n")
		}
		// The server's write timeout is for requests, not streams.
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(chunk); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}
