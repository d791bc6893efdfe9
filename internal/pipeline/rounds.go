package pipeline

import (
	"context"
	"sync"
)

// rounds counts each reader's rounds (a read and the writes of what it
// read), so that WaitRounds can wait for the ones under way.
type rounds struct {
	mu           sync.Mutex
	begun, ended []uint64 // per reader
	changed      chan struct{}
}

func (c *Consumer) beginRound(r int) {
	c.round.mu.Lock()
	c.round.begun[r]++
	c.round.mu.Unlock()
}

func (c *Consumer) endRound(r int) {
	c.round.mu.Lock()
	c.round.ended[r] = c.round.begun[r]
	close(c.round.changed)
	c.round.changed = make(chan struct{})
	c.round.mu.Unlock()
}

// WaitRounds waits until every round under way when it is called has
// ended: what those rounds read is then written to the database, or was
// not written and stays pending in the stream it was read from. Degraded
// mode's hand-over waits for it (failover.Parts.Rounds): a batch read from
// a master that then failed over or restarted and lost it is not in the
// stream the recovery looks at, so without the wait its write (a restock,
// a move) could land after the recovery's repair read the database, and
// Redis and the database would disagree about the sale's stock.
func (c *Consumer) WaitRounds(ctx context.Context) error {
	c.round.mu.Lock()
	want := make([]uint64, len(c.round.begun))
	for r, b := range c.round.begun {
		if b > c.round.ended[r] {
			want[r] = b
		}
	}
	c.round.mu.Unlock()
	for {
		c.round.mu.Lock()
		done, changed := true, c.round.changed
		for r, w := range want {
			done = done && c.round.ended[r] >= w
		}
		c.round.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
