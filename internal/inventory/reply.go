package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
)

// transientRetries is how many times a call whose script may or may not
// have run (the connection failed after sending it) is sent again. Only calls
// that are idempotent by construction are retried: a buy carries its order
// id, a restock its restock id, a cancel cancels once.
const transientRetries = 2

// retryTransient runs f again when it fails with a transport error (not a
// reply from Redis, not a cancelled context).
func (e *Engine) retryTransient(ctx context.Context, f func() ([]any, error)) ([]any, error) {
	return e.retryTransientAfter(ctx, 0, f)
}

// retryTransientAfter is retryTransient for a call already sent failed
// times (in a coalesced call that failed as a whole, say): it waits, then
// sends it only the attempts left.
func (e *Engine) retryTransientAfter(ctx context.Context, failed int, f func() ([]any, error)) ([]any, error) {
	wait := 10 * time.Millisecond
	for range failed {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait *= 4
	}
	for attempt := failed; ; attempt++ {
		reply, err := f()
		if err == nil || attempt == transientRetries || !transient(ctx, err) {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait *= 4
	}
}

func transient(ctx context.Context, err error) bool {
	var reply redis.Error
	switch {
	case ctx.Err() != nil, errors.As(err, &reply):
		return false
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable), errors.Is(err, ErrCorrupt):
		return false
	}
	return true
}

func unexpected(s *luascript.Script, reply []any) error {
	if code(reply) == codeCorrupt && len(reply) > 1 {
		return fmt.Errorf("%w: %s script found a bad value at %s", ErrCorrupt, s.Name, str(at(reply, 1)))
	}
	return fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, reply)
}

func limitOf(s Sale) int64 {
	if s.PerUserLimit == 0 {
		return 1
	}
	return s.PerUserLimit
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromUnixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func formatItems(items []Item) string {
	lines := make([]Line, len(items))
	for i, it := range items {
		lines[i] = Line{SKU: it.SKU, Qty: it.Stock}
	}
	return formatLines(lines)
}

// at is reply[i], or nil past its end; from is reply[i:], or nothing. A
// reply shorter than its script promises decodes as ErrCorrupt, never panics.
func at(reply []any, i int) any {
	if i < len(reply) {
		return reply[i]
	}
	return nil
}

func from(reply []any, i int) []any {
	if i < len(reply) {
		return reply[i:]
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = str(v)
	}
	return out
}

func ints(vs []any) ([]int64, error) {
	out := make([]int64, len(vs))
	for i, v := range vs {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("not an integer: %v", v)
		}
		out[i] = n
	}
	return out, nil
}

// OutcomeUnknown reports whether a buy that failed with err may have made
// its order all the same: any error but the engine's answers, which it
// gives only for a buy that made none. Taking a buy for unsure when it is
// not costs nothing (its order never arrives); the reverse would sell
// twice. On such an error the receipt's Order is the order the buy was sent
// as (Buy).
func OutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	for _, answer := range []error{ErrInvalid, ErrNotFound, ErrSoldOut, ErrLimitExceeded, ErrThrottled, ErrSaleNotActive,
		ErrFenced, ErrCorrupt, ErrIdempotencyMismatch, ErrTokenSpent} {
		if errors.Is(err, answer) {
			return false
		}
	}
	return true
}

// unsure is the receipt of a buy sent as placed that failed with err: the
// order it may have made when its outcome is unknown (OutcomeUnknown).
func unsure(placed Order, err error) Receipt {
	if OutcomeUnknown(err) {
		return Receipt{Order: placed}
	}
	return Receipt{}
}
