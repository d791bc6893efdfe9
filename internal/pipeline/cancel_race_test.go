package pipeline_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
)

// TestCancelRacesTheConsumer: every order is cancelled right after its
// buy, while consumers store the bought events: before a consumer read the
// bought event, while its batch is being written, or after. One consumer
// dies holding a batch of bought events, so the cancels of those orders
// reach the database first and their bought events come later, reclaimed.
// Every order ends stored once, cancelled, with its line once; the
// database journals one bought and one cancelled event of each; Redis has
// every unit back, once.
func TestCancelRacesTheConsumer(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(20)
		d := &dying{Store: r.db, entered: make(chan struct{}), release: make(chan struct{})}
		r.consumer("doomed", d, pipeline.Options{BatchSize: 10})
		t.Cleanup(func() { close(d.release) }) // before the doomed consumer's stop (cleanups run last-in first-out)
		<-d.entered                            // it holds bought events it will never acknowledge
		r.consumer("survivor", r.db, pipeline.Options{BatchSize: 10})

		var mu sync.Mutex
		var wg sync.WaitGroup
		cancel := func(id, user string) {
			rc, err := r.eng.Cancel(r.ctx, id, user)
			if err != nil || rc.Replayed || rc.Order.Status != inventory.OrderCancelled {
				t.Errorf("cancel %s: %+v, %v", id, rc, err)
			}
		}
		for i, id := range ids {
			wg.Add(1)
			go func() { defer wg.Done(); cancel(id, fmt.Sprintf("u%d", i)) }()
		}
		for i := 20; i < 80; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := fmt.Sprintf("u%d", i)
				rc, err := r.eng.Buy(r.ctx, "s1", user, []inventory.Line{{SKU: "A", Qty: 1}}, "")
				if err != nil {
					t.Errorf("buy: %v", err)
					return
				}
				mu.Lock()
				ids = append(ids, rc.Order.ID)
				mu.Unlock()
				cancel(rc.Order.ID, user)
			}()
		}
		wg.Wait()

		deadline := time.Now().Add(20 * time.Second)
		for {
			// Redis first: once nothing is in flight, every event is in
			// the database, so counts read after it are final. Read the
			// other way round, counts taken while a cancel was still in
			// flight could pass as settled once it was applied.
			inflight, err2 := pipeline.InFlight(r.ctx, r.rdb, r.eng, "s1")
			counts, err := r.db.CountOrders(r.ctx, "s1")
			if err == nil && err2 == nil && len(inflight) == 0 &&
				counts[inventory.OrderCancelled]+counts[inventory.OrderConfirmed] == len(ids) {
				if counts[inventory.OrderCancelled] != len(ids) {
					t.Errorf("orders by status: %v, want all %d cancelled", counts, len(ids))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not settled: %v orders stored (want %d cancelled), %d events in flight, errs %v %v",
					counts, len(ids), len(inflight), err, err2)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, id := range ids {
			o, err := r.db.Order(r.ctx, id)
			if err != nil || o.Status != inventory.OrderCancelled || len(o.Items) != 1 || o.Items[0].Qty != 1 {
				t.Errorf("order %s in the database: %+v, %v; want cancelled, one line of 1", id, o, err)
			}
		}
		journal, err := r.db.Journal(r.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		events := map[string]int{}
		for _, j := range journal {
			events[string(j.Type)+" "+j.OrderID]++
		}
		for _, id := range ids {
			for _, typ := range []inventory.EventType{inventory.EventBought, inventory.EventCancelled} {
				if n := events[string(typ)+" "+id]; n != 1 {
					t.Errorf("order %s: %d %s events journaled, want 1", id, n, typ)
				}
			}
		}
		st, err := r.eng.Stock(r.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if it := st.Items[0]; it.Remaining != it.Stocked || it.Sold != 0 {
			t.Errorf("stock after every order was cancelled: %+v, want every unit back once", it)
		}
		if units, err := r.eng.UnitsInOrders(r.ctx, "s1"); err != nil || units["A"] != 0 {
			t.Errorf("units in live orders: %v, %v; want none", units, err)
		}
	})
}
