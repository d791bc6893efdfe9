package inventory

import (
	"strconv"
	"time"
)

// ScriptSHA returns the SHA1 the engine runs the named script by ("buy",
// "pause", ...), or "": tests that hook the client tell script calls apart
// by it.
func ScriptSHA(name string) string {
	for _, s := range allScripts {
		if s.Name == name {
			return s.SHA
		}
	}
	return ""
}

// QueuedBuys counts the buys whose calls wait for the next pipeline of
// their node, over every node.
func (e *Engine) QueuedBuys() int {
	n := 0
	e.pipes.each(func(p *pipeliner) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, b := range p.queue {
			n += len(b.waiters)
		}
	})
	return n
}

// ThrottleKeys returns the keys of the three hashes buy.lua looks for a
// buyer's state of throttle t in at time now: the window now falls
// in, then the next two.
func (e *Engine) ThrottleKeys(saleID string, t Throttle, now time.Time) []string {
	w := ThrottleWindow(t)
	n := now.UnixMilli() / w
	k := e.keys(saleID).throttle + strconv.FormatInt(w, 10) + ":"
	return []string{k + strconv.FormatInt(n, 10), k + strconv.FormatInt(n+1, 10), k + strconv.FormatInt(n+2, 10)}
}

// SaleQueue returns how many buys of the sale are queued behind its calls
// and how many of its calls are in flight (0, 0 when it has no buy under
// way).
func (e *Engine) SaleQueue(saleID string) (queued, inFlight int) {
	v, ok := e.coalescers.Load(saleID)
	if !ok {
		return 0, 0
	}
	c := v.(*coalescer)
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue), c.inFlight
}
