package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// degradedSale creates sale s1 (limit 2; A: 5 units, U: unlimited) and
// switches the database to selling it; it returns the degraded epoch.
func degradedSale(t *testing.T, s *Store, now time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "s1", PerUserLimit: 2,
		Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: -1}}}}))
	m, err := s.SellMode(ctx)
	must(t, err)
	check(t, "the mode of a new database", [3]any{m.Setting, m.Mode, m.Epoch}, [3]any{SettingAuto, ModeRedis, int64(0)})
	m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
	must(t, err)
	return m.Epoch
}

func TestDegradedBuy(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		buy := func(user string, key string, lines ...inventory.Line) (inventory.Receipt, error) {
			return s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines, IdempotencyKey: key}), Now: now})
		}
		rc, err := buy("u1", "k1", line("A", 2), line("U", 1))
		must(t, err)
		check(t, "remaining after a buy", rc.Remaining, []int64{3, -1})
		check(t, "the order", [3]any{rc.Order.Status, rc.Replayed, len(rc.Order.Items)}, [3]any{inventory.OrderConfirmed, false, 2})
		again, err := buy("u1", "k1", line("A", 2), line("U", 1))
		must(t, err)
		check(t, "a replay", [2]any{again.Order.ID, again.Replayed}, [2]any{rc.Order.ID, true})
		// The key with other lines is a mismatch, as in Redis (buy.lua's
		// code 14), and changes nothing.
		for _, other := range [][]inventory.Line{{line("A", 1)}, {line("U", 1), line("A", 2)}, {line("A", 2), line("U", 1), line("B", 1)}} {
			if rc, err := buy("u1", "k1", other...); !errors.Is(err, inventory.ErrIdempotencyMismatch) {
				t.Fatalf("key k1 with other lines %v: %+v, %v; want ErrIdempotencyMismatch", other, rc, err)
			}
		}
		if _, err := buy("u1", "", line("A", 1)); !errors.Is(err, inventory.ErrLimitExceeded) {
			t.Fatalf("a third unit for a limit of 2: %v", err)
		}
		if _, err := buy("u2", "", line("A", 2), line("B", 1)); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("an unknown sku: %v", err)
		}
		_, err = buy("u2", "", line("A", 2))
		must(t, err)
		var short *inventory.SoldOutError
		if _, err := buy("u3", "", line("A", 2), line("U", 1)); !errors.As(err, &short) || fmt.Sprint(short.SKUs) != "[A]" {
			t.Fatalf("2 of the last unit: %v", err)
		}
		// A cancel gives the unit back, once.
		c, err := s.Cancel(ctx, epoch, rc.Order.ID, "u2", now)
		if !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("cancelling another buyer's order: %+v, %v", c, err)
		}
		c, err = s.Cancel(ctx, epoch, rc.Order.ID, "u1", now)
		must(t, err)
		check(t, "cancelled", [2]any{c.Order.Status, c.Replayed}, [2]any{inventory.OrderCancelled, false})
		c, err = s.Cancel(ctx, epoch, rc.Order.ID, "", now)
		must(t, err)
		check(t, "cancelled twice", c.Replayed, true)
		rc, err = buy("u3", "", line("A", 2))
		must(t, err)
		check(t, "remaining after the cancel and a buy", rc.Remaining, []int64{1})
		rc, err = buy("u4", "", line("A", 1))
		must(t, err)
		check(t, "remaining after the last unit", rc.Remaining, []int64{0})
		totals, err := s.Totals(ctx, "s1")
		must(t, err)
		check(t, "sold in the database", totals[0].Sold, int64(5))
		journal, err := s.Journal(ctx, "s1")
		must(t, err)
		check(t, "journal rows (4 bought A, 1 bought U, 2 cancelled)", len(journal), 7)

		// A buy routed by an ended mode, or before sells_from, writes nothing.
		m, err := s.SwitchMode(ctx, epoch, ModeRecovering, now, time.Time{}, "test")
		must(t, err)
		if _, err := buy("u9", "", line("U", 1)); !errors.Is(err, ErrModeChanged) {
			t.Fatalf("a buy of an ended degraded epoch: %v", err)
		}
		if _, err := s.SwitchMode(ctx, epoch, ModeRedis, now, time.Time{}, "stale"); !errors.Is(err, ErrModeChanged) {
			t.Fatalf("a switch from a stale epoch: %v", err)
		}
		m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now.Add(time.Second), "test")
		must(t, err)
		if _, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: "u9", Lines: []inventory.Line{line("U", 1)}}), Now: now}); !errors.Is(err, ErrModeChanged) {
			t.Fatalf("a buy before sells_from: %v", err)
		}
		counts, err := s.CountOrders(ctx, "s1")
		must(t, err)
		check(t, "orders", [2]int{counts[inventory.OrderConfirmed], counts[inventory.OrderCancelled]}, [2]int{3, 1})
	})
}

// TestDegradedBuysNeverOversell: concurrent buyers on the database sell
// exactly the stock, each within the limit.
func TestDegradedBuysNeverOversell(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now()
		epoch := degradedSale(t, s, now)
		var mu sync.Mutex
		sold := 0
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 4 {
					_, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprintf("u%d", g),
						Lines: []inventory.Line{line("A", 1)}, IdempotencyKey: fmt.Sprint(i)}), Now: now})
					switch {
					case err == nil:
						mu.Lock()
						sold++
						mu.Unlock()
					case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
					default:
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		check(t, "units sold of 5", sold, 5)
		totals, err := s.Totals(ctx, "s1")
		must(t, err)
		check(t, "sold in the database", totals[0].Sold, int64(5))
	})
}

// TestAdoptOrders: orders handed over from Redis are inserted once, in
// their last state; adopting them again, or applying their stream events
// later, changes nothing.
func TestAdoptOrders(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		degradedSale(t, s, now)
		o1 := inventory.Order{ID: inventory.NewOrderID("s1"), SaleID: "s1", UserID: "u1", Status: inventory.OrderConfirmed, Items: []inventory.Line{line("A", 1)}, CreatedAt: now}
		o2 := o1
		o2.ID, o2.UserID = inventory.NewOrderID("s1"), "u2"
		must(t, s.AdoptOrders(ctx, []inventory.Order{o1, o2}))
		o2.Status = inventory.OrderCancelled
		must(t, s.AdoptOrders(ctx, []inventory.Order{o1, o2}))
		ev := newEvents("s1")
		bought := ev.next(inventory.EventBought)
		bought.Order = o2
		bought.Order.Status = inventory.OrderConfirmed
		must(t, s.Apply(ctx, "s1", []inventory.Event{bought}))
		counts, err := s.CountOrders(ctx, "s1")
		must(t, err)
		check(t, "orders by status", [2]int{counts[inventory.OrderConfirmed], counts[inventory.OrderCancelled]}, [2]int{1, 1})
		totals, err := s.Totals(ctx, "s1")
		must(t, err)
		check(t, "sold", totals[0].Sold, int64(1))
	})
}

func TestSellModeSetting(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		m, err := s.SetSetting(ctx, SettingForce)
		must(t, err)
		check(t, "setting", m.Setting, SettingForce)
		if _, err := s.SetSetting(ctx, "sometimes"); !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("a bad setting: %v", err)
		}
		now := time.UnixMilli(1_795_000_000_000).UTC()
		must(t, s.Heartbeat(ctx, Instance{Name: "a", SeenAt: now, RedisOKAt: now, Consumer: "ca"}))
		must(t, s.Heartbeat(ctx, Instance{Name: "a", SeenAt: now.Add(time.Second), FlushedEpoch: 2, Consumer: "ca"}))
		must(t, s.Heartbeat(ctx, Instance{Name: "b", SeenAt: now.Add(-time.Hour), RedisOKAt: now.Add(-time.Hour), Consumer: "cb"}))
		ins, err := s.Instances(ctx, now.Add(-time.Minute))
		must(t, err)
		check(t, "instances seen lately", ins, []Instance{{Name: "a", SeenAt: now.Add(time.Second), RedisOKAt: now, FlushedEpoch: 2, Consumer: "ca"}})
		for _, c := range []struct {
			consumer string
			seen     time.Time
			ok       bool
		}{{"ca", now.Add(time.Second), true}, {"cb", now.Add(-time.Hour), true}, {"cz", time.Time{}, false}} {
			seen, ok, err := s.ConsumerSeen(ctx, c.consumer)
			must(t, err)
			check(t, "consumer "+c.consumer+" last seen", [2]any{seen.UnixMilli(), ok}, [2]any{c.seen.UnixMilli(), c.ok})
		}
	})
}

// TestDegradedStockSeesOtherWriters: orders the consumer (Apply) or a
// hand-over (AdoptOrders) writes while the database sells count against
// the stock of the next degraded buy.
func TestDegradedStockSeesOtherWriters(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		buy := func(user string, qty int64) (inventory.Receipt, error) {
			return s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: []inventory.Line{line("A", qty)}}), Now: now})
		}
		rc, err := buy("u1", 1)
		must(t, err)
		check(t, "remaining", rc.Remaining, []int64{4})
		ev := newEvents("s1").next(inventory.EventBought)
		ev.Order = inventory.Order{ID: inventory.NewOrderID("s1"), SaleID: "s1", UserID: "r1", Status: inventory.OrderConfirmed,
			Items: []inventory.Line{line("A", 2)}, CreatedAt: now}
		must(t, s.Apply(ctx, "s1", []inventory.Event{ev}))
		rc, err = buy("u2", 1)
		must(t, err)
		check(t, "remaining after the consumer stored an order", rc.Remaining, []int64{1})
		must(t, s.AdoptOrders(ctx, []inventory.Order{{ID: inventory.NewOrderID("s1"), SaleID: "s1", UserID: "r2",
			Status: inventory.OrderConfirmed, Items: []inventory.Line{line("A", 1)}, CreatedAt: now}}))
		if _, err := buy("u3", 1); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("a buy after a hand-over took the last unit: %v", err)
		}
	})
}

// TestUnsureBuysArriveVoided: buys handed over as of unknown outcome are not
// counted; one that arrives from the stream afterwards is written voided
// (cancelled, its units journaled back), whatever the database sold
// meanwhile; one the database had before the hand-over, or one handed
// over as acknowledged too, stays confirmed. A replay of the idempotency
// key names the live order, not the voided one.
func TestUnsureBuysArriveVoided(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		e := newEvents("s1")
		before := e.bought("u0", line("A", 1)) // consumed before the hand-over
		must(t, s.Apply(ctx, "s1", []inventory.Event{before}))
		lost := e.bought("u1", line("A", 2)) // ran in Redis, its reply lost
		acked := e.bought("u2", line("A", 1))
		never := inventory.Order{ID: e.orderID(), SaleID: "s1", UserID: "u3", Items: []inventory.Line{line("A", 1)}, CreatedAt: now}
		must(t, s.MarkUnsure(ctx, []inventory.Order{before.Order, lost.Order, acked.Order, never}))

		// Not counted: the database sells the units the unsure buys may hold.
		rc, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: []inventory.Line{line("A", 2)},
			IdempotencyKey: lost.Order.IdempotencyKey}), Now: now})
		must(t, err)
		check(t, "remaining after the database sold u1 two", rc.Remaining, []int64{2})

		// The lost buy arrives: voided. Nothing else is.
		must(t, s.Apply(ctx, "s1", []inventory.Event{lost}))
		must(t, s.AdoptOrders(ctx, []inventory.Order{acked.Order})) // another instance told its buyer of it (a replay)
		must(t, s.Apply(ctx, "s1", []inventory.Event{acked}))
		for id, want := range map[string]inventory.OrderStatus{before.Order.ID: inventory.OrderConfirmed, lost.Order.ID: inventory.OrderCancelled,
			acked.Order.ID: inventory.OrderConfirmed, rc.Order.ID: inventory.OrderConfirmed} {
			o, err := s.Order(ctx, id)
			must(t, err)
			check(t, "the status of "+id, o.Status, want)
		}
		totals, err := s.Totals(ctx, "s1")
		must(t, err)
		check(t, "units sold of 5", totals[0].Sold, int64(4))
		journal, err := s.Journal(ctx, "s1")
		must(t, err)
		var moved int64
		for _, j := range journal {
			if j.SKU == "A" {
				switch j.Type {
				case inventory.EventBought:
					moved += j.Qty
				case inventory.EventCancelled:
					moved -= j.Qty
				}
			}
		}
		check(t, "units the journal says are sold", moved, int64(4))
		again, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: []inventory.Line{line("A", 2)},
			IdempotencyKey: lost.Order.IdempotencyKey}), Now: now})
		must(t, err)
		check(t, "the key's replay", [2]any{again.Order.ID, again.Replayed}, [2]any{rc.Order.ID, true})

		// Settled once the stream is drained: an order that turns up later
		// is not voided.
		must(t, s.SettleUnsure(ctx, "s1"))
		late := e.bought("u3", line("A", 1))
		late.Order.ID = never.ID
		must(t, s.Apply(ctx, "s1", []inventory.Event{late}))
		o, err := s.Order(ctx, never.ID)
		must(t, err)
		check(t, "an order that arrived after the settling", o.Status, inventory.OrderConfirmed)
	})
}

// TestDegradedPause: a pause written on the database in degraded mode is
// obeyed by the next database buy, and journaled; a resume lets buys in
// again; an unknown sale, or a mode that has ended, writes nothing.
func TestDegradedPause(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(1_795_000_000_000).UTC()
		epoch := degradedSale(t, s, now)
		buy := func(user string) error {
			_, err := s.Buy(ctx, DegradedBuy{Epoch: epoch, Buy: checked(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: []inventory.Line{line("A", 1)}}), Now: now})
			return err
		}
		must(t, s.SetPaused(ctx, epoch, "s1", true, now))
		if err := buy("u1"); !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("a buy of a paused sale: %v", err)
		}
		sale, err := s.Sale(ctx, "s1")
		must(t, err)
		check(t, "paused", sale.Paused, true)
		must(t, s.SetPaused(ctx, epoch, "s1", false, now.Add(time.Millisecond)))
		must(t, buy("u1"))
		if err := s.SetPaused(ctx, epoch, "nope", true, now); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("pausing an unknown sale: %v", err)
		}
		if err := s.SetPaused(ctx, epoch+1, "s1", true, now); !errors.Is(err, ErrModeChanged) {
			t.Fatalf("a pause routed by another mode: %v", err)
		}
		journal, err := s.Journal(ctx, "s1")
		must(t, err)
		var kinds []inventory.EventType
		for _, j := range journal {
			if j.Type == inventory.EventPaused || j.Type == inventory.EventResumed {
				kinds = append(kinds, j.Type)
			}
		}
		check(t, "journaled", kinds, []inventory.EventType{inventory.EventPaused, inventory.EventResumed})
	})
}
