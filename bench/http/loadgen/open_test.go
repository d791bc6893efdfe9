package loadgen

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPercentiles was bench/http/openloop's; it moved here with the code.
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
