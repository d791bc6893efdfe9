// Package ratelimit limits how often a key (a user, an IP address, a token)
// may do something, across every instance of a service, with the state in
// Redis. Three algorithms, each one atomic Lua script touching one key:
//
//   - GCRA (the default): a token bucket of Burst+1 tokens refilled at Rate
//     per Period, stored as one timestamp per key. Exact for any rate.
//   - FixedWindow: a counter per calendar window of Period.
//   - SlidingWindow: a log of hit times; Rate hits in any interval of Period.
//
// The time is the Redis server's (TIME, read inside each script): every
// instance sharing a Redis node decides by the one clock, so an instance
// whose own clock runs fast neither opens windows early nor charges a key
// for time that has not passed elsewhere. (Options.ScriptClock stands in for
// it in tests.) A refused hit changes nothing: it is not counted, not
// logged, takes no tokens. A hit costing n (AllowN) counts as n hits.
//
// When Redis cannot be reached, a Limiter with a Fallback answers from an
// in-process limiter (Local) instead, with each instance enforcing its share
// of the limit, and marks the Result Degraded.
//
// Every key of a caller's key k carries the hash tag {<prefix>:rl:<k>} (see
// keys.go), so the package works on Redis Cluster as on a single node.
//
// What it does not do: check several limits on one key atomically (call
// once per limit; a hit allowed by the first and refused by the second has
// still counted for the first), or promise exactly-once
// counting when a reply is lost (a retried call may count twice, never
// zero times).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
)

// Client is the part of a go-redis client the limiter uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and a Sentinel-backed *redis.Client all
// satisfy it, and so does any wrapper that embeds one (to inject faults, say).
type Client interface {
	redis.Scripter
}

// Clock tells the limiter the time; tests inject their own.
type Clock interface{ Now() time.Time }

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }

// Options configure a Limiter. The zero value of every field is usable.
type Options struct {
	// Prefix starts the hash tag of every key: "{<Prefix>:rl:<key>}...".
	// It must not contain '{' or '}'. Default "seckill".
	Prefix string
	// Clock is this process's time, which the Fallback decides by (Redis
	// cannot be asked for its own then). Default: the system clock.
	Clock Clock
	// ScriptClock, for tests only, stands in for the Redis server's clock
	// in the scripts, so that a test can move time. Leave it nil in
	// production.
	ScriptClock Clock
	// Fallback, if set, answers when Redis cannot be asked (the connection
	// is refused or lost, a timeout, LOADING, MASTERDOWN, CLUSTERDOWN,
	// TRYAGAIN); the Result is then Degraded. Any other error — a reply
	// such as WRONGTYPE, ErrCorrupt, ctx ending — is returned as it is.
	// Without a Fallback every error is returned. How long a call takes to
	// find Redis unreachable is up to the client: its DialTimeout,
	// DialerRetries and MaxRetries (go-redis retries a failed command 3
	// times by default, with backoff); keep them short on a client used
	// with a Fallback.
	Fallback *Local
	// OnFallback, if set, is called with the Redis error each time the
	// Fallback answers instead of Redis, to log or count it.
	OnFallback func(key string, err error)
}

// Result is the answer to one call.
type Result struct {
	// Allowed reports whether the hit was allowed (and counted).
	Allowed bool
	// Remaining is how many hits of cost 1 would be allowed right after
	// this call, if no time passed.
	Remaining int64
	// RetryAfter is, for a refused hit, how long until the same call would
	// be allowed if no other hits came, to the microsecond; 0 when allowed.
	// For an HTTP Retry-After header round it up to whole seconds:
	// (RetryAfter + time.Second - 1) / time.Second.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full allowance
	// if no other hits come (0 if it is already).
	ResetAfter time.Duration
	// Degraded reports that Redis could not be asked and Options.Fallback
	// answered, enforcing this instance's share of the limit only.
	Degraded bool
}

// Limiter enforces limits with state in Redis. It is safe for concurrent
// use; create one per Redis client.
type Limiter struct {
	run        scriptRunner
	prefix     string
	clock      Clock
	scriptNow  Clock // nil: Redis's own clock
	fallback   *Local
	onFallback func(key string, err error)
	// instance and seq make the sliding-window log members unique across
	// every call of every Limiter (see sliding.lua).
	instance string
	seq      atomic.Uint64
}

// New returns a limiter that keeps its state in rdb.
func New(rdb Client, opts Options) *Limiter {
	l := &Limiter{
		run:        scriptRunner{rdb: rdb},
		prefix:     opts.Prefix,
		clock:      opts.Clock,
		scriptNow:  opts.ScriptClock,
		fallback:   opts.Fallback,
		onFallback: opts.OnFallback,
		instance:   strconv.FormatUint(rand.Uint64(), 36),
	}
	if l.prefix == "" {
		l.prefix = "seckill"
	}
	if l.clock == nil {
		l.clock = ClockFunc(time.Now)
	}
	return l
}

// Allow is AllowN with n = 1.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN reports whether key may make a hit of cost n (n hits at once) under
// limit now, and counts it if so. A refused hit changes nothing.
//
// key is 1 to MaxKeyLen characters of A-Z a-z 0-9 _ . : - ("user:alice").
// An invalid key, limit or n is an *InvalidError (ErrInvalid), and Redis is
// not asked. n may not exceed what the limit can ever allow: Rate for the
// windows, Burst+1 for GCRA.
//
// A call whose reply is lost may have counted, and go-redis may send it
// again: a lost reply can cost the key a hit, never give one away.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	if err := checkKey(key); err != nil {
		return Result{}, err
	}
	p, err := limit.check(n)
	if err != nil {
		return Result{}, err
	}
	res, err := l.allow(ctx, key, p, n)
	if err != nil && l.fallback != nil && unavailable(ctx, err) {
		if l.onFallback != nil {
			l.onFallback(key, err)
		}
		res = l.fallback.allowAt(key, p, n, l.clock.Now().UnixMicro())
		res.Degraded = true
		return res, nil
	}
	return res, err
}

// ScriptReloads counts the calls that found their script missing from a
// node's cache and sent it again.
func (l *Limiter) ScriptReloads() int64 { return l.run.reloads.Load() }

// allow runs the limit's script for a hit of cost n, now.
func (l *Limiter) allow(ctx context.Context, key string, p params, n int64) (Result, error) {
	var (
		s    *luascript.Script
		k    string
		args []any
		now  any = "" // the script reads Redis's clock
	)
	if l.scriptNow != nil {
		now = l.scriptNow.Now().UnixMicro()
	}
	switch p.alg {
	case FixedWindow:
		s, k = fixedScript, l.fixedKeys(key, p)
		args = []any{p.rate, n, ceilDiv(p.periodUS, 1000), p.periodUS, now}
	case SlidingWindow:
		member := l.instance + "-" + strconv.FormatUint(l.seq.Add(1), 36)
		s, k = slidingScript, l.slidingKey(key, p)
		args = []any{now, p.periodUS, p.rate, n, member, ceilDiv(p.periodUS, 1000)}
	default:
		s, k = gcraScript, l.gcraKey(key, p)
		args = []any{now, p.rate, p.periodUS, p.capacity, n}
	}
	reply, err := l.run.run(ctx, s, []string{k}, args...)
	if errors.Is(err, ErrCorrupt) {
		return Result{}, err
	}
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: %s script: %w", s.Name, err)
	}
	return decode(s, p, n, reply)
}

// Outcome codes of the scripts; each .lua file lists the ones it replies.
const (
	codeAllowed = 0
	codeRefused = 1
	codeCorrupt = 8
)

// decode turns a script's reply into a Result: the one place that knows
// what the replies mean. Times in replies are µs (fixed, sliding: the last
// element is the time the script decided at) or units of 1/rate µs (GCRA).
func decode(s *luascript.Script, p params, n int64, reply []int64) (Result, error) {
	bad := func() (Result, error) {
		return Result{}, fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, reply)
	}
	code := reply[0]
	switch {
	case code == codeCorrupt:
		return Result{}, fmt.Errorf("%w: %s script found a stored value it did not write", ErrCorrupt, s.Name)
	case code != codeAllowed && code != codeRefused:
		return bad()
	}
	allowed := code == codeAllowed
	switch p.alg {
	case FixedWindow:
		if len(reply) != 3 {
			return bad()
		}
		count, now := reply[1], reply[2]
		// The window ends at the next multiple of the period.
		end := (floorDiv(now, p.periodUS) + 1) * p.periodUS
		r := Result{Allowed: allowed, Remaining: max(p.rate-count, 0), ResetAfter: usDuration(end - now)}
		if !allowed {
			r.RetryAfter = r.ResetAfter
		}
		return r, nil
	case SlidingWindow:
		count := reply[1]
		if allowed {
			if len(reply) != 3 {
				return bad()
			}
			// The newest hit is this one: the window is empty a period later.
			return Result{Allowed: true, Remaining: max(p.rate-count, 0), ResetAfter: usDuration(p.periodUS)}, nil
		}
		if len(reply) != 5 {
			return bad()
		}
		free, last, now := reply[2], reply[3], reply[4]
		return Result{
			Remaining:  max(p.rate-count, 0),
			RetryAfter: usDuration(max(free+p.periodUS-now, 1)),
			ResetAfter: usDuration(max(last+p.periodUS-now, 0)),
		}, nil
	default:
		if len(reply) != 2 {
			return bad()
		}
		return Bucket{Rate: p.rate, PeriodUS: p.periodUS, Capacity: p.capacity}.Result(allowed, reply[1], n), nil
	}
}

// Bucket is a GCRA Limit in the units gcra_take (GCRATakeLua) works in.
type Bucket struct {
	Rate     int64 // tokens per period
	PeriodUS int64 // the period, µs
	Capacity int64 // burst+1 tokens
}

// Bucket returns a GCRA limit's bucket, or an error matching ErrInvalid if
// the limit is not a valid GCRA limit.
func (limit Limit) Bucket() (Bucket, error) {
	if limit.Algorithm != GCRA {
		return Bucket{}, invalid("limit.algorithm", "must be gcra for a bucket, is %s", limit.Algorithm)
	}
	p, err := limit.check(1)
	if err != nil {
		return Bucket{}, err
	}
	return Bucket{Rate: p.rate, PeriodUS: p.periodUS, Capacity: p.capacity}, nil
}

// Result describes the bucket after a hit of cost n that gcra_take allowed
// or refused. debt is TAT - now in units of 1/rate µs: after the hit if
// allowed, as it stands if not. One token is PeriodUS units; the bucket
// holds Capacity. (The arithmetic is the GCRA's, shared with the
// inventory's buy throttle.)
func (b Bucket) Result(allowed bool, debt, n int64) Result {
	g := gcra.Bucket(b)
	r := Result{
		Allowed:    allowed,
		Remaining:  g.Remaining(debt),
		ResetAfter: usDuration(g.ResetAfterUS(debt)),
	}
	if !allowed {
		r.RetryAfter = usDuration(g.RetryAfterUS(debt, n))
	}
	return r
}

// floorDiv is a/b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// usDuration converts µs to a Duration, saturating instead of overflowing.
func usDuration(us int64) time.Duration { return gcra.Duration(us) }
