package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPercentiles was internal/bench/http/openloop's; it moved here with the code.
func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := PercentilesOf(ds)
	want := Percentiles{P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if got != want {
		t.Errorf("percentiles of 1..1000ms = %+v, want %+v", got, want)
	}
	if got := PercentilesOf(nil); got != (Percentiles{}) {
		t.Errorf("percentiles of nothing = %+v", got)
	}
}

// TestTimeline: with Timeline set, an attack writes its header and one line
// per request sent, scheduled 1/Rate apart, with the reply's status.
func TestTimeline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	a := Attack{Method: http.MethodPost, URL: srv.URL, Rate: 200, Duration: 100 * time.Millisecond,
		Timeout: 10 * time.Second, Conns: 4, MaxInFlight: 100, Timeline: &buf}
	r := a.Run(context.Background())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if r.Sent != 20 || len(lines) != 21 || lines[0] != TimelineHeader {
		t.Fatalf("sent %d, timeline of %d lines (want 21), first %q", r.Sent, len(lines), lines[0])
	}
	var prev float64
	for i, l := range lines[1:] {
		f := strings.Split(l, ",")
		due, err := strconv.ParseFloat(f[0], 64)
		if len(f) != 4 || err != nil || f[3] != "201" {
			t.Fatalf("line %d %q: want due,lag,latency,201", i+1, l)
		}
		if i > 0 && math.Abs(due-prev-5) > 0.01 {
			t.Errorf("line %d due %.3f, %.3f ms after the previous one, want 5", i+1, due, due-prev)
		}
		prev = due
	}
}

// timeline parses a run's timeline into its lines' fields: due (ms from
// the first request's), lag, latency and status.
func timeline(t *testing.T, text string) (due, lag, latency []float64, status []int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if lines[0] != TimelineHeader {
		t.Fatalf("timeline header %q", lines[0])
	}
	for _, l := range lines[1:] {
		var d, g, lat float64
		var s int
		if _, err := fmt.Sscanf(strings.ReplaceAll(l, ",", " "), "%f %f %f %d", &d, &g, &lat, &s); err != nil {
			t.Fatalf("timeline line %q: %v", l, err)
		}
		due, lag, latency, status = append(due, d), append(lag, g), append(latency, lat), append(status, s)
	}
	first := due[0]
	for i := range due {
		due[i] -= first
	}
	return due, lag, latency, status
}

// TestOpenSlowServer: over one connection, a server that stalls the first
// request 300 ms holds the others back; each latency still counts from its
// request's scheduled send, so every request ends at least 300 ms after
// the first was due, however late it was scheduled. The wait for the
// connection is the server's: it counts in the latency, not in the send lag.
func TestOpenSlowServer(t *testing.T) {
	const stall = 300 * time.Millisecond
	var arrived atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 1 {
			time.Sleep(stall)
		}
	}))
	defer srv.Close()
	var buf bytes.Buffer
	r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 200, Duration: 100 * time.Millisecond,
		Timeout: 10 * time.Second, Conns: 1, MaxInFlight: 100, Timeline: &buf}.Run(context.Background())
	if r.Sent != 20 || r.Completed != 20 || r.Status2xx != 20 {
		t.Fatalf("report %+v, want 20 sent and 2xx", r)
	}
	due, _, latency, _ := timeline(t, buf.String())
	for i := range due {
		if end := due[i] + latency[i]; end < ms(stall)-0.01 {
			t.Errorf("request %d (due at %.1f ms) ended %.1f ms after the first was due, before the stall's end (%v): its latency does not count from its schedule",
				i, due[i], end, stall)
		}
	}
	if r.LatencyMS.P50 < ms(stall)/2 {
		t.Errorf("latency p50 %.1f ms, want at least %.0f ms: most requests waited for the stall", r.LatencyMS.P50, ms(stall)/2)
	}
	if r.SendLagMS.P50 >= r.LatencyMS.P50/2 {
		t.Errorf("send lag p50 %.1f ms against latency p50 %.1f ms: the wait for the connection counted as the generator's lag", r.SendLagMS.P50, r.LatencyMS.P50)
	}
	if r.ConnWaited < 10 || r.ConnWaitMS.P50 < ms(stall)/4 {
		t.Errorf("%d sends waited for the connection, p50 %.1f ms: want most, the wait reported", r.ConnWaited, r.ConnWaitMS.P50)
	}
}

// TestOpenInFlightCap: against a server that takes 50 ms per request, 20
// requests 5 ms apart. The cap bounds the requests outstanding — on a
// connection or waiting for one — and every request after the first cap
// of them waits for it: its wait counts in its send lag. With the cap
// below Conns, it also bounds the requests on the wire.
func TestOpenInFlightCap(t *testing.T) {
	for _, tc := range []struct{ conns, cap int }{{4, 2}, {2, 4}} {
		t.Run(fmt.Sprintf("conns %d cap %d", tc.conns, tc.cap), func(t *testing.T) {
			var now, most atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := now.Add(1)
				defer now.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(50 * time.Millisecond)
			}))
			defer srv.Close()
			r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 200, Duration: 100 * time.Millisecond,
				Timeout: 10 * time.Second, Conns: tc.conns, MaxInFlight: tc.cap}.Run(context.Background())
			if r.Sent != 20 || r.Completed != 20 {
				t.Fatalf("report %+v, want 20 sent and completed", r)
			}
			if m := int(most.Load()); m > min(tc.conns, tc.cap) {
				t.Errorf("%d requests at the server at once, want at most %d", m, min(tc.conns, tc.cap))
			}
			// Request k ≥ cap is due at 5k ms; at most min(conns, cap)
			// run at once, 50 ms each, so the (k-cap+1)-th end comes
			// later than that: all 20-cap waited for the cap.
			if r.MaxInFlight != tc.cap || r.InFlightCap != tc.cap || r.CapReached != 20-tc.cap {
				t.Errorf("in flight at most %d of %d, %d sends waited for the cap; want %d of %d, %d",
					r.MaxInFlight, r.InFlightCap, r.CapReached, tc.cap, tc.cap, 20-tc.cap)
			}
			// The last request, due at 95 ms, entered flight after at
			// least 16 ends, 8 rounds of 50 ms.
			if r.SendLagMS.Max < 300 {
				t.Errorf("send lag max %.1f ms, want at least 300: the wait for the cap counts in it", r.SendLagMS.Max)
			}
		})
	}
}

// TestOpenTimeout: over one kept-alive connection, requests 20 ms apart
// with a 200 ms timeout, the 11th (sent some 200 ms after the connection's
// first) stalled by the server. It times out, no sooner than its timeout;
// the others, before and after it (on a new connection), get their replies.
func TestOpenTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	release := make(chan struct{})
	var arrived atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 11 {
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)
	var buf bytes.Buffer
	r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 50, Duration: 400 * time.Millisecond,
		Timeout: timeout, Conns: 1, MaxInFlight: 100, Timeline: &buf}.Run(context.Background())
	if r.Sent != 20 || r.Completed != 19 || r.Errors != 1 || r.ErrorsByKind["timeout"] != 1 {
		t.Fatalf("report %+v, want 20 sent, 19 replies, one timeout", r)
	}
	_, _, latency, status := timeline(t, buf.String())
	for i := range status {
		if want := i != 10; (status[i] == 200) != want {
			t.Errorf("request %d: status %d", i, status[i])
		}
	}
	if latency[10] < ms(timeout) {
		t.Errorf("the stalled request failed %.1f ms after it was due, before its timeout", latency[10])
	}
}

// TestOpenCancel: cancelling ctx stops the sending; the requests already
// sent, the one whose arrival cancelled and is slow to answer included,
// get their replies. A ctx cancelled before the run sends nothing.
func TestOpenCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var arrived atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 20 {
			cancel()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	defer srv.Close()
	a := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 1000, Duration: 10 * time.Second,
		Timeout: 10 * time.Second, Conns: 4, MaxInFlight: 100}
	r := a.Run(ctx)
	if r.Scheduled != 10000 || r.Sent < 20 || r.Sent >= r.Scheduled {
		t.Fatalf("scheduled %d, sent %d: want 10000 and between 20 and that", r.Scheduled, r.Sent)
	}
	if r.Errors != 0 || r.Completed != r.Sent || int(arrived.Load()) != r.Sent {
		t.Errorf("sent %d, completed %d, errors %d, %d arrived: every request sent must run to its reply",
			r.Sent, r.Completed, r.Errors, arrived.Load())
	}
	before := arrived.Load()
	if r := a.Run(ctx); r.Sent != 0 || arrived.Load() != before {
		t.Errorf("a cancelled ctx: sent %d, %d arrived; want none", r.Sent, arrived.Load()-before)
	}
}

// TestOpenEarlyHints: a server that sends 103 Early Hints at once and its
// final reply only after a stall. A request's latency ends with the final
// reply, not with the interim one, and its status is the final one's.
func TestOpenEarlyHints(t *testing.T) {
	const stall = 100 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		time.Sleep(stall)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 20, Duration: 200 * time.Millisecond,
		Timeout: 10 * time.Second, Conns: 4, MaxInFlight: 100}.Run(context.Background())
	if r.Sent != 4 || r.Status2xx != 4 || r.Errors != 0 {
		t.Fatalf("report %+v, want 4 sent, 4 2xx (the final replies)", r)
	}
	if r.LatencyMS.P50 < ms(stall) {
		t.Errorf("latency p50 %.1f ms, below the %v each final reply took: the interim reply ended it", r.LatencyMS.P50, stall)
	}
}

// TestOpenIdleClose: a server that closes a kept-alive connection once it
// has been idle 30 ms, with requests 100 ms apart over one connection.
// Each request finds its connection closed by the server while idle; it
// must go over a new one, not fail against the close (net/http's client
// does the same): no error, every request a reply.
func TestOpenIdleClose(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.IdleTimeout = 30 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 10, Duration: 600 * time.Millisecond,
		Timeout: 10 * time.Second, Conns: 1, MaxInFlight: 100}.Run(context.Background())
	if r.Sent != 6 || r.Status2xx != 6 || r.Errors != 0 {
		t.Errorf("report %+v, want 6 sent, 6 2xx, no error", r)
	}
	if n := conns.Load(); n < 2 {
		t.Errorf("%d connections: the server's idle timeout did not close any, the test tests nothing", n)
	}
}

// TestOpenGeneratorBehind: a rate no generator keeps up with (a million a
// second) against a server that answers at once. The sends fall far
// behind the schedule; the report must say so, not show a send lag of
// nothing and no note, as if the server alone had made the latencies.
func TestOpenGeneratorBehind(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	r := Attack{Method: http.MethodGet, URL: srv.URL, Rate: 1e6, Duration: 10 * time.Millisecond,
		Timeout: 10 * time.Second, Conns: 4, MaxInFlight: 1 << 20}.Run(context.Background())
	if r.Sent != 10000 || r.Status2xx != 10000 {
		t.Fatalf("report %+v, want 10000 sent and 2xx", r)
	}
	if r.SendRate > r.Rate/2 {
		t.Skipf("sent %.0f/s of %.0f/s: this machine kept up, the test tests nothing", r.SendRate, r.Rate)
	}
	behind := max(r.SendLagMS.Max, r.ConnWaitMS.Max)
	if behind < r.LatencyMS.P50/2 {
		t.Errorf("latency p50 %.1f ms, yet send lag max %.1f ms and connection wait max %.1f ms: the report hides how far the sends fell behind",
			r.LatencyMS.P50, r.SendLagMS.Max, r.ConnWaitMS.Max)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "note") {
		t.Errorf("sent %.0f/s of %.0f/s asked, and the report has no note:\n%s", r.SendRate, r.Rate, text.String())
	}
}

// TestOpenExtraHeader: as TestClosedExtraHeader, for the open loop.
func TestOpenExtraHeader(t *testing.T) {
	url, tokens, extra, check := extraHeaderServer(t)
	a := Attack{Method: http.MethodPost, URL: url, Tokens: tokens, Extra: extra,
		Rate: 500, Duration: 100 * time.Millisecond, Conns: 3, MaxInFlight: 8, Timeout: 10 * time.Second}
	if r := a.Run(context.Background()); r.Status2xx != 50 || r.Errors != 0 {
		t.Fatalf("report %+v, want 50 2xx", r)
	}
	check()
	a.Extra = extra[:10]
	if r := a.Run(context.Background()); r.Status2xx != 0 || r.Errors == 0 {
		t.Errorf("10 extra headers for 50 tokens: report %+v, want an error and nothing sent", r)
	}
}
