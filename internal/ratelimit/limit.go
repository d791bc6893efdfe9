package ratelimit

import (
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/gcra"
)

// Algorithm selects how a Limit is enforced.
type Algorithm int

const (
	// GCRA, the generic cell rate algorithm (the zero value): a token bucket
	// of Burst+1 tokens refilled at Rate per Period, kept in Redis as one
	// timestamp per key. Smooth, O(1) memory, exact for any rate. The default.
	GCRA Algorithm = iota
	// FixedWindow counts hits per calendar window of length Period (windows
	// start at multiples of Period since the Unix epoch) and allows Rate per
	// window. Cheapest, but a client can make up to 2×Rate hits across a
	// window boundary.
	FixedWindow
	// SlidingWindow keeps a log of hit times and allows Rate hits in any
	// interval of length Period. Exact, but stores one sorted-set member per
	// hit counted, so Rate is at most MaxSlidingRate.
	SlidingWindow
)

// String returns "gcra", "fixed-window" or "sliding-window".
func (a Algorithm) String() string {
	switch a {
	case GCRA:
		return "gcra"
	case FixedWindow:
		return "fixed-window"
	case SlidingWindow:
		return "sliding-window"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Bounds of valid arguments.
const (
	// MaxPeriod is the longest Period a Limit may have.
	MaxPeriod = 366 * 24 * time.Hour
	// MaxSlidingRate is the largest Rate of a SlidingWindow limit: its log
	// holds up to Rate members per key.
	MaxSlidingRate = 100_000
	// maxExact is 2^53: Redis Lua computes in doubles, exact up to here.
	maxExact = 1 << 53
	// maxUnits is 2^52: the most a GCRA bucket may hold, in units of 1/rate µs
	// ((burst+1) × period µs), so every sum in gcra.lua stays below 2^53.
	maxUnits = gcra.MaxUnits
	// MaxKeyLen is the longest key a caller may pass.
	MaxKeyLen = 200
)

// A Limit says how many hits a key may make per period, and how.
//
// For FixedWindow and SlidingWindow, Rate hits are allowed per Period and
// Burst is ignored. For GCRA, tokens are refilled at Rate per Period (one
// every Period/Rate, the emission interval) into a bucket of Burst+1 tokens:
// Burst is how many hits may come on top of the steady rate at once, so
// Burst 0 spaces hits at least Period/Rate apart and Burst Rate-1 allows a
// whole period's worth at once.
//
// Every key keeps separate state per Limit: using two limits on one key
// checks them independently, and changing a key's limit starts it afresh.
type Limit struct {
	// Algorithm is how the limit is enforced; the zero value is GCRA.
	Algorithm Algorithm
	// Rate is the number of hits per Period, at least 1.
	Rate int64
	// Period is a positive whole number of microseconds, at most MaxPeriod.
	Period time.Duration
	// Burst (GCRA only) is the number of hits allowed on top of the steady
	// rate at once; 0 or more. (Burst+1) × Period in microseconds must not
	// exceed 2^52 (for a period of an hour: a burst of up to 1.25 million).
	Burst int64
}

// PerSecond is a GCRA limit of rate hits per second with the given burst.
func PerSecond(rate, burst int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Second, Burst: burst}
}

// PerMinute is a GCRA limit of rate hits per minute with the given burst.
func PerMinute(rate, burst int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Minute, Burst: burst}
}

// PerHour is a GCRA limit of rate hits per hour with the given burst.
func PerHour(rate, burst int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Hour, Burst: burst}
}

// Fixed is a FixedWindow limit of rate hits per window.
func Fixed(rate int64, window time.Duration) Limit {
	return Limit{Algorithm: FixedWindow, Rate: rate, Period: window}
}

// Sliding is a SlidingWindow limit of rate hits in any interval of length window.
func Sliding(rate int64, window time.Duration) Limit {
	return Limit{Algorithm: SlidingWindow, Rate: rate, Period: window}
}

// params is a validated Limit in the units the scripts use.
type params struct {
	alg      Algorithm
	rate     int64 // hits per period
	periodUS int64 // period in microseconds
	burst    int64
	capacity int64 // GCRA: burst+1 tokens
}

// check validates limit and a cost of n against it.
func (limit Limit) check(n int64) (params, error) {
	p := params{alg: limit.Algorithm, rate: limit.Rate, burst: limit.Burst}
	switch {
	case limit.Algorithm != GCRA && limit.Algorithm != FixedWindow && limit.Algorithm != SlidingWindow:
		return p, invalid("limit.algorithm", "is unknown (%d)", int(limit.Algorithm))
	case limit.Rate < 1:
		return p, invalid("limit.rate", "must be at least 1, is %d", limit.Rate)
	case limit.Rate > maxExact:
		return p, invalid("limit.rate", "must be at most 2^53, is %d", limit.Rate)
	case limit.Algorithm == SlidingWindow && limit.Rate > MaxSlidingRate:
		return p, invalid("limit.rate", "of a sliding window must be at most %d, is %d (use GCRA)", MaxSlidingRate, limit.Rate)
	case limit.Period <= 0:
		return p, invalid("limit.period", "must be positive, is %v", limit.Period)
	case limit.Period%time.Microsecond != 0:
		return p, invalid("limit.period", "must be whole microseconds, is %v", limit.Period)
	case limit.Period > MaxPeriod:
		return p, invalid("limit.period", "must be at most %v, is %v", MaxPeriod, limit.Period)
	case limit.Burst < 0:
		return p, invalid("limit.burst", "must not be negative, is %d", limit.Burst)
	case n < 1:
		return p, invalid("n", "must be at least 1, is %d", n)
	}
	p.periodUS = limit.Period.Microseconds()
	if limit.Algorithm != GCRA {
		if n > limit.Rate {
			return p, invalid("n", "must not exceed the rate %d, is %d: it could never be allowed", limit.Rate, n)
		}
		return p, nil
	}
	if limit.Burst >= maxUnits/p.periodUS {
		return p, invalid("limit.burst", "too large: (burst+1) × period in µs must not exceed 2^52")
	}
	p.capacity = limit.Burst + 1
	if n > p.capacity {
		return p, invalid("n", "must not exceed burst+1 = %d, is %d: it could never be allowed", p.capacity, n)
	}
	return p, nil
}

// checkKey validates a caller's key: 1 to MaxKeyLen characters of
// A-Z a-z 0-9 _ . : -
func checkKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return invalid("key", "must be 1 to %d characters, is %d", MaxKeyLen, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return invalid("key", "may only hold A-Z a-z 0-9 _ . : - (has %q at %d)", c, i)
		}
	}
	return nil
}

// Validate reports whether a call with key, limit and cost n would be
// accepted: nil, or an *InvalidError matching ErrInvalid.
func Validate(key string, limit Limit, n int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := limit.check(n)
	return err
}

// ParseLimit reads a limit written as "<rate>/<period>[,burst=<n>][,alg=<algorithm>]":
// the period is a unit (s, m, h) or a Go duration ("500ms", "10s"), the
// algorithm gcra (the default), fixed-window or sliding-window. Without a
// burst, a GCRA limit gets Burst rate-1, so "3/m" allows 3 at once and 3 a
// minute, as the windows do; "3/m,burst=0" spaces them 20 s apart. Examples:
// "5/s,burst=10", "300/m", "2/500ms", "100/m,alg=sliding-window". The limit
// is checked as AllowN checks it; an error is an *InvalidError.
func ParseLimit(s string) (Limit, error) {
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, invalid("limit", "%q: "+format, append([]any{s}, args...)...)
	}
	head, opts, _ := strings.Cut(s, ",")
	rate, period, ok := strings.Cut(strings.TrimSpace(head), "/")
	if !ok {
		return bad("want <rate>/<period>, e.g. 5/s")
	}
	var l Limit
	var err error
	if l.Rate, err = strconv.ParseInt(rate, 10, 64); err != nil {
		return bad("rate %q is not a whole number", rate)
	}
	switch period {
	case "s":
		l.Period = time.Second
	case "m":
		l.Period = time.Minute
	case "h":
		l.Period = time.Hour
	default:
		if l.Period, err = time.ParseDuration(period); err != nil {
			return bad("period %q is neither s, m, h nor a duration", period)
		}
	}
	burst := int64(-1)
	for opt := range strings.SplitSeq(opts, ",") {
		if opt = strings.TrimSpace(opt); opt == "" {
			continue
		}
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "burst":
			if burst, err = strconv.ParseInt(v, 10, 64); err != nil || burst < 0 {
				return bad("burst %q is not a whole number of 0 or more", v)
			}
		case "alg":
			switch v {
			case GCRA.String():
				l.Algorithm = GCRA
			case FixedWindow.String():
				l.Algorithm = FixedWindow
			case SlidingWindow.String():
				l.Algorithm = SlidingWindow
			default:
				return bad("alg %q is not gcra, fixed-window or sliding-window", v)
			}
		default:
			return bad("unknown option %q (burst=, alg=)", k)
		}
	}
	switch {
	case l.Algorithm != GCRA && burst >= 0:
		return bad("burst applies to gcra only")
	case l.Algorithm == GCRA && burst >= 0:
		l.Burst = burst
	case l.Algorithm == GCRA && l.Rate > 0:
		l.Burst = l.Rate - 1
	}
	if _, err := l.check(1); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// String writes the limit as ParseLimit reads it.
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(l.Rate, 10) + "/")
	switch l.Period {
	case time.Second:
		b.WriteString("s")
	case time.Minute:
		b.WriteString("m")
	case time.Hour:
		b.WriteString("h")
	default:
		b.WriteString(l.Period.String())
	}
	if l.Algorithm == GCRA && l.Burst != l.Rate-1 {
		b.WriteString(",burst=" + strconv.FormatInt(l.Burst, 10))
	}
	if l.Algorithm != GCRA {
		b.WriteString(",alg=" + l.Algorithm.String())
	}
	return b.String()
}
