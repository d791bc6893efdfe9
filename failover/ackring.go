package failover

import (
	"bytes"
	"slices"
	"sync"

	"github.com/seckill/seckill/inventory"
)

// ackRing keeps the last orders this instance acknowledged from Redis
// (bought or cancelled): the ones that may still be on their way to the
// database through the stream when Redis goes away. Beside them, up to as
// many buys whose outcome this instance never learned (unsure), oldest
// first, until a recovery has settled them.
//
// The acknowledged orders are kept encoded (ackcodec.go), each in a byte
// slice that holds no pointer: the collector then marks one object per
// order instead of scanning every order's strings and lines. Held as
// inventory.Order values, the default 131,072 orders were most of the
// service's live heap (about 40 MB), and under load each collection spent
// tens of milliseconds scanning them, on a core the buys needed.
type ackRing struct {
	mu   sync.Mutex
	size int
	buf  [][]byte // encoded orders; a slot's slice is reused when overwritten
	next int
	// scratch encodes an order before the ring has a slot for it to reuse
	scratch []byte

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

func (r *ackRing) add(o inventory.Order) { r.put(o, nil) }

// addSpent adds o, whose buy spent the purchase token t: the token is
// handed over with it.
func (r *ackRing) addSpent(o inventory.Order, t inventory.SpentToken) { r.put(o, &t) }

func (r *ackRing) put(o inventory.Order, t *inventory.SpentToken) {
	r.mu.Lock()
	if len(r.buf) < r.size {
		// A new slot: encoded in the scratch buffer, then copied once, at
		// its size (appending to nil grew it four times for an order of one
		// line).
		r.scratch = appendOrder(r.scratch[:0], o)
		if t != nil {
			r.scratch = appendSpent(r.scratch, *t)
		}
		r.buf = append(r.buf, bytes.Clone(r.scratch))
	} else {
		r.buf[r.next] = appendOrder(r.buf[r.next][:0], o)
		if t != nil {
			r.buf[r.next] = appendSpent(r.buf[r.next], *t)
		}
		r.next = (r.next + 1) % r.size
	}
	r.mu.Unlock()
}

// snapshot returns the orders held, once each, in their last state, the
// purchase tokens their buys spent, and the unsure buys. Its error is a
// record that does not decode (a bug): the hand-over must then not happen
// without it.
func (r *ackRing) snapshot() (acked []inventory.Order, spent []inventory.SpentToken, unsure []inventory.Order, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	unsure = slices.Clone(r.unsure)
	at := make(map[string]int, len(r.buf))
	out := make([]inventory.Order, 0, len(r.buf))
	for i := range r.buf {
		o, t, err := decodeAck(r.buf[(r.next+i)%len(r.buf)])
		if err != nil {
			return nil, nil, nil, err
		}
		if t.Token != "" {
			spent = append(spent, t)
		}
		if j, ok := at[o.ID]; ok {
			out[j] = o
			continue
		}
		at[o.ID] = len(out)
		out = append(out, o)
	}
	return out, spent, unsure, nil
}
