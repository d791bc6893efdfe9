package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// attack runs the command with --json against url and returns its exit
// status and report.
func attack(t *testing.T, url string, args ...string) (int, Report) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"--json", "--url", url}, args...), &stdout, &stderr)
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, report %q, stderr %q: %v", code, stdout.String(), stderr.String(), err)
	}
	return code, r
}

// TestRate: rate × duration requests are scheduled, all are sent and
// answered, and they are spread over the duration rather than sent at once.
func TestRate(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer srv.Close()

	begin := time.Now()
	code, r := attack(t, srv.URL, "--rate", "200", "--duration", "1s")
	elapsed := time.Since(begin)
	if code != 0 || !r.OK() {
		t.Errorf("exit %d, OK %v, want 0, true: %+v", code, r.OK(), r)
	}
	if r.Scheduled != 200 || r.Sent != 200 || r.Completed != 200 || r.Status2xx != 200 || len(arrivals) != 200 {
		t.Errorf("scheduled %d, sent %d, completed %d, 2xx %d, arrived %d; want 200 each",
			r.Scheduled, r.Sent, r.Completed, r.Status2xx, len(arrivals))
	}
	// The last request is due at 995 ms: no run that keeps the schedule
	// ends sooner, however fast the machine. The upper bounds are loose:
	// the machine is shared.
	if elapsed < 995*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("the run took %v, want 995ms to 5s", elapsed)
	}
	if len(arrivals) > 1 {
		if spread := arrivals[len(arrivals)-1].Sub(arrivals[0]); spread < 500*time.Millisecond {
			t.Errorf("requests arrived within %v, want them spread over about 1s", spread)
		}
	}
	if r.SendRate < 100 || r.SendRate > 400 {
		t.Errorf("send rate %.1f/s, want about 200/s", r.SendRate)
	}
}

// slowServer serves one request at a time, each in 50 ms: 20 requests a
// second at most.
func slowServer(t *testing.T) *httptest.Server {
	one := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		one <- struct{}{}
		time.Sleep(50 * time.Millisecond)
		<-one
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestLatencyFromSchedule: 100 requests a second for 300 ms to a server that
// answers 20 a second: the 30th request, due at 290 ms, is answered after
// 30 × 50 ms = 1.5 s, about 1.2 s late, and the latencies must show it.
func TestLatencyFromSchedule(t *testing.T) {
	// The server queues the requests: any client-side clock sees the wait.
	t.Run("server queues", func(t *testing.T) {
		_, r := attack(t, slowServer(t).URL, "--rate", "100", "--duration", "300ms")
		if r.Completed != 30 {
			t.Fatalf("completed %d, want 30", r.Completed)
		}
		if r.LatencyMS.P99 < 500 || r.LatencyMS.Max < 500 {
			t.Errorf("latency p99 %.1fms, max %.1fms, want the queueing (> 500ms) in them", r.LatencyMS.P99, r.LatencyMS.Max)
		}
	})
	// The generator may have one request in flight, like one of wrk's
	// connections: it sends each request only when the previous reply has
	// come, so each takes 50 ms from its actual send. Measured from the
	// actual send, the latencies would hide the wait (coordinated omission).
	t.Run("generator held back", func(t *testing.T) {
		_, r := attack(t, slowServer(t).URL, "--rate", "100", "--duration", "300ms", "--max-in-flight", "1")
		if r.Completed != 30 || r.MaxInFlight != 1 {
			t.Fatalf("completed %d, max in flight %d, want 30, 1", r.Completed, r.MaxInFlight)
		}
		if r.LatencyMS.P50 < 250 || r.LatencyMS.P99 < 500 || r.LatencyMS.Max < 500 {
			t.Errorf("latency p50 %.1fms, p99 %.1fms, max %.1fms: want p50 > 250ms and p99 > 500ms, measured from the schedule",
				r.LatencyMS.P50, r.LatencyMS.P99, r.LatencyMS.Max)
		}
		if r.SendLagMS.Max < 500 || r.CapReached == 0 {
			t.Errorf("send lag max %.1fms, cap reached %d times: want the sender's lag (> 500ms) reported", r.SendLagMS.Max, r.CapReached)
		}
	})
}

// TestLatencyIncludesBody: a latency ends with the reply's body, not its
// headers.
func TestLatencyIncludesBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		time.Sleep(100 * time.Millisecond)
		io.WriteString(w, "done")
	}))
	defer srv.Close()
	_, r := attack(t, srv.URL, "--rate", "100", "--duration", "50ms")
	if r.Completed != 5 || r.LatencyMS.P50 < 100 {
		t.Errorf("completed %d, latency p50 %.1fms; want 5, >= 100ms", r.Completed, r.LatencyMS.P50)
	}
}

// TestFailures: non-2xx replies and transport errors are counted and make
// the exit status 1; bad flags make it 2.
func TestFailures(t *testing.T) {
	t.Run("non-2xx", func(t *testing.T) {
		var mu sync.Mutex
		var n int
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			i := n
			mu.Unlock()
			switch i % 3 {
			case 0:
				w.WriteHeader(http.StatusServiceUnavailable)
			case 1:
				w.WriteHeader(http.StatusCreated)
			}
		}))
		defer srv.Close()
		code, r := attack(t, srv.URL, "--rate", "300", "--duration", "100ms")
		if code != 1 || r.OK() {
			t.Errorf("exit %d, OK %v, want 1, false", code, r.OK())
		}
		want := map[int]int{http.StatusServiceUnavailable: 10}
		if r.Completed != 30 || r.Status2xx != 20 || r.Non2xx != 10 || !maps.Equal(r.Non2xxByStatus, want) || r.Errors != 0 {
			t.Errorf("completed %d, 2xx %d, non-2xx %d %v, errors %d; want 30, 20, 10 %v, 0",
				r.Completed, r.Status2xx, r.Non2xx, r.Non2xxByStatus, r.Errors, want)
		}
		var text bytes.Buffer
		r.WriteText(&text)
		if !strings.Contains(text.String(), "non-2xx 10") || !strings.Contains(text.String(), "503 Service Unavailable × 10") {
			t.Errorf("text report does not show the 503s:\n%s", text.String())
		}
	})
	t.Run("errors", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // no reply
			}
		}))
		defer srv.Close()
		code, r := attack(t, srv.URL, "--rate", "100", "--duration", "100ms")
		if code != 1 || r.Errors != 10 || r.Completed != 0 || r.ErrorsByKind["connection closed before the reply (EOF)"] != 10 {
			t.Errorf("exit %d, errors %d %v, completed %d; want 1, 10 EOF, 0", code, r.Errors, r.ErrorsByKind, r.Completed)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		var stdout bytes.Buffer
		code := run(ctx, []string{"--json", "--url", srv.URL, "--rate", "100", "--duration", "10s"}, &stdout, io.Discard)
		var r Report
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if code != 1 || r.Scheduled != 1000 || r.Sent == 0 || r.Sent > 100 || r.Completed != r.Sent {
			t.Errorf("exit %d, scheduled %d, sent %d, completed %d; want 1, 1000, 1 to 100, all sent", code, r.Scheduled, r.Sent, r.Completed)
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{
			{"--rate", "10"},
			{"--url", "127.0.0.1:8080", "--rate", "10"},
			{"--url", "http://127.0.0.1:1"},
			{"--url", "http://127.0.0.1:1", "--rate", "-1"},
			{"--url", "http://127.0.0.1:1", "--rate", "1", "--duration", "100ms"},
			{"--url", "http://127.0.0.1:1", "--rate", "10", "--tokens", filepath.Join(t.TempDir(), "missing")},
			{"--url", "http://127.0.0.1:1", "--rate", "10", "--header", "no colon"},
			{"--url", "http://127.0.0.1:1", "--rate", "10", "--nope"},
			{"--url", "http://127.0.0.1:1", "--rate", "10", "extra"},
		} {
			if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
				t.Errorf("%q: exit %d, want 2", args, code)
			}
		}
	})
}

// TestRequests: the tokens go round robin, in schedule order, and the
// method, body and headers asked for are sent.
func TestRequests(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("t1\n\n  t2 \nt3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %s %q %q %s", r.Method, r.URL.Path,
			r.Header.Get("Authorization"), r.Header.Get("Content-Type"), r.Header.Get("X-Run"), body))
		mu.Unlock()
	}))
	defer srv.Close()

	// One request in flight at a time, so they arrive in schedule order.
	code, r := attack(t, srv.URL+"/v1/sales/hot/orders", "--tokens", tokens, "--rate", "300", "--duration", "100ms",
		"--max-in-flight", "1", "--header", "X-Run: r1")
	if code != 0 || r.Tokens != 3 {
		t.Errorf("exit %d, tokens %d, want 0, 3", code, r.Tokens)
	}
	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprintf(`POST /v1/sales/hot/orders Bearer t%d "application/json" "r1" {"items":[{"sku":"A","qty":1}]}`, i%3+1))
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Other method, body and content type; no tokens, no Authorization.
	got = nil
	attack(t, srv.URL+"/x", "--method", "PUT", "--body", "hi", "--content-type", "text/plain", "--rate", "100", "--duration", "20ms")
	if want := []string{`PUT /x  "text/plain" "" hi`, `PUT /x  "text/plain" "" hi`}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}
