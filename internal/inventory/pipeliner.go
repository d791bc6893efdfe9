package inventory

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// pipeliner sends the calls of different sales of one Redis node that are
// ready at the same time together, as one pipeline: one round trip,
// however many sales. Each sale's coalescer still decides what goes into
// its calls and how many of them are under way; the pipeliner only decides
// when a call goes, with the same rule and no timer: a call that finds
// fewer than Coalesce.Pipelines pipelines in flight is sent at once
// (alone, at low load), and calls that become ready meanwhile queue; each
// pipeline that completes sends everything queued as the next one.
//
// There is one pipeliner per node (see pipeliners): a node that is slow or
// does not answer holds only its own pipelines, and the sales of the other
// nodes never queue behind it nor share a pipeline with it (a pipeline over
// several nodes returns only when the slowest has answered).
type pipeliner struct {
	e        *Engine
	mu       sync.Mutex
	queue    []batch
	inFlight int
}

// masterFinder is the part of a *redis.ClusterClient (or of a wrapper that
// embeds one) that names the master owning a key's hash slot.
type masterFinder interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// pipeliners holds an engine's pipeliners: one per master of a Redis
// Cluster, keyed by its address, or a single one for a client that talks to
// one node (or routes by itself, as a Ring). A sale's call goes to the
// pipeliner of the master its slot map names at the time; after a failover
// or a resharding the next call finds the new one. (A sale that stays busy
// keeps its calls on the pipeliner of its first: each call that completes
// queues the next behind it; the pick is made again once the sale was idle,
// and after a rebuild.) A stale pick only costs batching and isolation:
// go-redis still routes each command (and follows MOVED).
type pipeliners struct {
	finder masterFinder // nil: every call goes to one
	one    pipeliner    // the single one, and the fallback when the slot map is unknown
	byNode sync.Map     // node address -> *pipeliner
}

// of returns the pipeliner for the calls of saleID.
func (ps *pipeliners) of(ctx context.Context, saleID string) *pipeliner {
	if ps.finder == nil {
		return &ps.one
	}
	// Every key of a sale shares its hash tag, so the tag names its slot.
	node, err := ps.finder.MasterForKey(ctx, "{"+ps.one.e.prefix+":"+saleID+"}")
	if err != nil {
		return &ps.one // no slot map (yet): the call itself reports the trouble
	}
	addr := node.Options().Addr
	if p, ok := ps.byNode.Load(addr); ok {
		return p.(*pipeliner)
	}
	p, _ := ps.byNode.LoadOrStore(addr, &pipeliner{e: ps.one.e})
	return p.(*pipeliner)
}

// each calls f with every pipeliner.
func (ps *pipeliners) each(f func(p *pipeliner)) {
	f(&ps.one)
	ps.byNode.Range(func(_, p any) bool {
		f(p.(*pipeliner))
		return true
	})
}

// batch is one sale's next call: its queued buys, in their order.
type batch struct {
	c       *coalescer
	waiters []*waiter
}

// submit queues b and, if a pipeline may start, sends the queue itself,
// returning once that pipeline's outcomes are handed out.
func (p *pipeliner) submit(ctx context.Context, b batch) {
	p.mu.Lock()
	p.queue = append(p.queue, b)
	if p.inFlight >= p.e.coalesce.Pipelines {
		p.mu.Unlock()
		return
	}
	next := p.queue
	p.queue = nil
	p.inFlight++
	p.mu.Unlock()
	p.send(ctx, next)
}

// send runs batches as one pipeline; then hands what queued meanwhile
// (including the sales' next calls) to a new goroutine, so that the caller
// who sent it gets its own outcome without waiting for anyone else's.
func (p *pipeliner) send(ctx context.Context, batches []batch) {
	p.run(ctx, batches)
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.inFlight--
		p.mu.Unlock()
		return
	}
	next := p.queue
	p.queue = nil
	p.mu.Unlock()
	go p.send(context.WithoutCancel(ctx), next)
}

// run sends the live buys of batches, each batch as one script call of its
// sale: a lone call alone, several in one pipeline. Each buy gets its
// outcome, and each sale's next call is queued behind this pipeline. A
// sale missing from Redis, lone or not, is rebuilt off the pipeline.
func (p *pipeliner) run(ctx context.Context, batches []batch) {
	ctx = context.WithoutCancel(ctx)
	live := batches[:0]
	lives := make([][]*waiter, 0, len(batches))
	bcss := make([][]buyCall, 0, len(batches))
	keys := make([][]string, 0, len(batches))
	for _, b := range batches {
		ws, bcs := dropGivenUp(b.waiters)
		if len(ws) == 0 {
			p.enqueueNext(b.c)
			continue
		}
		live, lives, bcss, keys = append(live, b), append(lives, ws), append(bcss, bcs), append(keys, b.c.keys)
	}
	var results []batchReplies
	switch len(live) {
	case 0:
		return
	case 1:
		replies, err := p.e.runBuysOnce(ctx, keys[0], bcss[0])
		results = []batchReplies{{replies: replies, err: err}}
	default:
		results = p.e.runBuysPipelined(ctx, keys, bcss)
	}
	for i, res := range results {
		c, ws, bcs := live[i].c, lives[i], bcss[i]
		if res.err == errSaleMissing {
			// Rebuilt through the Loader, which may take long (up to
			// InitTimeout): alone, off this pipeline, so that the other
			// sales' buyers need not wait for it.
			go func() {
				replies, err := p.e.runBuys(ctx, c.keys, bcs)
				c.deliver(ws, bcs, replies, err)
				if next := c.next(); next != nil {
					// The rebuild may have followed a failover: ask again
					// which node holds the sale.
					p.e.pipes.of(ctx, c.sale).submit(ctx, batch{c: c, waiters: next})
				}
			}()
			continue
		}
		c.deliver(ws, bcs, res.replies, res.err)
		p.enqueueNext(c)
	}
}

// enqueueNext ends c's call that just completed and queues its next one,
// if buys of its sale queued meanwhile; a pipeline in flight sends it.
func (p *pipeliner) enqueueNext(c *coalescer) {
	if next := c.next(); next != nil {
		p.mu.Lock()
		p.queue = append(p.queue, batch{c: c, waiters: next})
		p.mu.Unlock()
	}
}

// dropGivenUp hands each waiter whose caller gave up its ctx's error, so
// that its buy is never sent, and returns the others and their buys.
func dropGivenUp(waiters []*waiter) ([]*waiter, []buyCall) {
	live := waiters[:0:0]
	bcs := make([]buyCall, 0, len(waiters))
	for _, w := range waiters {
		if err := w.ctx.Err(); err != nil {
			w.err = err
			w.done <- struct{}{}
			continue
		}
		live = append(live, w)
		bcs = append(bcs, w.bc)
	}
	return live, bcs
}
