package inventory

import (
	"context"
	"fmt"
	"testing"

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
