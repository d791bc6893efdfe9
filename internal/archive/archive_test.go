package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/archive"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// rig is an engine and a database fed by the sale streams, as the service
// wires them, with the service's rule for rebuilds: never an archiving sale.
type rig struct {
	t   testing.TB
	ctx context.Context
	rdb redis.UniversalClient
	eng *inventory.Engine
	db  *store.Store
}

func newRig(t testing.TB, rdb redis.UniversalClient, prefix, dbURL string) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	r := &rig{t: t, ctx: ctx, rdb: rdb, db: db}
	r.eng = inventory.New(rdb, inventory.Options{Prefix: prefix, Loader: inventory.LoaderFunc(r.load)})
	return r
}

func (r *rig) load(ctx context.Context, saleID string) (inventory.Snapshot, error) {
	if st, err := r.db.Archive(ctx, saleID); err == nil && st.Archiving() {
		return inventory.Snapshot{}, &inventory.ArchivedError{SaleID: saleID}
	}
	applied, err := pipeline.Applied(ctx, r.rdb, r.eng, saleID)
	if err != nil {
		return inventory.Snapshot{}, err
	}
	snap, err := r.db.Snapshot(ctx, saleID)
	snap.EventsApplied = applied
	return snap, err
}

// sale creates a sale in the database and Redis and sells units to users
// u0, u1, ...
func (r *rig) sale(id string, units int) []string {
	return r.saleUntil(id, units, time.Time{})
}

// saleUntil is sale for a sale that ends at end (zero: no end).
func (r *rig) saleUntil(id string, units int, end time.Time) []string {
	r.t.Helper()
	s := inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: int64(units) + 10}}, EndsAt: end}
	if err := r.db.CreateSale(r.ctx, store.Sale{Sale: s, CreatedAt: time.Now()}); err != nil {
		r.t.Fatal(err)
	}
	if err := r.eng.CreateSale(r.ctx, s); err != nil {
		r.t.Fatal(err)
	}
	reqs := make([]inventory.BuyRequest, units)
	for i := range reqs {
		reqs[i] = inventory.BuyRequest{SaleID: id, UserID: fmt.Sprintf("u%d", i), Lines: []inventory.Line{{SKU: "A", Qty: 1}}}
	}
	var orders []string
	for _, res := range r.eng.BuyMany(r.ctx, reqs) {
		if res.Err != nil {
			r.t.Fatal(res.Err)
		}
		orders = append(orders, res.Receipt.Order.ID)
	}
	return orders
}

// consume runs an order consumer until the test ends.
func (r *rig) consume(name string) *pipeline.Consumer {
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	c := pipeline.New(r.rdb, r.eng, r.db, pipeline.Options{Name: name, Block: 20 * time.Millisecond,
		DiscoverAll: 20 * time.Millisecond, ClaimIdle: 50 * time.Millisecond, ClaimEvery: 50 * time.Millisecond})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	r.t.Cleanup(func() { cancel(); <-done })
	return c
}

// state describes what is left of the sale, for a failure's message.
func (r *rig) state(id string) string {
	keys, _ := r.rdb.Keys(r.ctx, "{"+strings.TrimSuffix(strings.TrimPrefix(r.eng.Key(id, ""), "{"), "}:")+"}:*").Result()
	chk, err := r.eng.CheckArchive(r.ctx, id)
	st, _ := r.db.Archive(r.ctx, id)
	newest, _ := r.db.NewestEvent(r.ctx, id)
	return fmt.Sprintf("keys %v, check %+v (%v), database: archive %+v, newest event %s", keys, chk, err, st, newest)
}

func (r *rig) hasSale(id string) bool {
	n, err := r.rdb.Exists(r.ctx, r.eng.Key(id, "sale"), r.eng.EventsKey(id), r.eng.Key(id, "orders")).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return n > 0
}

func (r *rig) confirmed(id string) int {
	counts, err := r.db.CountOrders(r.ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return counts[inventory.OrderConfirmed]
}

func realRig(t *testing.T) *rig {
	rdb := redistest.Standalone(t)
	return newRig(t, rdb, redistest.Prefix(t, rdb), dbtest.PostgresURL(t))
}

// A sale that has ended (at its own end: the database knows it without the
// stream) and whose orders are not all in the database keeps its keys:
// with no consumer at all, and with entries a consumer took and never
// acknowledged. Once a consumer has stored everything, it is archived, with
// every order in the database, by any number of archivers at once.
func TestArchiveWaitsForALaggingConsumer(t *testing.T) {
	r := realRig(t)
	const units = 300
	end := time.Now().Add(2 * time.Second)
	r.saleUntil("lag", units, end)
	waitfor.Until(t, waitfor.Patience, "the sale to end", func() error {
		if chk, err := r.eng.CheckArchive(r.ctx, "lag"); err != nil || chk.Reason == "active" {
			return fmt.Errorf("check %+v, %v", chk, err)
		}
		return nil
	})
	arch := archive.New(r.eng, r.db, archive.Options{})
	for range 3 {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !r.hasSale("lag") {
		t.Fatal("archived with no consumer: nothing of the sale was in the database")
	}

	// A consumer that takes 100 entries and stops (never acknowledges).
	key := r.eng.EventsKey("lag")
	if err := r.rdb.XGroupCreateMkStream(r.ctx, key, pipeline.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: pipeline.Group, Consumer: "stalled",
		Streams: []string{key, ">"}, Count: 100}).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !r.hasSale("lag") || r.confirmed("lag") != 0 {
		t.Fatalf("archived while entries were pending: keys %v, %d orders in the database", r.hasSale("lag"), r.confirmed("lag"))
	}

	// A live consumer takes over (the stalled one's entries too), while three
	// archivers pass over and over.
	r.consume("live")
	var wg sync.WaitGroup
	var archived sync.Map
	for i := range 3 {
		wg.Go(func() {
			a := archive.New(r.eng, r.db, archive.Options{})
			deadline := time.Now().Add(waitfor.Patience)
			for time.Now().Before(deadline) {
				n, _, err := a.Pass(r.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n > 0 {
					archived.Store(i, n)
				}
				if !r.hasSale("lag") {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	// The sale's hash and orders are gone.
	if n, err := r.rdb.Exists(r.ctx, r.eng.Key("lag", "sale"), r.eng.Key("lag", "orders")).Result(); err != nil || n != 0 {
		t.Fatalf("the sale was not archived once the consumer caught up: %d of its keys left (%v)", n, err)
	}
	n := 0
	archived.Range(func(_, _ any) bool { n++; return true })
	if n == 0 {
		t.Fatal("no archiver reported archiving the sale")
	}
	if got := r.confirmed("lag"); got != units {
		t.Fatalf("%d orders in the database after archiving, want %d", got, units)
	}
	st, err := r.db.Archive(r.ctx, "lag")
	if err != nil || st.ArchivedAt.IsZero() {
		t.Fatalf("archive state %+v, %v", st, err)
	}
	// Archived: nothing sells it, nothing brings it back.
	_, err = r.eng.Buy(r.ctx, "lag", "late", []inventory.Line{{SKU: "A", Qty: 1}}, "")
	if !errors.Is(err, inventory.ErrSaleNotActive) {
		t.Fatalf("buy of an archived sale: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // consumer rounds
	// A consumer that read the stream a last time before it learnt the sale
	// was archived finds no stream and makes none; the archiver's sweep
	// finds nothing to remove.
	if _, _, err := arch.Pass(r.ctx); err != nil {
		t.Fatal(err)
	}
	if r.hasSale("lag") {
		t.Fatal("an archived sale is back in Redis")
	}
}

// A cancel that reaches Redis between the archiver's look and its removal
// moves the stream: nothing is removed, and the cancel reaches the
// database before the sale is archived.
func TestArchiveRefusesALateCancel(t *testing.T) {
	r := realRig(t)
	orders := r.sale("late", 5)
	consumer := r.consume("c")
	if _, _, err := r.eng.Close(r.ctx, "late"); err != nil {
		t.Fatal(err)
	}
	var chk inventory.ArchiveCheck
	waitfor.Until(t, waitfor.Patience, "the sale to settle", func() error {
		var err error
		if chk, err = r.eng.CheckArchive(r.ctx, "late"); err != nil || !chk.Ready {
			return fmt.Errorf("check %+v, %v", chk, err)
		}
		return nil
	})
	if _, err := r.eng.Cancel(r.ctx, orders[0], ""); err != nil {
		t.Fatal(err)
	}
	consumer.Wake("late") // as the service does after a cancel: the consumer leaves an ended, drained sale idle
	res, err := r.eng.Archive(r.ctx, "late", chk.Last)
	if err != nil || res.Ready || res.Gone {
		t.Fatalf("archive after a late cancel: %+v, %v", res, err)
	}
	if !r.hasSale("late") {
		t.Fatal("keys removed with a cancel in flight")
	}
	arch := archive.New(r.eng, r.db, archive.Options{})
	waitfor.Until(t, waitfor.Patience, "the sale to be archived", func() error {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			return err
		}
		if r.hasSale("late") {
			return errors.New("keys still there: " + r.state("late"))
		}
		return nil
	})
	o, err := r.db.Order(r.ctx, orders[0])
	if err != nil || o.Status != inventory.OrderCancelled {
		t.Fatalf("the late cancel in the database: %+v, %v", o, err)
	}
}

// A sale that has not ended is never archived, however settled.
func TestArchiveLeavesALiveSale(t *testing.T) {
	r := realRig(t)
	r.sale("live", 3)
	r.consume("c")
	waitfor.Until(t, waitfor.Patience, "the orders to be stored", func() error {
		if n := r.confirmed("live"); n != 3 {
			return fmt.Errorf("%d stored", n)
		}
		return nil
	})
	chk, err := r.eng.CheckArchive(r.ctx, "live")
	if err != nil || chk.Ready || chk.Reason != "active" {
		t.Fatalf("check of a live sale: %+v, %v", chk, err)
	}
	if res, err := r.eng.Archive(r.ctx, "live", "-"); err != nil || res.Ready || res.Gone || !r.hasSale("live") {
		t.Fatalf("archive of a live sale: %+v, %v", res, err)
	}
}

// A sale with a payment step that Redis lost (a restart without
// persistence) while a reservation of it was awaiting payment: the
// database alone holds the reservation. The archiver must not archive it
// (no expiry could ever take the reservation then: the sale is never
// rebuilt once archiving, and expiries run in Redis); it brings the sale
// back, deadlines and all, and archives it once the reservation is paid.
func TestAdvArchiveWaitsForAReservationRedisLost(t *testing.T) {
	r := realRig(t)
	s := inventory.Sale{ID: "lost", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}},
		EndsAt: time.Now().Add(1500 * time.Millisecond), PaymentTimeout: time.Hour}
	if err := r.db.CreateSale(r.ctx, store.Sale{Sale: s, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := r.eng.CreateSale(r.ctx, s); err != nil {
		t.Fatal(err)
	}
	rc, err := r.eng.Buy(r.ctx, "lost", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	r.consume("c")
	waitfor.Until(t, waitfor.Patience, "the order to be stored", func() error {
		if n := r.confirmed("lost"); n != 1 {
			return fmt.Errorf("%d stored", n)
		}
		return nil
	})
	if o, err := r.db.Order(r.ctx, rc.Order.ID); err != nil || o.Payment != inventory.PaymentAwaiting {
		t.Fatalf("stored order %+v, %v", o, err)
	}
	// Redis loses the sale (every key of it).
	keys, err := r.rdb.Keys(r.ctx, r.eng.Key("lost", "*")).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of the sale: %v %v", keys, err)
	}
	if err := r.rdb.Del(r.ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, waitfor.Patience, "the sale to end", func() error {
		if time.Now().Before(s.EndsAt.Add(100 * time.Millisecond)) {
			return errors.New("not yet")
		}
		return nil
	})
	arch := archive.New(r.eng, r.db, archive.Options{})
	for range 3 {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := r.db.Archive(r.ctx, "lost"); err != nil || st.Archiving() {
		t.Fatalf("archived with a reservation awaiting payment in the database: %+v, %v", st, err)
	}
	// The reservation is back in Redis: it is paid (or would expire) there.
	if _, _, err := r.eng.Pay(r.ctx, rc.Order.ID, "u1", "ref"); err != nil {
		t.Fatalf("pay of the reservation: %v", err)
	}
	r.consume("c2") // the first one may idle on the ended sale (the service wakes it at a pay)
	waitfor.Until(t, waitfor.Patience, "the sale to be archived", func() error {
		if _, _, err := arch.Pass(r.ctx); err != nil {
			return err
		}
		if st, err := r.db.Archive(r.ctx, "lost"); err != nil || st.ArchivedAt.IsZero() {
			return fmt.Errorf("archive state %+v, %v", st, err)
		}
		return nil
	})
	if o, err := r.db.Order(r.ctx, rc.Order.ID); err != nil || o.Payment != inventory.PaymentPaid {
		t.Fatalf("the paid order in the database: %+v, %v", o, err)
	}
}

// A sale whose stream is settled (every entry delivered and acknowledged)
// while the database holds it only up to an event before the stream's
// last keeps its keys: the archiver compares the two itself, and archives
// the sale once the database holds the last event too.
func TestArchiveRefusesADatabaseBehindTheStream(t *testing.T) {
	r := realRig(t)
	r.sale("behind", 3)
	if _, _, err := r.eng.Close(r.ctx, "behind"); err != nil {
		t.Fatal(err)
	}
	key := r.eng.EventsKey("behind")
	msgs, err := r.rdb.XRange(r.ctx, key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	events, err := inventory.ParseEntries("behind", msgs)
	if err != nil || len(events) < 2 {
		t.Fatalf("events %v, %v", events, err)
	}
	// The database gets all but the last (the close); the group is
	// settled as if it had stored them all.
	if err := r.db.Apply(r.ctx, "behind", events[:len(events)-1]); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.XGroupCreate(r.ctx, key, "orders", "$").Err(); err != nil {
		t.Fatal(err)
	}
	if chk, err := r.eng.CheckArchive(r.ctx, "behind"); err != nil || !chk.Ready || chk.Last != msgs[len(msgs)-1].ID {
		t.Fatalf("check: %+v, %v; want ready at %s", chk, err, msgs[len(msgs)-1].ID)
	}
	arch := archive.New(r.eng, r.db, archive.Options{})
	done, why, err := arch.Sale(r.ctx, "behind")
	if err != nil || done || !strings.HasPrefix(why, "database at "+events[len(events)-2].ID) {
		t.Fatalf("archive with the database behind: done %v, %q, %v; want not done, the database at %s",
			done, why, err, events[len(events)-2].ID)
	}
	if !r.hasSale("behind") {
		t.Fatal("keys removed while the database is behind the stream")
	}
	if st, err := r.db.Archive(r.ctx, "behind"); err != nil || st.Archiving() {
		t.Fatalf("marked archiving while the database is behind: %+v, %v", st, err)
	}

	if err := r.db.Apply(r.ctx, "behind", events[len(events)-1:]); err != nil {
		t.Fatal(err)
	}
	if done, why, err := arch.Sale(r.ctx, "behind"); err != nil || !done || why != "" {
		t.Fatalf("archive with the database level: done %v, %q, %v", done, why, err)
	}
	if r.hasSale("behind") {
		t.Fatal("keys left after the archive: " + r.state("behind"))
	}
}

// beginHook is the database with a hook run as a sale is marked archiving.
type beginHook struct {
	*store.Store
	onBegin func()
}

func (h beginHook) BeginArchive(ctx context.Context, saleID string, at time.Time) error {
	err := h.Store.BeginArchive(ctx, saleID, at)
	h.onBegin()
	return err
}

// Redis found not to sell (degraded mode begins, or Redis restarted)
// while the archiver marks a sale archiving: the keys stay and the sale is
// not marked archived; once Redis sells again, it is archived.
func TestArchivePausedAfterTheMarkRemovesNothing(t *testing.T) {
	r := realRig(t)
	r.sale("halt", 3)
	if _, _, err := r.eng.Close(r.ctx, "halt"); err != nil {
		t.Fatal(err)
	}
	r.consume("c")
	var paused atomic.Bool
	arch := archive.New(r.eng, beginHook{Store: r.db, onBegin: func() { paused.Store(true) }},
		archive.Options{Paused: paused.Load})
	waitfor.Until(t, waitfor.Patience, "the sale to be marked archiving", func() error {
		done, why, err := arch.Sale(r.ctx, "halt")
		if err != nil || done {
			t.Fatalf("archive while redis does not sell: done %v, %q, %v", done, why, err)
		}
		if why != "paused" {
			return errors.New("not yet: " + why)
		}
		return nil
	})
	if !r.hasSale("halt") {
		t.Fatal("keys removed while redis does not sell")
	}
	if st, err := r.db.Archive(r.ctx, "halt"); err != nil || !st.Archiving() || !st.ArchivedAt.IsZero() {
		t.Fatalf("archive state %+v, %v; want archiving, not archived", st, err)
	}
	arch = archive.New(r.eng, r.db, archive.Options{Paused: paused.Load})
	paused.Store(false)
	if done, why, err := arch.Sale(r.ctx, "halt"); err != nil || !done || why != "" {
		t.Fatalf("archive once redis sells again: done %v, %q, %v", done, why, err)
	}
	if r.hasSale("halt") {
		t.Fatal("keys left after the archive: " + r.state("halt"))
	}
}
