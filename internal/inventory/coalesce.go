package inventory

import (
	"context"
	"sync"
)

// Coalesce tunes how Buy gathers concurrent buys of one sale into one
// buy.lua call. The gathering needs no timer: a buy that finds no call of
// its sale in flight is sent at once (alone, at low load); buys that arrive
// meanwhile queue, and each call that completes sends everything queued, up
// to MaxBatch buys, as the next call. While fewer than InFlight calls are
// in flight, the queue is also sent as soon as it holds Overlap buys, so
// that Redis works on one call while the next is on its way. The batch size
// so follows the load: one at a trickle, up to MaxBatch under a crowd. A
// queued buy waits at most for one call of its sale to complete before its
// own is sent.
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
	c.queue = append(c.queue, w)
	var ready []*waiter
	// Nothing in flight: at once. Else another call only for a crowd; the
	// rest go when a call completes (next). So whenever buys are queued a
	// call of the sale is in flight.
	if c.inFlight == 0 || c.inFlight < c.e.coalesce.InFlight && len(c.queue) >= c.e.coalesce.Overlap {
		ready = c.takeLocked()
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
	c.inFlight++
	return ready
}

// next ends c's call that just completed and returns the next one:
// everything queued meanwhile, up to MaxBatch buys, counted in flight; nil
// if nothing queued.
func (c *coalescer) next() []*waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.inFlight--
		if c.inFlight == 0 {
			// Idle: forget it, so that sale ids seen once do not pile up.
			// A buy that found it before still works through it alone; the
			// next one makes a new one.
			c.e.coalescers.CompareAndDelete(c.sale, c)
		}
		return nil
	}
	next := c.takeLocked()
	c.inFlight--
	return next
}

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
