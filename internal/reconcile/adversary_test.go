package reconcile_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
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

// TestRepairStockedDriftWhileBuysRun: both stock counters were raised by
// hand (3 units the database never stocked) and buys and restocks keep
// coming while the repair loop runs. The repair waits for a moment when
// nothing is in flight and takes the 3 units away, not one more or less:
// at quiescence the books balance, Redis stocks what the database stocks,
// and remaining is exactly that minus the units sold.
func TestRepairStockedDriftWhileBuysRun(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		r.sale() // A: 10 stocked, 3 sold
		r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "r:A", 3).Err())
		r.must(r.rdb.HIncrBy(r.ctx, r.key("sale"), "t:A", 3).Err())
		done := make(chan struct{})
		var work sync.WaitGroup
		work.Add(1)
		go func() {
			defer work.Done()
			for i := 0; i < 6; i++ {
				if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); err != nil {
					t.Errorf("Restock: %v", err)
				}
				if _, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("b%d", i), []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
					t.Errorf("Buy: %v", err)
				}
			}
			close(done)
		}()
		var changes []inventory.RepairChange
		for repaired := false; ; {
			got, err := reconcile.Repair(r.ctx, r.eng, r.rdb, r.db, "s1")
			r.must(err)
			if len(got.Changes) > 0 {
				if repaired {
					t.Errorf("repaired twice: %+v", got.Changes)
				}
				repaired, changes = true, got.Changes
			}
			select {
			case <-done:
			default:
				continue
			}
			if repaired {
				break
			}
			r.settle() // the buys are over: the next pass finds the drift settled
		}
		work.Wait()
		r.settle()
		rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, "s1")
		r.must(err)
		a := rep.Items[0]
		if !rep.Consistent || rep.Drifted() || a.Stocked != 16 || a.StockedInDB != 16 || a.Remaining != 16-9 {
			t.Errorf("after the repair: %+v; want 16 stocked in both, 7 remaining", rep)
		}
		for _, c := range changes {
			if c.SKU == "A" && (c.Field == inventory.RepairStocked || c.Field == inventory.RepairRemaining) && c.Before-c.After != 3 {
				t.Errorf("repair change %+v: want 3 units taken", c)
			}
		}
	})
}
