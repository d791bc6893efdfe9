package failover

import (
	"bytes"
	"slices"
	"sync"

	"github.com/seckill/seckill/internal/inventory"
)

// ackRing keeps the last orders this instance acknowledged from Redis
// (bought or cancelled): the ones that may still be on their way to the
// database through the stream when Redis goes away. Beside them, up to as
// many buys whose outcome this instance never learned (unsure), oldest
// first, until a recovery has settled them; and likewise the halves of
// moves between segments Redis acknowledged, and the out halves of unknown
// outcome.
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

	unsure      unsureList[inventory.Order]
	moves       []inventory.MoveHalf // the last size halves acknowledged; a slot is reused from next
	nextMove    int
	unsureMoves unsureList[inventory.MoveHalf]
}

// unsureList is what this instance sent to Redis without learning the
// outcome, oldest first, up to a size, until a recovery settles it.
type unsureList[T any] struct {
	items  []T
	handed int // how many of items the last hand-over took
}

func (u *unsureList[T]) add(x T, size int) {
	if len(u.items) >= size {
		u.items = slices.Delete(u.items, 0, 1)
		u.handed = max(u.handed-1, 0)
	}
	u.items = append(u.items, x)
}

func (r *ackRing) addUnsure(o inventory.Order) {
	r.mu.Lock()
	r.unsure.add(o, r.size)
	r.mu.Unlock()
}

// addMove keeps a half of a move Redis acknowledged.
func (r *ackRing) addMove(h inventory.MoveHalf) {
	r.mu.Lock()
	if len(r.moves) < r.size {
		r.moves = append(r.moves, h)
	} else {
		r.moves[r.nextMove] = h
		r.nextMove = (r.nextMove + 1) % r.size
	}
	r.mu.Unlock()
}

// addUnsureMove keeps an out half of a move whose outcome is unknown.
func (r *ackRing) addUnsureMove(h inventory.MoveHalf) {
	r.mu.Lock()
	r.unsureMoves.add(h, r.size)
	r.mu.Unlock()
}

// handedOver records that a hand-over took the first n unsure buys and
// the first m unsure moves.
func (r *ackRing) handedOver(n, m int) {
	r.mu.Lock()
	r.unsure.handed = max(r.unsure.handed, min(n, len(r.unsure.items)))
	r.unsureMoves.handed = max(r.unsureMoves.handed, min(m, len(r.unsureMoves.items)))
	r.mu.Unlock()
}

// settle forgets the unsure buys and moves the last hand-over took: a
// recovery has drained the streams since (a buy that arrived was voided, a
// move that arrived counted).
func (r *ackRing) settle() {
	r.mu.Lock()
	r.unsure.items, r.unsure.handed = slices.Delete(r.unsure.items, 0, r.unsure.handed), 0
	r.unsureMoves.items, r.unsureMoves.handed = slices.Delete(r.unsureMoves.items, 0, r.unsureMoves.handed), 0
	r.mu.Unlock()
}

// moveSnapshot returns the halves of moves held, once each, and the unsure
// out halves.
func (r *ackRing) moveSnapshot() (acked, unsure []inventory.MoveHalf) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[[2]string]bool, len(r.moves))
	for _, h := range r.moves {
		if k := [2]string{h.SaleID, h.ID}; !seen[k] {
			seen[k] = true
			acked = append(acked, h)
		}
	}
	return acked, slices.Clone(r.unsureMoves.items)
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
	unsure = slices.Clone(r.unsure.items)
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
