package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Fence is a fencing token: a number handed out with each successful
// Acquire of one lock, larger than every fence handed out for that lock
// before (within the limits stated in the package documentation). A
// protected resource that remembers the highest fence it has accepted and
// refuses lower ones cannot be written by a holder that was paused, lost
// its lock and woke up after a successor took over.
//
// Fences of different locks (or different prefixes) are unrelated.
// Fences start at 1; 0 is never a valid fence.
type Fence int64

// Admits reports whether a resource whose highest accepted fence is highest
// may accept a write fenced with f: f is valid and not older. Equal fences
// are admitted, so one holder may write several times. This is the rule
// Guard applies; resources kept elsewhere (a SQL row, another Lua script)
// must apply it in the same atomic step as the write, e.g.
//
//	UPDATE stock SET qty = $1, fence = $2 WHERE sku = $3 AND fence <= $2
func (f Fence) Admits(highest Fence) bool { return f >= 1 && f >= highest }

// GuardClient is the part of a go-redis client a Guard uses.
type GuardClient interface {
	redis.Scripter
	// HMGet reads a guarded value and its fence (Guard.Get).
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
}

// Guard keeps protected values in Redis, each with the highest fence that
// wrote it, and refuses writes that carry an older fence. It is the
// "protected resource" side of fencing: a holder that lost its lock without
// noticing (paused, partitioned) gets ErrStaleFence instead of overwriting
// its successor's work.
type Guard struct {
	c      GuardClient
	prefix string
}

// NewGuard returns a Guard whose keys start with prefix (DefaultGuardPrefix
// if empty): "{<prefix>:<resource>}:guard".
func NewGuard(c GuardClient, prefix string) (*Guard, error) {
	if c == nil {
		return nil, invalid("nil Redis client")
	}
	if prefix == "" {
		prefix = DefaultGuardPrefix
	}
	if err := checkName("key prefix", prefix); err != nil {
		return nil, err
	}
	return &Guard{c: c, prefix: prefix}, nil
}

// Set stores value for resource if f is not older than the highest fence
// the resource has accepted, and records f; check and write are one atomic
// step (fencedset.lua). A stale fence gets a *StaleFenceError
// (errors.Is(err, ErrStaleFence)) and changes nothing.
func (g *Guard) Set(ctx context.Context, resource string, f Fence, value string) error {
	if err := checkName("resource name", resource); err != nil {
		return err
	}
	if f < 1 {
		return invalid("fence %d: fences start at 1", f)
	}
	r := run(ctx, g.c, 0, fencedSetScript, []string{guardKey(g.prefix, resource)}, int64(f), value)
	switch {
	case r.err != nil:
		return r.err
	case r.refused():
		return &StaleFenceError{Resource: resource, Fence: f, Highest: Fence(r.num)}
	}
	return nil
}

// Get returns the value stored for resource and the fence that wrote it;
// fence 0 and an empty value if nothing was ever stored.
func (g *Guard) Get(ctx context.Context, resource string) (value string, f Fence, err error) {
	if err := checkName("resource name", resource); err != nil {
		return "", 0, err
	}
	vals, err := g.c.HMGet(ctx, guardKey(g.prefix, resource), "fence", "value").Result()
	if err != nil {
		return "", 0, &NodeError{Err: err}
	}
	if len(vals) != 2 || vals[0] == nil {
		return "", 0, nil
	}
	fs, _ := vals[0].(string)
	value, _ = vals[1].(string)
	n, err := strconv.ParseInt(fs, 10, 64)
	if err != nil {
		return "", 0, &NodeError{Err: errors.Join(fmt.Errorf("guard %q holds fence %q", resource, fs), err)}
	}
	return value, Fence(n), nil
}
