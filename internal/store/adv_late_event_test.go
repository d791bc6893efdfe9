package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestAdvOldMastersLateEventDoesNotHideANewOne: a failover to a replica
// whose clock is behind the stream's ids (here: both servers' clocks are
// behind the stream's last id, so each hands out last id + 1). The repair
// raises the promoted stream to the newest id the database holds, but an
// event of the old master the consumer had read before the failover, and
// writes only after the repair read the database (a slow transaction, a
// paused process), is not among them: the promoted master hands out its id
// again. Alice's cancel on the old master (acknowledged to her, handed over)
// and bob's cancel on the promoted one then share an id and a sku: the
// database must store both, not skip bob's as applied (his order would stay
// confirmed while Redis sells his unit again).
func TestAdvOldMastersLateEventDoesNotHideANewOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sale := inventory.Sale{ID: "floor", PerUserLimit: 2, Items: []inventory.Item{{SKU: "phone", Stock: 5}}}
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			oldSrv, newSrv := redistest.StartServer(t), redistest.StartServer(t)
			rOld, rNew := oldSrv.Client(t), newSrv.Client(t)
			const prefix = "late:"
			engOld := inventory.New(rOld, inventory.Options{Prefix: prefix})
			key := engOld.EventsKey("floor")
			must(t, engOld.CreateSale(ctx, sale))
			// The stream's last id ahead of both clocks (raised to a floor
			// from a clock that was ahead): every id is last id + 1.
			ahead := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) + "-0"
			must(t, rOld.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: ahead, Values: []any{"floor", "1"}}).Err())
			must(t, rOld.XDel(ctx, key, ahead).Err())
			bob, err := engOld.Buy(ctx, "floor", "bob", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			alice, err := engOld.Buy(ctx, "floor", "alice", []inventory.Line{line("phone", 1)}, "")
			must(t, err)
			stored := applyStream(t, s, rOld, key, "-")
			must(t, rOld.XGroupCreate(ctx, key, "orders", "$").Err()) // every entry delivered and acknowledged

			// The replica has all of it; then it is promoted (the old
			// master goes on alone for a moment: its tail is lost).
			host, port, _ := strings.Cut(oldSrv.Addr(), ":")
			must(t, rNew.Do(ctx, "REPLICAOF", host, port).Err())
			waitfor.Until(t, waitfor.Patience, "the replica has the stream", func() error {
				info, err := rNew.XInfoStream(ctx, key).Result()
				if err == nil && info.LastGeneratedID != stored {
					err = errors.New("at " + info.LastGeneratedID)
				}
				if err == nil {
					var groups []string
					for _, g := range rNew.XInfoGroups(ctx, key).Val() {
						groups = append(groups, g.Name)
					}
					if len(groups) != 1 {
						err = errors.New("no group yet")
					}
				}
				return err
			})
			must(t, rNew.Do(ctx, "REPLICAOF", "NO", "ONE").Err())

			// Alice cancels on the old master; the consumer reads it there.
			cancelled, err := engOld.Cancel(ctx, alice.Order.ID, "alice")
			must(t, err)
			lateMsgs, err := rOld.XRange(ctx, key, "("+stored, "+").Result()
			must(t, err)
			if len(lateMsgs) != 1 {
				t.Fatalf("the old master's tail: %v", lateMsgs)
			}
			late, err := inventory.ParseEvent("floor", lateMsgs[0])
			must(t, err)
			// Her cancel was acknowledged to her: the hand-over stores it.
			must(t, s.AdoptOrders(ctx, []inventory.Order{cancelled.Order}))

			// The recovery repairs the promoted master from the database.
			engNew := inventory.New(rNew, inventory.Options{Prefix: prefix, Loader: inventory.LoaderFunc(s.Snapshot)})
			_, err = engNew.Repair(ctx, "floor", nil)
			must(t, err)

			// The consumer's write of the old master's tail lands now.
			must(t, s.Apply(ctx, "floor", []inventory.Event{late}))

			// Bob cancels on the promoted master; the consumer stores it.
			_, err = engNew.Cancel(ctx, bob.Order.ID, "bob")
			must(t, err)
			newMsgs, err := rNew.XRange(ctx, key, "("+stored, "+").Result()
			must(t, err)
			if len(newMsgs) != 1 {
				t.Fatalf("the promoted master's events: %v", newMsgs)
			}
			t.Logf("the old master's late event %s, the promoted master's %s", late.ID, newMsgs[0].ID)
			applyStream(t, s, rNew, key, "("+stored)

			got, err := s.Order(ctx, bob.Order.ID)
			must(t, err)
			check(t, "bob's order in the database after his cancel", got.Status, inventory.OrderCancelled)
			got, err = s.Order(ctx, alice.Order.ID)
			must(t, err)
			check(t, "alice's order in the database after her cancel", got.Status, inventory.OrderCancelled)
			totals, err := s.Totals(ctx, "floor")
			must(t, err)
			check(t, "Totals (database)", totals, []ItemTotals{{"phone", 5, 0}})

			// Applying everything again changes nothing.
			must(t, s.Apply(ctx, "floor", []inventory.Event{late}))
			applyStream(t, s, rNew, key, "("+stored)
			totals, err = s.Totals(ctx, "floor")
			must(t, err)
			check(t, "Totals (database) after applying again", totals, []ItemTotals{{"phone", 5, 0}})
		})
	}
}

// TestAdvTwoEventsUnderOneStreamID: two events of a sale under one stream
// id (an old master's event the database gets late, and the promoted
// master's under the same id, see the test above) are both applied, in
// either order, and applying either again changes nothing: two cancels
// (one of an order of two lines, of which only one sku collides) and two
// restocks of one sku.
func TestAdvTwoEventsUnderOneStreamID(t *testing.T) {
	for _, newFirst := range []bool{false, true} {
		t.Run("new first "+strconv.FormatBool(newFirst), func(t *testing.T) {
			onBoth(t, func(t *testing.T, s *Store) {
				ctx := context.Background()
				e := newEvents("twin")
				created := e.created(3, inventory.Item{SKU: "A", Stock: 10}, inventory.Item{SKU: "B", Stock: 10})
				b1 := e.bought("u1", line("A", 1))
				b2 := e.bought("u2", line("A", 2), line("B", 1))
				must(t, s.Apply(ctx, "twin", []inventory.Event{created, b1, b2}))

				oldCancel, oldRestock := e.cancelled(b1), e.restocked("A", 2)
				newCancel, newRestock := e.cancelled(b2), e.restocked("A", 3)
				newCancel.ID, newRestock.ID = oldCancel.ID, oldRestock.ID
				old, fresh := []inventory.Event{oldCancel, oldRestock}, []inventory.Event{newCancel, newRestock}
				if newFirst {
					old, fresh = fresh, old
				}
				must(t, s.Apply(ctx, "twin", old))
				must(t, s.Apply(ctx, "twin", fresh))
				want := []ItemTotals{{"A", 15, 0}, {"B", 10, 0}}
				totals, err := s.Totals(ctx, "twin")
				must(t, err)
				check(t, "Totals", totals, want)

				for _, again := range [][]inventory.Event{fresh, old, append(slices.Clone(old), fresh...), {newCancel}, {oldRestock}} {
					must(t, s.Apply(ctx, "twin", again))
				}
				totals, err = s.Totals(ctx, "twin")
				must(t, err)
				check(t, "Totals after applying again", totals, want)
				for _, b := range []inventory.Event{b1, b2} {
					got, err := s.Order(ctx, b.Order.ID)
					must(t, err)
					check(t, "order of "+b.Order.UserID, got.Status, inventory.OrderCancelled)
				}
				journal, err := s.Journal(ctx, "twin")
				must(t, err)
				var cancels, restocks int
				for _, j := range journal {
					switch j.Type {
					case inventory.EventCancelled:
						cancels++
					case inventory.EventRestocked:
						restocks++
					}
				}
				check(t, "journal rows of cancels (A, A, B)", cancels, 3)
				check(t, "journal rows of restocks", restocks, 2)
			})
		})
	}
}

// TestAdvPauseUnderATakenIDDoesNotHideALaterOne: a pause and a resume of
// one stream id (the second stored under an id of its own, journalOne),
// both applied before the sale's created event (entries reclaimed out of
// order). The created event sets the flag from the newest of them; a
// pause later in the stream (same millisecond, next sequence) must then
// still take effect: the id of its own is not a later stream id than the
// one it was made from.
func TestAdvPauseUnderATakenIDDoesNotHideALaterOne(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("twinpause")
		created := e.created(1, inventory.Item{SKU: "A", Stock: 10})
		oldPause, newResume, later := e.paused(), e.resumed(), e.paused()
		oldPause.ID, newResume.ID, later.ID = "1700000000500-1", "1700000000500-1", "1700000000500-2"
		must(t, s.Apply(ctx, "twinpause", []inventory.Event{oldPause}))
		must(t, s.Apply(ctx, "twinpause", []inventory.Event{newResume}))
		must(t, s.Apply(ctx, "twinpause", []inventory.Event{created}))
		must(t, s.Apply(ctx, "twinpause", []inventory.Event{later}))
		sale, err := s.Sale(ctx, "twinpause")
		must(t, err)
		check(t, "paused after the later pause", sale.Paused, true)
	})
}
