package reconcile_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/reconcile"
)

// TestRepairUnderRestocksAndBuys: restocks and buys run while repair
// passes run in a loop and the consumer stores the events. Nothing in
// Redis is wrong, so no pass may write anything: a repair acting on a
// comparison read while units moved would set the counters wrongly (an
// oversell). At quiescence the pass is exact: consistent, nothing drifted.
func TestRepairUnderRestocksAndBuys(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale()
		const restocks, buyers = 30, 40
		var wg sync.WaitGroup
		done := make(chan struct{})
		var mu sync.Mutex
		var wrote []string
		drifted := 0
		wg.Add(1)
		go func() { // the repair loop
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
				if got.Before.Drifted() {
					mu.Lock()
					drifted++
					mu.Unlock()
				}
				if err != nil || len(got.Changes) > 0 {
					mu.Lock()
					wrote = append(wrote, fmt.Sprintf("%+v, %v", got, err))
					mu.Unlock()
				}
			}
		}()
		var work sync.WaitGroup
		work.Add(2)
		go func() {
			defer work.Done()
			for i := 0; i < restocks; i++ {
				if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); err != nil {
					t.Errorf("Restock: %v", err)
				}
			}
		}()
		go func() {
			defer work.Done()
			for i := 0; i < buyers; i++ {
				_, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("b%d", i), []inventory.Line{{SKU: "A", Qty: 1}}, "")
				if err != nil && !errors.Is(err, inventory.ErrSoldOut) {
					t.Errorf("Buy: %v", err)
				}
			}
		}()
		work.Wait()
		close(done)
		wg.Wait()
		t.Logf("%d passes drifted", drifted)
		if len(wrote) > 0 {
			t.Errorf("repairs under load (nothing was wrong): %v", wrote)
		}
		r.settle()
		rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, "s1")
		r.must(err)
		if !rep.Consistent || rep.Drifted() {
			t.Errorf("at quiescence: %+v", rep)
		}
		if got := r.repairs(); len(got) > 0 {
			t.Errorf("repairs journaled: %+v", got)
		}
	})
}
