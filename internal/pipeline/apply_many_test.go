package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/store"
)

// manyCounting is the database, counting the calls the consumer makes: the
// sales of each ApplyMany, and the Apply calls. With lose set, the first
// ApplyMany commits, then fails as a connection lost before the reply does.
type manyCounting struct {
	*store.Store
	mu      sync.Mutex
	many    [][]string
	applies atomic.Int64
	lose    atomic.Bool
}

func (m *manyCounting) ApplyMany(ctx context.Context, sales []store.SaleEvents) error {
	ids := make([]string, len(sales))
	for i, se := range sales {
		ids[i] = se.SaleID
	}
	m.mu.Lock()
	m.many = append(m.many, ids)
	m.mu.Unlock()
	err := m.Store.ApplyMany(ctx, sales)
	if err == nil && m.lose.CompareAndSwap(true, false) {
		return errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
	}
	return err
}

func (m *manyCounting) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	m.applies.Add(1)
	return m.Store.Apply(ctx, sale, evs)
}

func (m *manyCounting) calls() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.many)
}

// acked waits until no sale of orders has an entry in flight.
func (r *rig) acked(orders []string) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range orders {
		sale, _ := inventory.SaleOfOrder(id)
		for {
			inflight, err := pipeline.InFlight(r.ctx, r.rdb, r.eng, sale)
			if err == nil && len(inflight) == 0 {
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("sale %s: %d events in flight (%v)", sale, len(inflight), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// onceEach checks that each sale holds exactly its one order, with one
// bought row in its journal.
func (r *rig) onceEach(orders []string) {
	r.t.Helper()
	for _, id := range orders {
		sale, err := inventory.SaleOfOrder(id)
		if err != nil {
			r.t.Fatal(err)
		}
		counts, err := r.db.CountOrders(r.ctx, sale)
		if err != nil || counts[inventory.OrderConfirmed] != 1 || counts[inventory.OrderCancelled] != 0 {
			r.t.Errorf("sale %s: orders %v (%v), want its one order", sale, counts, err)
		}
		journal, err := r.db.Journal(r.ctx, sale)
		if err != nil {
			r.t.Fatal(err)
		}
		bought := 0
		for _, j := range journal {
			if j.Type == inventory.EventBought {
				bought++
			}
		}
		if bought != 1 {
			r.t.Errorf("sale %s: %d bought rows in the journal, want 1", sale, bought)
		}
	}
}

// TestConsumerAppliesManySalesInOneTransaction: what one read returns of
// many sales goes to the database in one ApplyMany (one transaction), and
// every order lands once.
func TestConsumerAppliesManySalesInOneTransaction(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(50, time.Time{})
		m := &manyCounting{Store: r.db}
		r.consumer("c1", m, pipeline.Options{Readers: 1})
		r.stored(orders, inventory.OrderConfirmed)
		r.onceEach(orders)
		calls := m.calls()
		if len(calls) != 1 || len(calls[0]) != 50 || m.applies.Load() != 0 {
			t.Errorf("ApplyMany calls of %v sales and %d Apply calls, want one ApplyMany of the 50 sales and no Apply", lens(calls), m.applies.Load())
		}
	})
}

// TestConsumerManySalesRedelivered: the transaction of many sales commits
// but its reply is lost; the consumer applies each sale's batch again on
// its own, and every order is still stored once.
func TestConsumerManySalesRedelivered(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(40, time.Time{})
		m := &manyCounting{Store: r.db}
		m.lose.Store(true)
		r.consumer("c1", m, pipeline.Options{Readers: 1})
		r.stored(orders, inventory.OrderConfirmed)
		r.acked(orders)
		r.onceEach(orders)
		if calls := m.calls(); len(calls) == 0 || len(calls[0]) != 40 {
			t.Errorf("ApplyMany calls of %v sales, want the first of the 40 sales", lens(calls))
		}
		if n := m.applies.Load(); n != 40 {
			t.Errorf("%d Apply calls after the lost reply, want 40 (each sale again, on its own)", n)
		}
	})
}

// TestConsumerPoisonedSaleAmongMany: one sale's entry can never be applied
// (an order id of no sale); the other sales of the same read are stored,
// and the entry is dead-lettered, its sale's other order stored.
func TestConsumerPoisonedSaleAmongMany(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		poison, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.eng.EventsKey("m005"),
			Values: []any{"type", "bought", "order", "x", "user", "u9", "items", "A=1", "at", "1"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := &manyCounting{Store: r.db}
		r.consumer("c1", m, pipeline.Options{Readers: 1})
		r.stored(orders, inventory.OrderConfirmed)
		r.onceEach(orders)
		deadline := time.Now().Add(30 * time.Second)
		for {
			letters, err := r.db.DeadLetters(r.ctx, "m005")
			if err == nil && len(letters) == 1 && letters[0].EventID == poison {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dead letters of m005: %+v, %v; want the poisoned entry %s", letters, err, poison)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range 20 {
			if i == 5 {
				continue
			}
			if letters, err := r.db.DeadLetters(r.ctx, fmt.Sprintf("m%03d", i)); err != nil || len(letters) != 0 {
				t.Errorf("dead letters of m%03d: %+v, %v; want none", i, letters, err)
			}
		}
	})
}

func lens(calls [][]string) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = len(c)
	}
	return out
}
