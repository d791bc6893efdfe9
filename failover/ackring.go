package failover

import (
	"slices"
	"sync"

	"github.com/seckill/seckill/inventory"
)

// ackRing keeps the last orders this instance acknowledged from Redis
// (bought or cancelled): the ones that may still be on their way to the
// database through the stream when Redis goes away. Beside them, up to as
// many buys whose outcome this instance never learned (unsure), oldest
// first, until a recovery has settled them.
type ackRing struct {
	mu   sync.Mutex
	size int
	buf  []inventory.Order
	next int

	unsure []inventory.Order
	handed int // how many of unsure the last hand-over took
}

func (r *ackRing) addUnsure(o inventory.Order) {
	r.mu.Lock()
	if len(r.unsure) >= r.size {
		r.unsure = slices.Delete(r.unsure, 0, 1)
		r.handed = max(r.handed-1, 0)
	}
	r.unsure = append(r.unsure, o)
	r.mu.Unlock()
}

// handedOver records that a hand-over took the first n unsure buys.
func (r *ackRing) handedOver(n int) {
	r.mu.Lock()
	r.handed = max(r.handed, min(n, len(r.unsure)))
	r.mu.Unlock()
}

// settle forgets the unsure buys the last hand-over took: a recovery has
// drained the stream since (one that arrived was voided).
func (r *ackRing) settle() {
	r.mu.Lock()
	r.unsure = slices.Delete(r.unsure, 0, r.handed)
	r.handed = 0
	r.mu.Unlock()
}

func (r *ackRing) add(o inventory.Order) {
	r.mu.Lock()
	if len(r.buf) < r.size {
		r.buf = append(r.buf, o)
	} else {
		r.buf[r.next] = o
		r.next = (r.next + 1) % r.size
	}
	r.mu.Unlock()
}

// snapshot returns the orders held, once each, in their last state, and
// the unsure buys.
func (r *ackRing) snapshot() (acked, unsure []inventory.Order) {
	r.mu.Lock()
	defer r.mu.Unlock()
	unsure = slices.Clone(r.unsure)
	at := make(map[string]int, len(r.buf))
	out := make([]inventory.Order, 0, len(r.buf))
	for i := range r.buf {
		o := r.buf[(r.next+i)%len(r.buf)]
		if j, ok := at[o.ID]; ok {
			out[j] = o
			continue
		}
		at[o.ID] = len(out)
		out = append(out, o)
	}
	return out, unsure
}
