package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lease is one holder's claim on a lock, from a successful Acquire until
// Release or loss. Its methods are safe for concurrent use.
//
// The lease never claims more than it knows: it counts as held only until
// Until(), which is the local monotonic time at the start of the last acquire
// or renewal that a quorum confirmed, plus the TTL, minus the drift
// allowance. A renewal answered "not the owner" ends it at once; renewals
// that keep failing end it at Until(). Either way Context() is cancelled
// with a cause that wraps ErrLost, and the lease never becomes valid again.
type Lease struct {
	l     *Locker
	name  string
	keys  lockKeys
	token string
	fence Fence
	ttl   time.Duration
	drift time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	bg     context.Context // the Acquire ctx's values without its cancellation

	renewMu sync.Mutex // one renewal at a time (watchdog or Extend)

	mu     sync.Mutex
	until  time.Time   // valid strictly before this local (monotonic) time
	expiry *time.Timer // fires at until
	ended  error       // nil while held; then the context's cause

	stop       chan struct{} // closed by Release: the watchdog returns
	releaseOne sync.Once
	releaseErr error
}

func (l *Locker) newLease(ctx context.Context, name string, keys lockKeys, token string, fence Fence, cfg acquireConfig, until time.Time) *Lease {
	ls := &Lease{
		l: l, name: name, keys: keys, token: token, fence: fence,
		ttl: cfg.ttl, drift: l.driftFor(cfg.ttl),
		bg:    context.WithoutCancel(ctx),
		until: until,
		stop:  make(chan struct{}),
	}
	ls.ctx, ls.cancel = context.WithCancelCause(ls.bg)
	ls.mu.Lock()
	ls.expiry = time.AfterFunc(time.Until(until), ls.onExpiry)
	ls.mu.Unlock()
	if cfg.renew {
		go ls.watchdog()
	}
	return ls
}

// Name returns the lock's name.
func (ls *Lease) Name() string { return ls.name }

// Token returns the owner token (128 random bits, hex) stored in Redis
// while this lease holds the lock.
func (ls *Lease) Token() string { return ls.token }

// Fence returns the lease's fencing token. Pass it along with every write to
// a resource the lock protects, and have the resource refuse fences lower
// than one it has seen (Guard does that). See the package documentation for
// what it guarantees in quorum mode.
func (ls *Lease) Fence() Fence { return ls.fence }

// Context returns a context that is cancelled when the lease ends: its cause
// (context.Cause) wraps ErrLost if the lock was lost, or is ErrReleased.
// Do the protected work under it. It carries the values of the context
// given to Acquire, not its cancellation.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Until returns the local time until which the lock is known to be held,
// as far as this process can know (see Lease). It moves forward with each
// confirmed renewal.
func (ls *Lease) Until() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.until
}

// Extend renews the lock now, as the watchdog does: on success it is held
// for another TTL from the moment the renewal was sent. It returns an error
// wrapping ErrLost (and ends the lease) when a quorum of nodes no longer
// holds the lock for this owner, the lease's end cause if it has already
// ended, or the nodes' errors if the renewal could not be confirmed (the
// lease is then still valid until Until()).
func (ls *Lease) Extend(ctx context.Context) error { return ls.renew(ctx) }

// Release ends the lease: it cancels Context() (cause ErrReleased, unless
// the lease was lost first), stops the watchdog, and deletes the lock on
// every node that still holds it for this owner.
//
// It returns nil if a quorum confirmed the release; an error wrapping
// ErrLost if the lease had been lost, or the lock had expired or passed to
// another owner before the release (work done under it may have overlapped
// with another holder); otherwise the nodes' errors, and the lock expires
// by itself within one TTL. ctx bounds the wait for the nodes' answers.
// Later calls return the same result.
func (ls *Lease) Release(ctx context.Context) error {
	ls.releaseOne.Do(func() { ls.releaseErr = ls.doRelease(ctx) })
	return ls.releaseErr
}

func (ls *Lease) doRelease(ctx context.Context) error {
	ls.mu.Lock()
	lost := ls.ended
	if lost == nil {
		ls.endLocked(ErrReleased)
	}
	ls.mu.Unlock()
	close(ls.stop)

	n, q := len(ls.l.nodes), ls.l.quorum
	var t tally
	ls.l.fanOut(ctx, time.Time{}, all(n), func(i int) reply {
		return run(ctx, ls.l.nodes[i], i, releaseScript, ls.keys.slice()[:1], ls.token)
	}, func(r reply) bool {
		t.add(r)
		return false
	})
	ok, refused, errs := t.ok, t.refused, t.errs
	switch {
	case lost != nil:
		return lost
	case ok >= q:
		return nil
	case len(refused) > n-q:
		return fmt.Errorf("lock %q: %w: it had expired or passed to another owner before the release", ls.name, ErrLost)
	default:
		return fmt.Errorf("lock %q: release not confirmed, the lock expires by itself within %v: %w",
			ls.name, ls.ttl, ls.l.shortfall(ctx, "release", ok, refused, nil, errs, time.Time{}))
	}
}

// renew runs extend.lua on every node and, if a quorum confirms, moves
// Until() to start+TTL-drift, start being the local time before the
// renewal was sent.
func (ls *Lease) renew(ctx context.Context) error {
	ls.renewMu.Lock()
	defer ls.renewMu.Unlock()
	ls.mu.Lock()
	ended, until := ls.ended, ls.until
	ls.mu.Unlock()
	if ended != nil {
		return ended
	}

	n, q := len(ls.l.nodes), ls.l.quorum
	start := time.Now()
	opCtx, cancel := context.WithDeadline(ctx, until) // no use renewing once it may have expired
	defer cancel()
	var t tally
	ttlMS := ls.ttl.Milliseconds()
	ls.l.fanOut(opCtx, until, all(n), func(i int) reply {
		return run(opCtx, ls.l.nodes[i], i, extendScript, ls.keys.slice(), ls.token, ttlMS, 0)
	}, func(r reply) bool {
		t.add(r)
		return t.ok >= q || len(t.refused)+len(t.errs) > n-q
	})
	ok, refused, errs := t.ok, t.refused, t.errs

	switch {
	case ok >= q:
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.ended != nil {
			return ls.ended
		}
		next := start.Add(ls.ttl - ls.drift)
		if !time.Now().Before(next) {
			return ls.loseLocked(fmt.Errorf("lock %q: %w: renewal confirmed after the TTL could have run out", ls.name, ErrLost))
		}
		if next.After(ls.until) {
			ls.until = next
			ls.expiry.Reset(time.Until(next))
		}
		return nil
	case len(refused) > n-q:
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.ended != nil {
			return ls.ended
		}
		return ls.loseLocked(fmt.Errorf("lock %q: %w: %d of %d nodes no longer hold it for this owner",
			ls.name, ErrLost, len(refused), n))
	default:
		return fmt.Errorf("lock %q: renewal not confirmed: %w", ls.name, ls.l.shortfall(opCtx, "extend", ok, refused, nil, errs, until))
	}
}

// watchdog renews the lock every TTL/3 (sooner after a failed renewal)
// until the lease ends.
func (ls *Lease) watchdog() {
	interval := ls.ttl / 3
	retry := max(interval/3, time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-ls.ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		next := interval
		if err := ls.renew(ls.bg); err != nil {
			if ls.ctx.Err() != nil {
				return
			}
			next = retry
		}
		t.Reset(max(next-time.Since(start), 0))
	}
}

// onExpiry runs at Until(): unless a renewal moved it meanwhile, the lock
// may have expired in Redis, so the lease is lost.
func (ls *Lease) onExpiry() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ended != nil {
		return
	}
	if d := time.Until(ls.until); d > 0 {
		ls.expiry.Reset(d)
		return
	}
	ls.loseLocked(fmt.Errorf("lock %q: %w: no renewal confirmed within the %v TTL", ls.name, ErrLost, ls.ttl))
}

// loseLocked ends the lease as lost and, in the background, deletes the lock
// wherever it may still be held for this owner, so the next holder need not
// wait for the TTL. It returns cause.
func (ls *Lease) loseLocked(cause error) error {
	ls.endLocked(cause)
	go func() {
		ctx, cancel := context.WithTimeout(ls.bg, cleanupTimeout)
		defer cancel()
		ls.l.fanOut(ctx, time.Time{}, all(len(ls.l.nodes)), func(i int) reply {
			return run(ctx, ls.l.nodes[i], i, releaseScript, ls.keys.slice()[:1], ls.token)
		}, func(reply) bool { return false })
	}()
	return cause
}

func (ls *Lease) endLocked(cause error) {
	ls.ended = cause
	ls.cancel(cause)
	ls.expiry.Stop()
}
