package cost

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseRSS(t *testing.T) {
	got, err := parseRSS("Name:\tseckill\nVmPeak:\t  9000 kB\nVmRSS:\t  123456 kB\nThreads:\t9\n")
	if err != nil || got != 123456<<10 {
		t.Fatalf("parseRSS = %d, %v; want %d", got, err, 123456<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\t-1 kB\n", "VmRSS:\tlots kB\n"} {
		if n, err := parseRSS(bad); err == nil {
			t.Errorf("parseRSS(%q) = %d, want an error", bad, n)
		}
	}
}

// soakOf is a soak whose windows have these RSS, bytes per order and p99,
// every accepted order in the database and a consistent reconcile.
func soakOf(rss []int64, perOrder, p99 []float64) SoakReport {
	rep := SoakReport{Accepted: 10, OrdersInDB: 10, Consistent: true}
	for i := range rss {
		rep.Windows = append(rep.Windows, SoakWindow{N: i + 1, ServiceRSS: rss[i], BytesPerOrder: perOrder[i], P99MS: p99[i]})
	}
	return rep
}

func TestSoakCompare(t *testing.T) {
	rep := soakOf([]int64{100, 200, 105}, []float64{80, 1, 81}, []float64{10, 99, 10.9})
	rep.compare(1)
	if rep.Flat == nil || rep.Flat.Early != 1 || rep.Flat.Last != 3 {
		t.Fatalf("Flat = %+v, want window 3 against 1", rep.Flat)
	}
	if !rep.Flat.Met() || !rep.Passed() {
		t.Errorf("within 10%%: Flat %+v met %v, passed %v; want both", *rep.Flat, rep.Flat.Met(), rep.Passed())
	}
	// Each figure out of the band on its own fails the soak.
	for name, r := range map[string]SoakReport{
		"rss":   soakOf([]int64{100, 111}, []float64{80, 80}, []float64{10, 10}),
		"bytes": soakOf([]int64{100, 100}, []float64{80, 71}, []float64{10, 10}),
		"p99":   soakOf([]int64{100, 100}, []float64{80, 80}, []float64{10, 11.5}),
	} {
		r.compare(1)
		if r.Flat == nil || r.Flat.Met() || r.Passed() {
			t.Errorf("%s out of the band: Flat %+v, passed %v; want not met", name, r.Flat, r.Passed())
		}
	}
	// An early window that is the last, or past it, compares nothing, and
	// a soak without a comparison does not pass.
	short := soakOf([]int64{100, 100}, []float64{80, 80}, []float64{10, 10})
	short.compare(2)
	if short.Flat != nil || short.Passed() {
		t.Errorf("early = last: Flat %+v, passed %v; want none, false", short.Flat, short.Passed())
	}
}

func TestSoakPassedNeedsEveryOrderAndReconcile(t *testing.T) {
	for name, edit := range map[string]func(*SoakReport){
		"missing order":  func(r *SoakReport) { r.OrdersInDB-- },
		"inconsistent":   func(r *SoakReport) { r.Consistent = false },
		"a problem":      func(r *SoakReport) { r.Problems = append(r.Problems, "window 2: 3 non-2xx replies") },
		"nothing bought": func(r *SoakReport) { r.Accepted, r.OrdersInDB = 0, 0 },
	} {
		rep := soakOf([]int64{100, 100}, []float64{80, 80}, []float64{10, 10})
		edit(&rep)
		rep.compare(1)
		if rep.Passed() {
			t.Errorf("%s: passed; want not", name)
		}
		var text, js bytes.Buffer
		PrintSoakText(&text, rep)
		if !strings.Contains(text.String(), "did NOT meet") {
			t.Errorf("%s: text report does not say it failed:\n%s", name, text.String())
		}
		if err := PrintSoakJSON(&js, rep); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Passed  *bool        `json:"passed"`
			Windows []SoakWindow `json:"windows"`
		}
		if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Passed == nil || *doc.Passed || len(doc.Windows) != 2 {
			t.Errorf("%s: JSON report %s (%v); want passed false and 2 windows", name, js.String(), err)
		}
	}
}
