package lock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the Locker uses: scripts only.
// *redis.Client, *redis.ClusterClient, *redis.Ring, a Sentinel-backed
// *redis.Client and any wrapper that embeds one (to inject faults) satisfy it.
//
// go-redis bounds a command's socket I/O by ReadTimeout/WriteTimeout, not by
// the context, unless ContextTimeoutEnabled is set. The Locker never waits
// for a node past the moment its answer stops mattering, but a slow node
// still holds a connection until its timeout: keep those timeouts well below
// the lock TTL.
type Client interface {
	redis.Scripter
}

// Options configure a Locker. The zero value of every field is usable.
type Options struct {
	// Prefix starts every key: "{<Prefix>:<lock name>}:lock". Default
	// DefaultPrefix. Holders of one lock must use the same prefix.
	Prefix string
	// DriftFactor is the share of the TTL set aside for clocks that run at
	// different rates: a lease counts as valid until
	// start + TTL - (TTL*DriftFactor + 2ms), where start is the local
	// (monotonic) time just before the acquire or renewal that succeeded
	// was sent. 0 means 0.01, as in the Redlock description; at most 0.5.
	DriftFactor float64
}

const (
	// DefaultTTL is the lock TTL when Acquire gets no WithTTL.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest TTL Acquire accepts.
	MinTTL = 10 * time.Millisecond
)

const (
	defaultDriftFactor = 0.01
	minDrift           = 2 * time.Millisecond
	// cleanupTimeout bounds the best-effort releases of a failed attempt
	// or a lost lease. The keys expire by themselves anyway.
	cleanupTimeout = time.Second
)

// Locker hands out leases on named locks kept in one Redis (New) or in a
// majority of N independent Redis nodes (NewQuorum). It is safe for
// concurrent use.
type Locker struct {
	nodes  []Client
	quorum int
	prefix string
	drift  float64
}

// New returns a Locker on a single Redis (a standalone server, a
// Sentinel-managed master, or a Redis Cluster: a lock's keys share one hash
// slot). See the package documentation for what a single Redis can and
// cannot promise when it fails over.
func New(c Client, o Options) (*Locker, error) {
	return NewQuorum([]Client{c}, o)
}

// NewQuorum returns a Locker that follows the Redlock algorithm over
// independent Redis nodes (not replicas of each other, not shards of one
// cluster): a lock is held when a majority, len(nodes)/2+1, granted it within
// its validity time. Use an odd number of nodes: 3 tolerate one node down,
// 5 tolerate two. With one node it is the same as New.
func NewQuorum(nodes []Client, o Options) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, invalid("no Redis nodes")
	}
	for i, c := range nodes {
		if c == nil {
			return nil, invalid("Redis node %d is nil", i)
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := checkName("key prefix", o.Prefix); err != nil {
		return nil, err
	}
	switch {
	case o.DriftFactor == 0:
		o.DriftFactor = defaultDriftFactor
	case !(o.DriftFactor > 0 && o.DriftFactor <= 0.5): // also rejects NaN
		return nil, invalid("drift factor %v outside (0, 0.5]", o.DriftFactor)
	}
	return &Locker{
		nodes:  append([]Client(nil), nodes...),
		quorum: len(nodes)/2 + 1,
		prefix: o.Prefix,
		drift:  o.DriftFactor,
	}, nil
}

// Nodes returns the number of Redis nodes and how many of them make a quorum.
func (l *Locker) Nodes() (n, quorum int) { return len(l.nodes), l.quorum }

// Option configures one Acquire call.
type Option func(*acquireConfig)

type acquireConfig struct {
	ttl   time.Duration
	retry time.Duration
	renew bool
	err   error // the first bad option
}

// WithTTL sets how long the lock lives in Redis without a renewal (default
// DefaultTTL, at least MinTTL, whole milliseconds: finer parts are dropped).
// It bounds how long others wait for the lock after its holder dies, and how
// long after Redis became unreachable the lease is given up.
func WithTTL(ttl time.Duration) Option {
	return func(c *acquireConfig) {
		if ttl < MinTTL && c.err == nil {
			c.err = invalid("TTL %v shorter than %v", ttl, MinTTL)
		}
		c.ttl = ttl.Truncate(time.Millisecond)
	}
}

// WithRetry makes Acquire try again, every interval with ±50% jitter, while
// the lock is held by someone else or Redis fails, until it succeeds or ctx
// ends. Without it Acquire tries once.
func WithRetry(interval time.Duration) Option {
	return func(c *acquireConfig) {
		if interval <= 0 && c.err == nil {
			c.err = invalid("retry interval %v not positive", interval)
		}
		c.retry = interval
	}
}

// WithoutRenewal turns the watchdog off: the lock lives for one TTL unless
// Lease.Extend is called, and the lease's context is cancelled (ErrLost)
// when that time could have run out.
func WithoutRenewal() Option {
	return func(c *acquireConfig) { c.renew = false }
}

// Acquire takes the lock called name and returns its lease. While the lease
// is held a watchdog renews the lock every TTL/3; lease.Context() is
// cancelled as soon as the lock is lost or released. Release it when done.
//
// ctx bounds Acquire itself (including waiting, WithRetry). The lease's
// context keeps ctx's values but not its cancellation.
//
// Errors: ErrInvalid for a bad name or option (nothing is sent to Redis);
// ErrNotAcquired when another owner holds the lock; otherwise the nodes'
// errors (*NodeError) or ctx's. A failed attempt releases whatever it took.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	cfg := acquireConfig{ttl: DefaultTTL, renew: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if err := checkName("lock name", name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, context.Cause(ctx))
	}
	var timer *time.Timer
	var prev error // the last attempt that ended on its own
	for {
		lease, err := l.attempt(ctx, name, cfg)
		switch {
		case err == nil:
			return lease, nil
		case ctx.Err() != nil && prev != nil:
			return nil, fmt.Errorf("%w (stopped waiting: %w)", prev, context.Cause(ctx))
		case ctx.Err() != nil || cfg.retry == 0:
			return nil, err
		}
		prev = err
		wait := cfg.retry/2 + rand.N(cfg.retry+1)
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (stopped waiting: %w)", err, context.Cause(ctx))
		case <-timer.C:
		}
	}
}

// driftFor is the safety margin subtracted from a TTL.
func (l *Locker) driftFor(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*l.drift) + minDrift
}

// attempt is one round of the acquire algorithm:
//
//  1. Send acquire.lua, with a fresh token, to every node at once; stop
//     waiting as soon as a quorum granted (or can no longer grant), or the
//     validity time start+TTL-drift has passed.
//  2. The fence is the highest of the granting nodes' counters. With more
//     than one node, raise the counter of every granting node that is below
//     it (extend.lua with a floor) and require a quorum to confirm: "Quorum
//     mode" in the package documentation says why fences need this.
//  3. If anything fell short, release on every node that granted or did not
//     answer clearly, including late answers, and fail.
func (l *Locker) attempt(ctx context.Context, name string, cfg acquireConfig) (*Lease, error) {
	keys := keysFor(l.prefix, name)
	token := newToken()
	ttlMS := cfg.ttl.Milliseconds()
	start := time.Now()
	validUntil := start.Add(cfg.ttl - l.driftFor(cfg.ttl))

	// The node calls run under opCtx: ctx's values and the validity
	// deadline, not ctx's cancellation, which only stops the waiting (in
	// fanOut). opCtx is cancelled on failure at once, on success once every
	// node has answered: a node that grants after the quorum was reached
	// adds to the lock's margin against node failures, even if the caller
	// cancels ctx as soon as Acquire returns.
	opCtx, cancelOps := context.WithDeadline(context.WithoutCancel(ctx), validUntil)
	succeeded := false
	defer func() {
		if !succeeded {
			cancelOps()
		}
	}()

	n, q := len(l.nodes), l.quorum
	var granted, held []reply
	var errs []error
	late, pending := l.fanOut(ctx, validUntil, all(n), func(i int) reply {
		return run(opCtx, l.nodes[i], i, acquireScript, keys.slice(), token, ttlMS)
	}, func(r reply) bool {
		switch {
		case r.ok():
			granted = append(granted, r)
		case r.refused():
			held = append(held, r)
		default:
			errs = append(errs, r.err)
		}
		return len(granted) >= q || len(held)+len(errs) > n-q
	})

	fail := func(reason error) (*Lease, error) {
		waitUntil := time.Now().Add(cleanupTimeout)
		if validUntil.Before(waitUntil) {
			waitUntil = validUntil
		}
		l.cleanup(ctx, keys, token, granted, errs, late, pending, waitUntil)
		return nil, fmt.Errorf("lock %q: %w", name, reason)
	}
	if len(granted) < q {
		return fail(l.shortfall(ctx, "acquire", len(granted), held, ErrNotAcquired, errs, validUntil))
	}

	var fence int64
	for _, r := range granted {
		fence = max(fence, r.num)
	}
	var behind []int
	for _, r := range granted {
		if r.num < fence {
			behind = append(behind, r.node)
		}
	}
	if len(behind) > 0 {
		confirmed := len(granted) - len(behind)
		l.fanOut(ctx, validUntil, behind, func(i int) reply {
			return run(opCtx, l.nodes[i], i, extendScript, keys.slice(), token, ttlMS, fence)
		}, func(r reply) bool {
			if r.ok() {
				confirmed++
			} else if r.err != nil {
				errs = append(errs, r.err)
			}
			return confirmed >= q
		})
		if confirmed < q {
			msg := fmt.Sprintf("fence %d confirmed on %d of %d nodes, %d needed", fence, confirmed, n, q)
			if len(errs) == 0 {
				return fail(errors.New(msg))
			}
			return fail(fmt.Errorf("%s: %w", msg, errors.Join(errs...)))
		}
	}
	if !time.Now().Before(validUntil) {
		return fail(fmt.Errorf("acquiring took longer than the %v TTL allows", cfg.ttl))
	}
	succeeded = true
	go func() {
		for range pending {
			<-late
		}
		cancelOps()
	}()
	return l.newLease(ctx, name, keys, token, Fence(fence), cfg, validUntil), nil
}

// shortfall explains why fewer than a quorum of nodes said yes. refusal is
// what a refusal means for op (ErrNotAcquired for acquire), or nil.
func (l *Locker) shortfall(ctx context.Context, op string, ok int, refused []reply, refusal error, errs []error, until time.Time) error {
	n, q := len(l.nodes), l.quorum
	var cause []error
	if len(refused) > 0 && refusal != nil {
		cause = append(cause, refusal)
	}
	if ctx.Err() != nil {
		cause = append(cause, context.Cause(ctx))
	} else if len(refused)+len(errs) == 0 && !until.IsZero() && !time.Now().Before(until) {
		cause = append(cause, errors.New("no quorum before the validity time ran out"))
	}
	cause = append(cause, errs...)
	if n == 1 && len(cause) > 0 {
		return errors.Join(cause...)
	}
	msg := fmt.Sprintf("%s: %d of %d nodes agreed, %d needed (%d refused, %d failed, %d did not answer in time)",
		op, ok, n, q, len(refused), len(errs), n-ok-len(refused)-len(errs))
	if len(cause) == 0 {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, errors.Join(cause...))
}

// cleanup undoes a failed attempt: it releases the lock, compare-and-delete
// with the attempt's token, on every node that granted it or whose answer is
// unknown. It also waits for the answers still to come, until waitUntil, and
// releases those too; answers later than that are handled by a goroutine.
// So a failed Acquire leaves nothing behind on the nodes that answer
// promptly. Nodes that refused are left alone. Every attempt has its own
// token, so these releases can never delete a later attempt's lock.
func (l *Locker) cleanup(ctx context.Context, keys lockKeys, token string, granted []reply, errs []error, late <-chan reply, pending int, waitUntil time.Time) {
	bg := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	release := func(node int) {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
			defer cancel()
			run(rctx, l.nodes[node], node, releaseScript, keys.slice()[:1], token)
		})
	}
	for _, r := range granted {
		release(r.node)
	}
	for _, err := range errs {
		if ne := (*NodeError)(nil); errors.As(err, &ne) {
			release(ne.Node)
		}
	}
	timer := time.NewTimer(time.Until(waitUntil))
	defer timer.Stop()
wait:
	for ; pending > 0; pending-- {
		select {
		case r := <-late:
			if !r.refused() {
				release(r.node)
			}
		case <-timer.C:
			break wait
		}
	}
	wg.Wait()
	if pending > 0 {
		go func() {
			for range pending {
				if r := <-late; !r.refused() {
					release(r.node)
				}
			}
		}()
	}
}

// fanOut runs op for every node in nodes, each in its own goroutine, and
// hands the replies to tally as they arrive. It returns when tally says the
// outcome is decided, when every node has replied, when ctx is done or at
// stop (zero: no limit). The replies not tallied yet will arrive on late;
// pending says how many.
func (l *Locker) fanOut(ctx context.Context, stop time.Time, nodes []int, op func(node int) reply, tally func(reply) (decided bool)) (late <-chan reply, pending int) {
	ch := make(chan reply, len(nodes))
	for _, i := range nodes {
		go func() { ch <- op(i) }()
	}
	var timeout <-chan time.Time
	if !stop.IsZero() {
		t := time.NewTimer(time.Until(stop))
		defer t.Stop()
		timeout = t.C
	}
	for pending = len(nodes); pending > 0; {
		select {
		case r := <-ch:
			pending--
			if tally(r) {
				return ch, pending
			}
		case <-timeout:
			return ch, pending
		case <-ctx.Done():
			return ch, pending
		}
	}
	return ch, 0
}

func all(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// newToken returns 128 random bits, hex-encoded: the owner token.
func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
