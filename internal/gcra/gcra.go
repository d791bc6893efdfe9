// Package gcra is the generic cell rate algorithm that the rate limiter
// (ratelimit) and the buy's own throttle (inventory) share, so that both
// decide alike from one copy: its decision as a Lua function (gcra_take.lua),
// the clock every script that reads the time decides by (clock.lua), and the
// arithmetic that turns the debt gcra_take reports into what a caller is
// told (tokens left, when to retry, when the bucket is full again).
package gcra

import (
	_ "embed"
	"math"
	"time"
)

var (
	// ClockLua is the Lua source of script_now (clock.lua): the time a
	// script decides by, the Redis server's clock unless the caller passes
	// one (a test's). Prepended to every script that reads the time.
	//
	//go:embed clock.lua
	ClockLua string

	// TakeLua is the Lua source of gcra_take (gcra_take.lua), the GCRA
	// decision, prepended to every script that checks a bucket.
	//
	//go:embed gcra_take.lua
	TakeLua string
)

// MaxUnits is 2^52: the most a bucket may hold, in units of 1/rate µs
// (capacity × period µs), so that every sum gcra_take makes stays below
// 2^53, where Lua's doubles are exact.
const MaxUnits = 1 << 52

// Bucket is a token bucket in the units gcra_take works in: Capacity
// tokens, refilled at Rate per PeriodUS µs. One token is PeriodUS units of
// 1/Rate µs; a debt is the TAT minus now in those units.
type Bucket struct {
	Rate     int64 // tokens per period
	PeriodUS int64 // the period, µs
	Capacity int64 // tokens the bucket holds (burst+1)
}

// Valid reports whether gcra_take can decide by b: a positive rate, period
// and capacity whose product with the period is at most MaxUnits.
func (b Bucket) Valid() bool {
	return b.Rate >= 1 && b.PeriodUS >= 1 && b.Capacity >= 1 && b.Capacity <= MaxUnits/b.PeriodUS
}

// Remaining is the whole tokens left at a debt.
func (b Bucket) Remaining(debt int64) int64 {
	return max(b.Capacity*b.PeriodUS-debt, 0) / b.PeriodUS
}

// ResetAfterUS is the µs until the bucket is full again at a debt.
func (b Bucket) ResetAfterUS(debt int64) int64 { return ceilDiv(debt, b.Rate) }

// RetryAfterUS is the µs until a hit of cost n fits at a debt (at least 1):
// the debt falls by Rate units per µs, and the hit fits once debt +
// n × PeriodUS is at most Capacity × PeriodUS.
func (b Bucket) RetryAfterUS(debt, n int64) int64 {
	return max(ceilDiv(debt+n*b.PeriodUS-b.Capacity*b.PeriodUS, b.Rate), 1)
}

// Duration converts µs to a Duration, saturating instead of overflowing
// (a TAT far ahead, after Redis's clock stepped back, is a long wait, not a
// negative one).
func Duration(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// ceilDiv is a/b rounded up, for b > 0 (a/b for a <= 0 rounds toward 0).
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
