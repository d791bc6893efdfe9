package cost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestRoomRatios: each ratio is its phases' figures divided, the four with
// a target say whether it is met, and a ratio whose phase was not measured
// is 0 and neither met nor missed.
func TestRoomRatios(t *testing.T) {
	m := map[string]*Result{
		PhasePlainBuys:          {BuysPerS: 30_000, TotalUS: 45, P99MS: 10},
		PhaseJoins:              {BuysPerS: 36_000, TotalUS: 30, P99MS: 8},
		PhasePlaceReads:         {BuysPerS: 50_000, TotalUS: 54, P99MS: 5},
		PhaseAdmittedBuys:       {BuysPerS: 27_000, TotalUS: 49.5, P99MS: 11},
		PhaseAdmittedBuysLoaded: {BuysPerS: 24_000, TotalUS: 60, P99MS: 12.5},
		PhasePlainBuysLoaded:    {BuysPerS: 25_000, TotalUS: 58, P99MS: 12},
		PhaseAdmittedBuysOpen:   {BuysPerS: 2_000, TotalUS: 50, P99MS: 6.5},
		PhasePlainBuysOpen:      {BuysPerS: 2_000, TotalUS: 46, P99MS: 5},
	}
	want := []struct {
		value float64
		met   string // "yes", "no", "" (no target)
	}{{1.2, "yes"}, {1.2, "no"}, {12.5 / 12, "yes"}, {1.3, "no"}, {1.1, ""}, {1.25, ""}, {1.2, ""}, {1.1, ""}, {0.9, ""}}
	got := roomRatios(m)
	if len(got) != len(want) {
		t.Fatalf("%d ratios, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if math.Abs(g.Value-w.value) > 1e-9 {
			t.Errorf("%s = %v, want %v", g.Name, g.Value, w.value)
		}
		switch {
		case w.met == "" && (g.Met != nil || g.Target != ""):
			t.Errorf("%s: target %q, met %v; want no target", g.Name, g.Target, g.Met)
		case w.met != "" && (g.Met == nil || *g.Met != (w.met == "yes")):
			t.Errorf("%s = %v against %q: met %v, want %s", g.Name, g.Value, g.Target, g.Met, w.met)
		}
	}
	if got[0].Target != ">= 1" || got[1].Target != "< 1" || got[2].Target != "<= 1.2" || got[3].Target != "<= 1.2" {
		t.Errorf("targets %q, %q, %q, %q; want >= 1, < 1, <= 1.2, <= 1.2", got[0].Target, got[1].Target, got[2].Target, got[3].Target)
	}

	// Exactly on a bound: >= and <= are met, < is not.
	m[PhaseJoins].BuysPerS, m[PhasePlaceReads].TotalUS, m[PhaseAdmittedBuysLoaded].P99MS, m[PhasePlainBuysLoaded].P99MS = 30_000, 45, 12, 10
	got = roomRatios(m)
	if !*got[0].Met || *got[1].Met || !*got[2].Met {
		t.Errorf("on the bounds: met %v %v %v, want true false true", *got[0].Met, *got[1].Met, *got[2].Met)
	}

	// No admitted-buy phase measured (a run that failed there).
	delete(m, PhaseAdmittedBuysLoaded)
	got = roomRatios(m)
	if got[2].Value != 0 || got[2].Met != nil || got[0].Met == nil {
		t.Errorf("without the loaded phase: %+v; want value 0 and not judged, the others judged", got[2])
	}
}

func TestMeets(t *testing.T) {
	for _, tc := range []struct {
		v      float64
		target string
		want   bool
	}{{1, ">= 1", true}, {0.99, ">= 1", false}, {0.99, "< 1", true}, {1, "< 1", false},
		{1.2, "<= 1.2", true}, {1.2001, "<= 1.2", false}, {2, "> 1", true}, {1, "~ 1", false}, {1, "", false}} {
		if got := meets(tc.v, tc.target); got != tc.want {
			t.Errorf("meets(%v, %q) = %v, want %v", tc.v, tc.target, got, tc.want)
		}
	}
}

// TestRoomSummarize: medians per phase over the passes, in the phases'
// order whatever the order of the rows, the backgrounds' medians, and the
// ratios of the medians.
func TestRoomSummarize(t *testing.T) {
	bg := func(p99 float64) *Background { return &Background{RateAsked: 100, RoomWaiting: 500, P99MS: p99} }
	rep := RoomReport{Phases: []RoomPhase{
		{Phase: PhaseJoins, Result: Result{Round: 1, BuysPerS: 400}},
		{Phase: PhasePlainBuys, Result: Result{Round: 1, BuysPerS: 100, P99MS: 4}},
		{Phase: PhaseAdmittedBuysLoaded, Result: Result{Round: 1, P99MS: 6}, Background: bg(1)},
		{Phase: PhasePlainBuys, Result: Result{Round: 2, BuysPerS: 300, P99MS: 6}},
		{Phase: PhaseJoins, Result: Result{Round: 2, BuysPerS: 200}},
		{Phase: PhaseAdmittedBuysLoaded, Result: Result{Round: 2, P99MS: 4}, Background: bg(3)},
		{Phase: PhasePlainBuysLoaded, Result: Result{Round: 1, P99MS: 4}, Background: bg(1)},
		{Phase: PhasePlainBuysLoaded, Result: Result{Round: 2, P99MS: 6}, Background: bg(3)},
	}}.summarize()
	if len(rep.Medians) != 4 || rep.Medians[0].Phase != PhasePlainBuys || rep.Medians[1].Phase != PhaseJoins || rep.Medians[2].Phase != PhaseAdmittedBuysLoaded || rep.Medians[3].Phase != PhasePlainBuysLoaded {
		t.Fatalf("medians %+v, want plain-buys, joins, admitted-buys-loaded, plain-buys-loaded", rep.Medians)
	}
	if rep.Medians[0].BuysPerS != 200 || rep.Medians[0].P99MS != 5 || rep.Medians[1].BuysPerS != 300 || rep.Medians[0].Round != 0 {
		t.Errorf("medians %+v, want plain 200/s p99 5, joins 300/s, round 0", rep.Medians)
	}
	if b := rep.Medians[2].Background; b == nil || b.P99MS != 2 || b.RoomWaiting != 500 || rep.Medians[0].Background != nil {
		t.Errorf("background medians %+v and %+v, want p99 2 of 500 waiting, and none for plain buys", b, rep.Medians[0].Background)
	}
	if rep.Ratios[0].Value != 1.5 || rep.Ratios[2].Value != 1 {
		t.Errorf("ratios %+v, want joins/buys 1.5, loaded p99 1", rep.Ratios)
	}
}

// TestPrintRoomText: the table names every phase measured, the ratios say
// met or MISSED against their targets, and problems and the background
// are shown.
func TestPrintRoomText(t *testing.T) {
	rep := RoomReport{Bin: "/x/seckill", Conns: 4, DurationS: 1, Waiting: 200, Admitted: 100, ReadRate: 50, Phases: []RoomPhase{
		{Phase: PhasePlainBuys, Result: Result{Round: 1, BuysPerS: 1000, TotalUS: 40, P99MS: 10}},
		{Phase: PhaseJoins, Result: Result{Round: 1, BuysPerS: 900, TotalUS: 20, Problems: []string{"3 non-2xx"}}},
		{Phase: PhasePlaceReads, Result: Result{Round: 1, BuysPerS: 2000, TotalUS: 10}},
		{Phase: PhaseAdmittedBuysLoaded, Result: Result{Round: 1, BuysPerS: 800, P99MS: 11},
			Background: &Background{RateAsked: 50, RoomWaiting: 1234, SendRate: 49.5}},
		{Phase: PhasePlainBuysLoaded, Result: Result{Round: 1, BuysPerS: 900, P99MS: 10},
			Background: &Background{RateAsked: 50, RoomWaiting: 1234, SendRate: 49.5}},
	}}.summarize()
	var buf bytes.Buffer
	PrintRoomText(&buf, rep)
	out := buf.String()
	flat := strings.Join(strings.Fields(out), " ") // the table's padding aside
	for _, s := range []string{"req/s", PhasePlainBuys, PhaseJoins, PhasePlaceReads, PhaseAdmittedBuysLoaded,
		"joins/s ÷ plain buys/s 0.90 target >= 1: MISSED", "place-read CPU ÷ plain buy CPU (total µs) 0.25 target < 1: met",
		"admitted-buy p99 ÷ plain buy p99, closed loops, the same reads beside both 1.10 target <= 1.2: met",
		"admitted-buy p99 ÷ plain buy p99, closed loops, no reads - admitted-buy p99, reads beside ÷ plain buy p99, no reads 1.10",
		"pass 1 joins: 3 non-2xx", "on a room of 1234 waiting"} {
		if !strings.Contains(flat, s) {
			t.Errorf("the report has no %q:\n%s", s, out)
		}
	}
	if regexp.MustCompile(`(?m)^\s*median\s`).MatchString(out) {
		t.Errorf("one pass: no median rows wanted:\n%s", out)
	}
}

func TestCycle(t *testing.T) {
	if got := strings.Join(cycle([]string{"a", "b", "c"}, 7), ""); got != "abcabca" {
		t.Errorf("cycle = %q, want abcabca", got)
	}
}

// fakeRoom is a room over HTTP: a join answers "waiting", and each buyer
// is admitted at its admitAfter-th place read; the first read of every
// buyer is refused with 429 when limit is set.
type fakeRoom struct {
	mu         sync.Mutex
	joins      map[string]int
	reads      map[string]int
	admitAfter int
	limit      bool
}

func (f *fakeRoom) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	who := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if r.URL.Path != "/v1/sales/s/queue" {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodPost:
		f.joins[who]++
		if f.admitAfter == 0 {
			fmt.Fprintf(w, `{"sale_id":"s","status":"admitted","admission":"adm-%s"}`, who)
			return
		}
		fmt.Fprint(w, `{"sale_id":"s","status":"waiting","position":3}`)
	case http.MethodGet:
		if f.joins[who] == 0 {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		f.reads[who]++
		switch {
		case f.limit && f.reads[who] == 1:
			w.WriteHeader(http.StatusTooManyRequests)
		case f.reads[who] >= f.admitAfter:
			fmt.Fprintf(w, `{"sale_id":"s","status":"admitted","admission":"adm-%s"}`, who)
		default:
			fmt.Fprint(w, `{"sale_id":"s","status":"waiting","position":2}`)
		}
	}
}

// TestAdmit: admit joins every buyer once and returns each one's own
// admission, from the join's reply or from later reads, a 429 read being
// read again.
func TestAdmit(t *testing.T) {
	buyers := make([]string, 70)
	for i := range buyers {
		buyers[i] = fmt.Sprint("u", i)
	}
	for _, f := range []*fakeRoom{{admitAfter: 0}, {admitAfter: 2}, {admitAfter: 1, limit: true}} {
		f.joins, f.reads = map[string]int{}, map[string]int{}
		srv := httptest.NewServer(f)
		r := &round{base: srv.URL, env: &env{}}
		got, err := r.admit(context.Background(), "s", buyers)
		srv.Close()
		if err != nil || len(got) != len(buyers) {
			t.Fatalf("admit after %d reads (429 first: %v): %d admissions, %v", f.admitAfter, f.limit, len(got), err)
		}
		for i, b := range buyers {
			if got[i] != "adm-"+b || f.joins[b] != 1 {
				t.Errorf("admit after %d reads: buyer %s got %q after %d joins; want adm-%s after 1", f.admitAfter, b, got[i], f.joins[b], b)
			}
		}
	}
}

// TestNoRooms: a service that refuses the "admission" object, has no
// queue route or says the sale has no room is ErrNoRooms, before any load;
// another failure is not.
func TestNoRooms(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create int
		queue  func(w http.ResponseWriter)
		want   bool
	}{
		{"admission refused", http.StatusBadRequest, nil, true},
		{"no queue route", http.StatusCreated, func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }, true},
		{"no room", http.StatusCreated, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"code":"admission_not_enabled","message":"no room"}}`)
		}, true},
		{"a place without a status", http.StatusCreated, func(w http.ResponseWriter) { fmt.Fprint(w, `{}`) }, true},
		{"unavailable", http.StatusCreated, func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/admin/sales":
				w.WriteHeader(tc.create)
				fmt.Fprint(w, `{}`)
			case "/v1/sales/line/queue":
				tc.queue(w)
			default:
				http.NotFound(w, r)
			}
		}))
		r := &round{base: srv.URL, env: &env{secret: "s3cret", adminToken: "adm"}}
		err := r.createSale(context.Background(), "line", lineAdmission(10))
		if err == nil {
			err = r.probeRoom(context.Background(), "line")
		}
		srv.Close()
		if err == nil || errors.Is(err, ErrNoRooms) != tc.want {
			t.Errorf("%s: %v; want an error, ErrNoRooms %v", tc.name, err, tc.want)
		}
	}
}

// TestBackgroundProblems: a background that fell more than a tenth behind
// its rate, or had reads refused, says so; one that kept up says nothing.
func TestBackgroundProblems(t *testing.T) {
	if p := (&Background{RateAsked: 10_000, SendRate: 9_500, Status2xx: 100}).problems(); len(p) != 0 {
		t.Errorf("kept up: %q, want nothing", p)
	}
	p := (&Background{RateAsked: 10_000, SendRate: 1_800, Non2xx: 3}).problems()
	if len(p) != 2 || !strings.Contains(p[0], "1800/s of the 10000/s asked") || !strings.Contains(p[1], "3 background place reads non-2xx") {
		t.Errorf("fell behind, 3 refused: %q", p)
	}
}
