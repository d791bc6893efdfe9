package inventory

import (
	"time"

	"github.com/seckill/seckill/internal/gcra"
)

// Throttle limits how fast one buyer buys one sale (BuyRequest.Throttle): a
// GCRA token bucket, the algorithm of ratelimit's GCRA limits, decided by the
// same Lua function in the buy's own script. Tokens are refilled at Rate per
// Period (one every Period/Rate) into a bucket of Burst+1: Burst buys may come
// on top of the steady rate at once. A GCRA ratelimit.Limit l is the Throttle
// {Rate: l.Rate, Period: l.Period, Burst: l.Burst}.
type Throttle struct {
	// Rate is the buys per Period, at least 1.
	Rate int64
	// Period is a positive whole number of microseconds.
	Period time.Duration
	// Burst is 0 or more; (Burst+1) × Period in microseconds must not
	// exceed 2^52.
	Burst int64
}

// bucket is t in the units the script works in, or an error matching
// ErrInvalid.
func (t Throttle) bucket() (gcra.Bucket, error) {
	b := gcra.Bucket{Rate: t.Rate, PeriodUS: t.Period.Microseconds(), Capacity: t.Burst + 1}
	if t.Period%time.Microsecond != 0 || !b.Valid() {
		return gcra.Bucket{}, invalid("throttle", "needs a rate of at least 1, a positive period of whole microseconds and a burst of 0 or more, (burst+1) × period µs at most 2^52")
	}
	return b, nil
}

// throttleWindow is the span, in ms, of the hashes buy.lua keeps buyers'
// throttle states in for bucket b (0 for none): the smallest power of two,
// at least 1024, no shorter than the longest a state of b is kept (its
// whole capacity's wait, plus the ms gcra_take rounds up), so that a live
// state is in the hash of the window now falls in or the next one (or the
// one after, when the clock has stepped back by up to a window since the
// state was written: buy.lua reads all three).
func throttleWindow(b gcra.Bucket) int64 {
	if b.Rate == 0 {
		return 0
	}
	need := b.Capacity*b.PeriodUS/b.Rate/1000 + 2
	w := int64(1024)
	for w < need {
		w *= 2
	}
	return w
}
