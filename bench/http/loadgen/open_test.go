package loadgen

import (
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
