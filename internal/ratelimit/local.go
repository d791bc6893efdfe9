package ratelimit

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Local is an in-process GCRA limiter: the Fallback of a Limiter while Redis
// cannot be reached, or a limiter of its own for a single process. It keeps
// state for at most MaxKeys (key, limit) pairs, forgetting the least
// recently used first. It is safe for concurrent use.
//
// Each process enforces only its share of a limit, so that Instances
// processes together stay within it: a bucket of capacity/Instances tokens
// (at least 1) refilled at Rate per Instances×Period. A FixedWindow or
// SlidingWindow limit of Rate per Period becomes such a bucket of Rate tokens
// (GCRA with Burst Rate-1): never more than Rate at once, Rate per Period on
// average, but up to about twice Rate in one Period, like a fixed window
// across its boundary. A hit costing more than the share's capacity is
// refused; its RetryAfter is then only a hint.
type Local struct {
	instances int64
	maxKeys   int
	clock     Clock

	mu      sync.Mutex
	entries map[localKey]*list.Element // of *localEntry
	lru     *list.List                 // most recently used at the front
}

// LocalOptions configure a Local. The zero value of every field is usable.
type LocalOptions struct {
	// Instances is how many processes share each limit; each enforces
	// 1/Instances of it. Default 1, at most MaxInstances.
	Instances int
	// MaxKeys bounds how many (key, limit) pairs are remembered. Default
	// 100,000.
	MaxKeys int
	// Clock is the time source of Local's own Allow and AllowN; a Limiter
	// passes its own time to its Fallback. Default: the system clock.
	Clock Clock
}

// MaxInstances is the most instances a Local divides a limit among.
const MaxInstances = 1000

// localKey names one bucket: a caller's key under one limit.
type localKey struct {
	key                 string
	alg                 Algorithm
	rate, period, burst int64
}

// localEntry is a bucket's TAT, as gcra.lua keeps it: whole µs and the rest
// in units of 1/rate µs.
type localEntry struct {
	k           localKey
	tatUS, rest int64
}

// NewLocal returns an empty in-process limiter.
func NewLocal(opts LocalOptions) *Local {
	l := &Local{
		instances: int64(min(max(opts.Instances, 1), MaxInstances)),
		maxKeys:   opts.MaxKeys,
		clock:     opts.Clock,
		entries:   map[localKey]*list.Element{},
		lru:       list.New(),
	}
	if l.maxKeys <= 0 {
		l.maxKeys = 100_000
	}
	if l.clock == nil {
		l.clock = ClockFunc(time.Now)
	}
	return l
}

// Allow is AllowN with n = 1.
func (l *Local) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN is Limiter.AllowN in this process only, for this instance's share
// of limit. The arguments are checked the same way. ctx is not used: there
// is no I/O; it keeps the signature of Limiter.AllowN.
func (l *Local) AllowN(_ context.Context, key string, limit Limit, n int64) (Result, error) {
	if err := checkKey(key); err != nil {
		return Result{}, err
	}
	p, err := limit.check(n)
	if err != nil {
		return Result{}, err
	}
	return l.allowAt(key, p, n, l.clock.Now().UnixMicro()), nil
}

// Len returns how many (key, limit) pairs are remembered.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// share is this instance's bucket for the (checked) limit p.
func (l *Local) share(p params) params {
	capacity := p.capacity
	if p.alg != GCRA {
		capacity = p.rate
	}
	q := params{alg: GCRA, rate: p.rate, periodUS: p.periodUS * l.instances}
	// At least one token, and at most maxUnits units in the bucket (only a
	// huge window limit reaches that), so no sum below overflows.
	q.capacity = min(max(capacity/l.instances, 1), max(maxUnits/q.periodUS, 1))
	q.burst = q.capacity - 1
	return q
}

// allowAt is the GCRA step of gcra.lua, on this process' own buckets.
func (l *Local) allowAt(key string, p params, n, now int64) Result {
	q := l.share(p)
	limit := q.capacity * q.periodUS
	k := localKey{key: key, alg: p.alg, rate: p.rate, period: p.periodUS, burst: p.burst}

	l.mu.Lock()
	defer l.mu.Unlock()
	el := l.entries[k]
	var debt int64
	if el != nil {
		l.lru.MoveToFront(el)
		e := el.Value.(*localEntry)
		if d := e.tatUS - now; d >= 0 {
			// A TAT far ahead (the clock went back) is clamped, not overflowed.
			debt = min(d, 2*limit/q.rate+1)*q.rate + e.rest
		}
	}
	b := Bucket{Rate: q.rate, PeriodUS: q.periodUS, Capacity: q.capacity}
	if n > q.capacity {
		r := b.Result(false, debt, 1)
		r.RetryAfter = max(r.ResetAfter, usDuration(ceilDiv(q.periodUS, q.rate)))
		return r
	}
	after := debt + n*q.periodUS
	if after > limit {
		return b.Result(false, debt, n)
	}
	if el == nil {
		if l.lru.Len() >= l.maxKeys {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.entries, old.Value.(*localEntry).k)
		}
		el = l.lru.PushFront(&localEntry{k: k})
		l.entries[k] = el
	}
	e := el.Value.(*localEntry)
	e.tatUS, e.rest = now+after/q.rate, after%q.rate
	return b.Result(true, after, n)
}
