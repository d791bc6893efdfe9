package inventory

import (
	"context"
	"sync"
	"time"
)

// Coalesce tunes how Buy gathers concurrent buys of one sale into one
// buy.lua call. A buy that finds no call of its sale in flight is sent at
// once (alone, at low load), unless its sale has a crowd: then it lingers,
// for at most Linger, for others to join it. Buys that arrive while a call
// is in flight queue, and each call that completes sends everything queued,
// up to MaxBatch buys, as the next call (after a linger, for a crowd that
// queued fewer than Overlap). While fewer than InFlight calls are
// in flight, the queue is also sent as soon as it holds Overlap buys, so
// that Redis works on one call while the next is on its way. The batch size
// so follows the load: one at a trickle, up to MaxBatch under a crowd. A
// queued buy waits at most for one call of its sale to complete, and a
// linger, before its own is sent.
//
// Calls of different sales on the same Redis node that are ready at the
// same time go to it together, as one pipeline (one round trip), by the
// same rule: a call that finds fewer than Pipelines pipelines in flight to
// its node is sent at once, and each pipeline that completes sends every
// call for that node that became ready meanwhile. Buys spread over many
// sales so share round trips as the buys of one sale share script calls.
// On a Redis Cluster each master has its own pipelines, so that a slow or
// unanswering master stalls only the buys of its own sales.
type Coalesce struct {
	// Off sends every Buy as its own script call.
	Off bool
	// MaxBatch bounds the buys in one call. Default 128.
	MaxBatch int
	// InFlight bounds the calls of one sale in flight at once, so that
	// Redis works on one while the next is on its way. Default 2.
	InFlight int
	// Overlap is how many buys must be queued behind a call of their sale
	// in flight before they are sent as another call alongside it (while
	// fewer than InFlight are in flight); fewer wait for a call to
	// complete. Default 48, at most MaxBatch; 1 sends a buy that finds a
	// free slot at once, alone (the rule before it). A call costs Redis a
	// fixed share, about a dozen buys' worth (the script's set-up and the
	// sale's reads, the round trip's reads and writes), whatever it
	// carries; a crowd arrives in waves, right after the replies of the
	// call before, so with any free slot taken at once the first buy of
	// each wave went alone, and over HTTP more than half the calls carried
	// one buy (measured on 2026-11-26). A crowd
	// that keeps Redis busy queues 48 buys in well under a millisecond.
	Overlap int
	// Pipelines bounds the pipelines in flight at once to each Redis node,
	// each carrying the ready calls of any number of its sales. Default 2.
	Pipelines int
	// Linger is how long, at most, the buys of a sale that has a crowd wait
	// for more buys to join their call, when no call of the sale would
	// otherwise carry them on at once (nothing in flight, or a call just
	// completed with fewer than Overlap queued). A crowd is a sale whose
	// last call carried two buys or more: a lone caller who waits for each
	// buy before the next never lingers. A linger ends after Linger or at
	// Overlap buys. Buyers who come independently of each other (an HTTP
	// crowd) so share fewer, larger calls; a few callers who each wait for
	// their buy before the next (a closed loop) gain nothing from it, and
	// are told apart by their lingers: one that ends with no buy in its
	// second half stops the sale's lingers for the next 16 calls, doubling
	// up to 1024 while they stay so (and the sale is never idle for over 4
	// lingers, at most 10 s: then it is forgotten). Default 1ms; negative:
	// never, each call goes as soon as it may (the rule above).
	Linger time.Duration
}

func (c Coalesce) withDefaults() Coalesce {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 128
	}
	if c.InFlight <= 0 {
		c.InFlight = 2
	}
	if c.Pipelines <= 0 {
		c.Pipelines = 2
	}
	if c.Overlap <= 0 {
		c.Overlap = 48
	}
	c.Overlap = min(c.Overlap, c.MaxBatch)
	if c.Linger == 0 {
		c.Linger = time.Millisecond
	}
	return c
}

// coalescer queues the buys of one sale while its calls are in flight.
type coalescer struct {
	e        *Engine
	sale     string
	keys     []string // the sale's, for every call (saleKeys.buy)
	mu       sync.Mutex
	queue    []*waiter
	inFlight int
	// The linger (Coalesce.Linger): lingering while the queue waits for
	// timer with no call to carry it on; queuedAt and heardAt (nanotime)
	// when its oldest and newest buys came; lastBatch the buys the last
	// call carried.
	lingering bool
	queuedAt  int64
	heardAt   int64
	lastBatch int
	// skip: calls to send without a linger (its callers looked like a
	// closed loop); backoff: the next skip if they still do.
	skip, backoff int
	// timer ends a linger, or forgets c once it has been idle a while.
	timer *time.Timer
}

// waiter is one queued buy and, once done is closed, its outcome.
type waiter struct {
	ctx  context.Context
	bc   buyCall
	done chan struct{}
	rc   Receipt
	err  error
}

var waiterPool = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

func (e *Engine) coalescerOf(saleID string) *coalescer {
	if c, ok := e.coalescers.Load(saleID); ok {
		return c.(*coalescer)
	}
	c, _ := e.coalescers.LoadOrStore(saleID, &coalescer{e: e, sale: saleID, keys: e.keys(saleID).buy()})
	return c.(*coalescer)
}

// buy queues bc and, if a call may start, sends the queue itself; then
// waits for bc's outcome. A caller whose ctx ends while its buy is still
// queued gets ctx's error and the buy is never sent; once sent, its
// outcome is as unknown as a single call's whose ctx ends in flight.
func (c *coalescer) buy(ctx context.Context, bc buyCall) (Receipt, error) {
	w := waiterPool.Get().(*waiter)
	w.ctx, w.bc = ctx, bc
	c.mu.Lock()
	now := nanotime()
	if len(c.queue) == 0 {
		c.queuedAt = now
	}
	c.heardAt = now
	c.queue = append(c.queue, w)
	var ready []*waiter
	// Nothing in flight: at once, or after a linger. Else another call only
	// for a crowd; the rest go when a call completes (next). So whenever
	// buys are queued a call of the sale is in flight or a linger's timer
	// is set.
	switch {
	case len(c.queue) >= c.e.coalesce.Overlap && c.inFlight < c.e.coalesce.InFlight:
		ready = c.takeLocked()
	case c.lingering:
	case c.inFlight == 0:
		if !c.lingerLocked(now) {
			ready = c.takeLocked()
		}
	}
	c.mu.Unlock()
	if ready != nil {
		c.e.pipes.of(ctx, c.sale).submit(ctx, batch{c: c, waiters: ready})
	}
	select {
	case <-w.done:
		rc, err := w.rc, w.err
		*w = waiter{done: w.done}
		waiterPool.Put(w)
		return rc, err
	case <-ctx.Done():
		// w is left to its call, not reused; its id is final once taken.
		c.mu.Lock()
		placed := w.bc.placed
		c.mu.Unlock()
		return unsure(placed, ctx.Err()), ctx.Err()
	}
}

// takeLocked takes up to MaxBatch queued buys as the next call and counts it
// in flight.
func (c *coalescer) takeLocked() []*waiter {
	n := min(len(c.queue), c.e.coalesce.MaxBatch)
	ready := make([]*waiter, n)
	copy(ready, c.queue)
	// The call's order ids, before any copy of a buy is sent (every retry
	// has its id), under c.mu (a caller that gives up reads it: buy).
	var ids idGroup
	for _, w := range ready {
		ids.give(&w.bc)
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	if rest > 0 {
		c.queuedAt = nanotime() // near enough: over MaxBatch were queued
	}
	c.inFlight++
	c.lingering = false // a timer set for it finds nothing to send
	c.lastBatch = n
	if c.skip > 0 {
		c.skip--
	}
	return ready
}

// lingerLocked starts a linger of the queue, if the sale has a crowd (see
// Coalesce.Linger), and says whether it did.
func (c *coalescer) lingerLocked(now int64) bool {
	l := int64(c.e.coalesce.Linger)
	if l <= 0 || c.lastBatch < 2 || c.skip > 0 || now-c.queuedAt >= l {
		return false
	}
	c.lingering = true
	c.arm(time.Duration(c.queuedAt + l - now))
	return true
}

// next ends c's call that just completed and returns the next one:
// everything queued meanwhile, up to MaxBatch buys, counted in flight; nil
// if nothing queued.
func (c *coalescer) next() []*waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	switch {
	case len(c.queue) == 0:
		if c.inFlight == 0 && !c.lingering {
			if l := c.e.coalesce.Linger; l > 0 && (c.lastBatch >= 2 || c.skip > 0 || c.backoff > 0) {
				// A crowd's: kept a while, for its next buy to linger:
				// 4 lingers, at most 10 s (sale ids that once had a
				// crowd do not pile up, whatever Linger). So is one
				// whose callers looked like a closed loop (skip): a new
				// one would have forgotten that, and linger again at
				// its first call of two buys; and, its skip run out on a
				// call of one buy, its backoff: a new one would start it
				// again at 16, not double it.
				c.arm(4 * min(l, 2500*time.Millisecond))
			} else {
				c.forgetLocked()
			}
		}
		return nil
	case len(c.queue) >= c.e.coalesce.Overlap:
	case c.lingering:
		return nil // its timer sends it
	case c.lingerLocked(nanotime()):
		return nil
	}
	return c.takeLocked()
}

// arm has c's timer tick once after d (whatever it was set to before).
func (c *coalescer) arm(d time.Duration) {
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.tick)
		return
	}
	c.timer.Reset(d)
}

// tick ends a linger that is due, sending its queue, or forgets c if it
// stayed idle. A linger starts with fewer than InFlight calls in flight
// (none, or after one completed), and any call sent meanwhile ends it
// (takeLocked), so the call tick sends keeps to InFlight.
func (c *coalescer) tick() {
	c.mu.Lock()
	if !c.lingering {
		if c.inFlight == 0 && len(c.queue) == 0 {
			c.forgetLocked()
		}
		c.mu.Unlock()
		return
	}
	l := int64(c.e.coalesce.Linger)
	now := nanotime()
	if now-c.queuedAt < l { // not now < queuedAt+l, which may overflow
		c.arm(time.Duration(c.queuedAt + l - now)) // a tick set before
		c.mu.Unlock()
		return
	}
	if now-c.heardAt > l/2 {
		// No buy in the linger's second half: a closed loop, whose
		// callers are all here.
		c.backoff = min(max(2*c.backoff, 16), 1024)
		c.skip = c.backoff + 1 // this call's take counts one
	} else {
		c.backoff = 0
	}
	ready := c.takeLocked()
	c.mu.Unlock()
	ctx := context.WithoutCancel(ready[0].ctx)
	c.e.pipes.of(ctx, c.sale).submit(ctx, batch{c: c, waiters: ready})
}

// forgetLocked drops idle c from its engine, so that sale ids seen once do
// not pile up. A buy that found it before still works through it alone,
// without a linger (no other buy can find c to join it); the next one makes
// a new one.
func (c *coalescer) forgetLocked() {
	c.e.coalescers.CompareAndDelete(c.sale, c)
	c.lastBatch = 0
}

// nanotime is the linger's clock: ns on this process's monotonic clock,
// which no change of the wall clock moves.
func nanotime() int64 { return int64(time.Since(processStart)) }

var processStart = time.Now()

// deliver hands each buy of a call, sent as bcs, its outcome from the
// call's replies or err. A buy whose call failed as a whole (a transport
// error: it may or may not have run) or whose order id was taken is
// finished alone, by finishBuyAfter, with the same order id.
func (c *coalescer) deliver(live []*waiter, bcs []buyCall, replies [][]any, err error) {
	for i, w := range live {
		failed := 0
		switch {
		case err != nil && !transient(w.ctx, err):
			w.rc, w.err = unsure(bcs[i].placed, err), err
			w.done <- struct{}{}
			continue
		case err != nil:
			failed = 1
			fallthrough
		case code(replies[i]) == codeIDTaken:
			go func(w *waiter) {
				w.rc, w.err = c.e.finishBuyAfter(w.ctx, w.bc, failed)
				w.done <- struct{}{}
			}(w)
			continue
		}
		w.rc, w.err = c.e.decodeBuy(replies[i], bcs[i])
		w.done <- struct{}{}
	}
}
