package gcra

import (
	"math"
	"testing"
	"time"
)

func TestBucketValid(t *testing.T) {
	for _, c := range []struct {
		b    Bucket
		want bool
	}{
		{Bucket{Rate: 1, PeriodUS: 1, Capacity: 1}, true},
		{Bucket{Rate: 0, PeriodUS: 1, Capacity: 1}, false},
		{Bucket{Rate: 1, PeriodUS: 0, Capacity: 1}, false},
		{Bucket{Rate: 1, PeriodUS: -1, Capacity: 1}, false},
		{Bucket{Rate: 1, PeriodUS: 1, Capacity: 0}, false},
		{Bucket{Rate: 1, PeriodUS: 1 << 20, Capacity: 1 << 32}, true},     // 2^52 units
		{Bucket{Rate: 1, PeriodUS: 1 << 20, Capacity: 1<<32 + 1}, false},  // one token more
		{Bucket{Rate: 5, PeriodUS: 1_000_000, Capacity: -1 << 63}, false}, // a burst that wrapped
	} {
		if got := c.b.Valid(); got != c.want {
			t.Errorf("%+v.Valid() = %v, want %v", c.b, got, c.want)
		}
	}
}

// A bucket of 3 tokens refilled 2 a second, drained: its debt is 3 tokens
// of 10^6 units. A hit of one fits once the debt is 2 tokens: after half a
// token's wait, 500 ms; it is full again after 1.5 s.
func TestBucketWaits(t *testing.T) {
	b := Bucket{Rate: 2, PeriodUS: 1_000_000, Capacity: 3}
	debt := int64(3_000_000)
	if got := b.Remaining(debt); got != 0 {
		t.Errorf("Remaining = %d, want 0", got)
	}
	if got := b.RetryAfterUS(debt, 1); got != 500_000 {
		t.Errorf("RetryAfterUS(1) = %d, want 500000", got)
	}
	if got := b.RetryAfterUS(debt, 3); got != 1_500_000 {
		t.Errorf("RetryAfterUS(3) = %d, want 1500000", got)
	}
	if got := b.ResetAfterUS(debt); got != 1_500_000 {
		t.Errorf("ResetAfterUS = %d, want 1500000", got)
	}
	// One unit more of debt rounds the wait up to the next µs.
	if got := b.RetryAfterUS(debt+1, 1); got != 500_001 {
		t.Errorf("RetryAfterUS(debt+1) = %d, want 500001", got)
	}
	// A hit that already fits still waits at least 1 µs when refused.
	if got := b.RetryAfterUS(0, 1); got != 1 {
		t.Errorf("RetryAfterUS(0) = %d, want 1", got)
	}
	if got := b.Remaining(1_500_000); got != 1 {
		t.Errorf("Remaining(1.5 tokens of debt) = %d, want 1", got)
	}
}

func TestDurationSaturates(t *testing.T) {
	if got := Duration(1500); got != 1500*time.Microsecond {
		t.Errorf("Duration(1500) = %v", got)
	}
	if got := Duration(math.MaxInt64 / 100); got != math.MaxInt64 {
		t.Errorf("Duration(huge) = %v, want the longest Duration", got)
	}
}
