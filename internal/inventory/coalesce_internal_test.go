package inventory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestIdleCoalescersAreForgotten: a coalescer exists only while its sale
// has buys under way, so buys of ever new sale ids leave nothing behind.
// (A coalescer's loop forgets itself once it has delivered its last reply,
// so just after the last buy returns it may still be on its way out.)
func TestIdleCoalescersAreForgotten(t *testing.T) {
	rdb := redistest.Standalone(t)
	e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb)})
	for i := range 50 {
		if _, err := e.Buy(context.Background(), fmt.Sprint("nosuch", i), "u1", []Line{{SKU: "A", Qty: 1}}, ""); err == nil {
			t.Fatal("bought from a sale that does not exist")
		}
	}
	waitfor.Until(t, waitfor.Patience, "coalescers forgotten after every buy ended", func() error {
		n := 0
		e.coalescers.Range(func(any, any) bool { n++; return true })
		if n != 0 {
			return fmt.Errorf("%d kept", n)
		}
		return nil
	})
}

// TestAClosedLoopsCoalescerIsKept: a sale whose callers looked like a
// closed loop (a linger with no buy in its second half) sends its next
// calls without a linger. Its coalescer going idle between two of them
// (a call of one buy completes before the next buy comes) must not forget
// that: a new coalescer would linger again at its first call of two buys,
// and a closed loop's buys would wait out a whole linger every few calls.
// An idle coalescer with nothing to remember is still forgotten.
func TestAClosedLoopsCoalescerIsKept(t *testing.T) {
	rdb := redistest.Standalone(t)
	e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb), Coalesce: Coalesce{Linger: time.Second}})
	for _, tc := range []struct {
		skip int
		kept bool
	}{{skip: 5, kept: true}, {skip: 0, kept: false}} {
		sale := fmt.Sprint("s", tc.skip)
		c := e.coalescerOf(sale)
		c.mu.Lock()
		c.inFlight, c.lastBatch, c.skip = 1, 1, tc.skip // a call of one buy in flight
		c.mu.Unlock()
		if next := c.next(); next != nil {
			t.Fatalf("skip %d: next sent %d buys, none were queued", tc.skip, len(next))
		}
		got, ok := e.coalescers.Load(sale)
		if kept := ok && got == c; kept != tc.kept {
			t.Errorf("skip %d: coalescer kept = %v, want %v", tc.skip, kept, tc.kept)
		}
		c.mu.Lock()
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
	}
}
