package admission

import (
	"context"
	"fmt"
	"sync"
)

// batcher gathers the concurrent calls of one key (a sale) into one: a
// call that finds none of its key in flight is sent at once, alone; the
// calls that come while one is in flight queue, and go together, up to
// max, when it completes. So one call of a key is in flight at a time, and
// a call waits at most for the one in flight before its own is sent: at a
// trickle each goes alone, under a crowd many share a round trip and a
// script's set-up (as inventory's coalescer does for buys).
type batcher[In, Out any] struct {
	max int
	// send makes one call of key for ins, and returns each one's outcome,
	// in order; an error is every one's.
	send func(ctx context.Context, key string, ins []In) ([]Out, error)

	mu     sync.Mutex
	queues map[string]*[]*batchCall[In, Out] // a key with a call in flight -> the calls queued behind it
}

// batchCall is one queued call and, once done is closed, its outcome.
type batchCall[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{}
}

func newBatcher[In, Out any](max int, send func(context.Context, string, []In) ([]Out, error)) *batcher[In, Out] {
	return &batcher[In, Out]{max: max, send: send, queues: map[string]*[]*batchCall[In, Out]{}}
}

// do sends in with the other calls of key, and returns its outcome. A
// caller whose ctx ends first gets ctx's error; its call is sent anyway
// (its outcome unknown to it).
func (b *batcher[In, Out]) do(ctx context.Context, key string, in In) (Out, error) {
	c := &batchCall[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.mu.Lock()
	if q, busy := b.queues[key]; busy {
		*q = append(*q, c)
		b.mu.Unlock()
	} else {
		b.queues[key] = new([]*batchCall[In, Out])
		b.mu.Unlock()
		b.run(key, []*batchCall[In, Out]{c})
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		var zero Out
		return zero, ctx.Err()
	}
}

// run sends calls as one call of key and hands each its outcome; then it
// sends what queued meanwhile (from a goroutine of its own: the caller
// that sent the first call returns), or marks key idle.
func (b *batcher[In, Out]) run(key string, calls []*batchCall[In, Out]) {
	ins := make([]In, len(calls))
	for i, c := range calls {
		ins[i] = c.in
	}
	// Not the first caller's cancellation: the others' calls ride on it.
	outs, err := b.send(context.WithoutCancel(calls[0].ctx), key, ins)
	if err == nil && len(outs) != len(ins) {
		err = fmt.Errorf("admission: %d outcomes of %d calls", len(outs), len(ins))
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.out = outs[i]
		}
		close(c.done)
	}
	b.mu.Lock()
	q := b.queues[key]
	if len(*q) == 0 {
		delete(b.queues, key)
		b.mu.Unlock()
		return
	}
	n := min(len(*q), b.max)
	next := make([]*batchCall[In, Out], n)
	copy(next, *q)
	rest := copy(*q, (*q)[n:])
	clear((*q)[rest:])
	*q = (*q)[:rest]
	b.mu.Unlock()
	go b.run(key, next)
}
