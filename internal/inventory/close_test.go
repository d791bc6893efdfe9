package inventory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Close ends a sale at once by the scripts' clock: buys and restocks are
// refused, a closed event carries the window, and a second close changes
// nothing. A sale closed before its start gets a start below its end.
func TestCloseEndsTheSaleAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		now := r.clock.Now()
		r.create(inventory.Sale{ID: "c", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}},
			EndsAt: now.Add(time.Hour)})
		if _, err := r.eng.Buy(r.ctx, "c", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, ""); err != nil {
			t.Fatal(err)
		}
		start, end, err := r.eng.Close(r.ctx, "c")
		if err != nil || !end.Equal(now.Truncate(time.Millisecond)) || !start.IsZero() {
			t.Fatalf("Close: %v %v %v, want the end at %v", start, end, err, now)
		}
		if _, err := r.eng.Buy(r.ctx, "c", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, ""); !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("buy after close: %v", err)
		}
		if _, err := r.eng.Restock(r.ctx, "c", "A", 5); !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("restock after close: %v", err)
		}
		evs := r.events("c")
		last := evs[len(evs)-1]
		if last.Type != inventory.EventClosed || !last.Sale.EndsAt.Equal(end) {
			t.Fatalf("last event %+v, want closed at %v", last, end)
		}
		r.clock.Set(now.Add(time.Second))
		if _, end2, err := r.eng.Close(r.ctx, "c"); err != nil || !end2.Equal(end) || len(r.events("c")) != len(evs) {
			t.Fatalf("second close: end %v, %v, %d events (was %d)", end2, err, len(r.events("c")), len(evs))
		}

		// Closed before it started: ended, and a valid window.
		r.create(inventory.Sale{ID: "early", Items: []inventory.Item{{SKU: "A", Stock: 1}}, StartsAt: now.Add(time.Hour)})
		start, end, err = r.eng.Close(r.ctx, "early")
		if err != nil || !start.Before(end) {
			t.Fatalf("close before the start: %v %v %v", start, end, err)
		}
		if st, err := r.eng.Stock(r.ctx, "early"); err != nil || st.Status != inventory.StatusEnded {
			t.Fatalf("a sale closed before its start: %+v %v", st, err)
		}
	})
}

// A rebuild that read its snapshot before a sale ended, and commits after
// the sale was archived, would bring back the sale as it was (selling, and
// without the orders after the snapshot). archive.lua's mark makes the
// commit refuse it.
func TestArchivedSaleIsNeverRebuiltFromAStaleSnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		loading, release := make(chan struct{}, 1), make(chan struct{})
		stale := inventory.Snapshot{Sale: inventory.Sale{ID: "s", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}},
			EventsApplied: inventory.EventsIgnored}
		r := newRig(t, b, inventory.Options{InitLockTTL: time.Hour, InitTimeout: time.Minute,
			Loader: inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
				select {
				case loading <- struct{}{}:
				default:
				}
				<-release
				return stale, nil
			})})
		other := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix, Clock: r.clock, ScriptClock: r.clock,
			Loader: inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
				return stale, nil
			})})
		r.create(stale.Sale)
		if err := r.rdb.Del(r.ctx, r.key("s", "sale"), r.key("s", "events")).Err(); err != nil { // lost with Redis
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.eng.Stock(r.ctx, "s"); done <- err }() // reads the snapshot, then stalls
		<-loading
		if err := r.rdb.Del(r.ctx, r.key("s", "initlock")).Err(); err != nil { // its lock runs out
			t.Fatal(err)
		}
		// Meanwhile another instance rebuilds the sale, closes it, the
		// database stores everything, and the sale is archived.
		if _, _, err := other.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.XGroupCreate(r.ctx, r.eng.EventsKey("s"), "orders", "$").Err(); err != nil {
			t.Fatal(err)
		}
		chk, err := other.CheckArchive(r.ctx, "s")
		if err != nil || !chk.Ready {
			t.Fatalf("check: %+v %v", chk, err)
		}
		if res, err := other.Archive(r.ctx, "s", chk.Last); err != nil || !res.Ready {
			t.Fatalf("archive: %+v %v", res, err)
		}
		close(release)
		if err := <-done; !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("the stale rebuild: %v, want the sale refused as archived", err)
		}
		if n, err := r.rdb.Exists(r.ctx, r.key("s", "sale")).Result(); err != nil || n != 0 {
			t.Fatalf("the archived sale is back in Redis (%d, %v)", n, err)
		}
		if _, err := r.eng.Buy(r.ctx, "s", "u", []inventory.Line{{SKU: "A", Qty: 1}}, ""); !errors.Is(err, inventory.ErrSaleNotActive) {
			t.Fatalf("buy of an archived sale: %v", err)
		}
	})
}

// Archive removes every key of the sale at once and PurgeArchived those
// that would expire on their own, on the node that holds the sale; the
// archived mark stays (and expires), and keys of other names a caller keeps
// under the sale's tag stay too.
func TestArchiveRemovesEveryKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "gone", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		rc, err := r.eng.Buy(r.ctx, "gone", "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, "u1"); err != nil { // leaves an op:* marker
			t.Fatal(err)
		}
		if _, err := r.eng.Restock(r.ctx, "gone", "A", 1); err != nil { // and another
			t.Fatal(err)
		}
		own := r.eng.Key("gone", "mine")
		if err := r.rdb.Set(r.ctx, own, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.eng.Close(r.ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.XGroupCreate(r.ctx, r.eng.EventsKey("gone"), "orders", "$").Err(); err != nil {
			t.Fatal(err)
		}
		chk, err := r.eng.CheckArchive(r.ctx, "gone")
		if err != nil || !chk.Ready {
			t.Fatalf("check: %+v %v", chk, err)
		}
		if res, err := r.eng.Archive(r.ctx, "gone", chk.Last); err != nil || !res.Ready {
			t.Fatalf("archive: %+v %v", res, err)
		}
		if n, err := r.eng.PurgeArchived(r.ctx, "gone"); err != nil || n != 2 {
			t.Fatalf("purge removed %d keys (%v), want the 2 op markers", n, err)
		}
		left := map[string]bool{}
		for _, k := range r.keysOf(r.key("gone", "*")) {
			left[k] = true
		}
		if len(left) != 2 || !left[own] || !left[r.key("gone", "archived")] {
			t.Fatalf("left of an archived sale: %v, want the mark and the caller's own key", left)
		}
		if ttl, err := r.rdb.PTTL(r.ctx, r.key("gone", "archived")).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Fatalf("the mark's ttl %v (%v), want at most an hour", ttl, err)
		}
	})
}

// keysOf lists the keys matching pattern (on a cluster, on every master).
func (r *rig) keysOf(pattern string) []string {
	r.t.Helper()
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return iter.Err()
	}
	var err error
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(r.ctx, c)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// settle makes the sale's stream settled as a consumer that stored and
// acknowledged every entry leaves it: one group, delivered up to the end.
func (r *rig) settle(sale string) {
	r.t.Helper()
	key := r.eng.EventsKey(sale)
	if err := r.rdb.XGroupDestroy(r.ctx, key, "orders").Err(); err != nil && !strings.Contains(err.Error(), "NOGROUP") {
		r.t.Fatal(err)
	}
	if err := r.rdb.XGroupCreate(r.ctx, key, "orders", "$").Err(); err != nil {
		r.t.Fatal(err)
	}
}

// lastEventID is the last id the sale's stream generated.
func (r *rig) lastEventID(sale string) string {
	r.t.Helper()
	info, err := r.rdb.XInfoStream(r.ctx, r.eng.EventsKey(sale)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return info.LastGeneratedID
}

// A sale that has ended with its stream settled keeps its keys while a
// reservation of it awaits payment (archive.lua looks at the deadlines
// itself: nothing else in the check would see it); once it is paid and
// the stream settled again, the sale is archived.
func TestArchiveRefusesASaleAwaitingPayment(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.paySale("s", 10, time.Hour)
		ids := r.buyEach("s", "u1")
		if _, _, err := r.eng.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.settle("s")
		chk, err := r.eng.CheckArchive(r.ctx, "s")
		if err != nil || chk.Ready || chk.Reason != "awaiting" {
			t.Fatalf("check with a payment awaiting: %+v, %v; want not ready, awaiting", chk, err)
		}
		last := r.lastEventID("s")
		if res, err := r.eng.Archive(r.ctx, "s", last); err != nil || res.Ready || res.Gone || res.Reason != "awaiting" {
			t.Fatalf("archive with a payment awaiting: %+v, %v; want nothing removed, awaiting", res, err)
		}
		if n, err := r.rdb.Exists(r.ctx, r.key("s", "sale"), r.key("s", "deadlines")).Result(); err != nil || n != 2 {
			t.Fatalf("%d of the sale hash and its deadlines left (%v), want both", n, err)
		}

		if _, _, err := r.eng.Pay(r.ctx, ids[0], "u1", "ref"); err != nil {
			t.Fatal(err)
		}
		r.settle("s")
		chk, err = r.eng.CheckArchive(r.ctx, "s")
		if err != nil || !chk.Ready {
			t.Fatalf("check once paid: %+v, %v", chk, err)
		}
		if res, err := r.eng.Archive(r.ctx, "s", chk.Last); err != nil || !res.Ready {
			t.Fatalf("archive once paid: %+v, %v", res, err)
		}
		if n, err := r.rdb.Exists(r.ctx, r.key("s", "sale")).Result(); err != nil || n != 0 {
			t.Fatalf("the sale hash is left after the archive (%d, %v)", n, err)
		}
	})
}

// An event that reaches the stream after the caller looked keeps the keys
// even once it is delivered and acknowledged (the stream settled again):
// the system of record was found to hold the stream up to the id the
// caller passes, not the event after it. Archive names the stream's new
// last id; with it, the sale is archived.
func TestArchiveRefusesAStreamThatMovedSinceTheLook(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		ids := r.buyEach("s", "u1", "u2")
		if _, _, err := r.eng.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.settle("s")
		chk, err := r.eng.CheckArchive(r.ctx, "s")
		if err != nil || !chk.Ready {
			t.Fatalf("check: %+v, %v", chk, err)
		}
		if _, err := r.eng.Cancel(r.ctx, ids[0], ""); err != nil { // a late cancel
			t.Fatal(err)
		}
		r.settle("s")
		moved := r.lastEventID("s")
		if moved == chk.Last {
			t.Fatalf("the cancel did not move the stream from %s", chk.Last)
		}
		res, err := r.eng.Archive(r.ctx, "s", chk.Last)
		if err != nil || res.Ready || res.Gone || res.Reason != "stream moved to "+moved {
			t.Fatalf("archive at the old look %s: %+v, %v; want nothing removed, the stream moved to %s", chk.Last, res, err, moved)
		}
		if n, err := r.rdb.Exists(r.ctx, r.key("s", "sale"), r.key("s", "orders")).Result(); err != nil || n != 2 {
			t.Fatalf("%d of the sale hash and its orders left (%v), want both", n, err)
		}
		if res, err := r.eng.Archive(r.ctx, "s", moved); err != nil || !res.Ready || res.Last != moved {
			t.Fatalf("archive at %s: %+v, %v", moved, res, err)
		}
		if n, err := r.rdb.Exists(r.ctx, r.key("s", "sale")).Result(); err != nil || n != 0 {
			t.Fatalf("the sale hash is left after the archive (%d, %v)", n, err)
		}
	})
}

// A sale is archivable at its end, not a millisecond before it.
func TestArchiveWaitsForTheEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		end := r.clock.Now().Add(time.Hour).Truncate(time.Millisecond)
		r.create(inventory.Sale{ID: "s", PerUserLimit: 2, EndsAt: end, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		r.buyEach("s", "u1")
		r.settle("s")
		r.clock.Set(end.Add(-time.Millisecond))
		if chk, err := r.eng.CheckArchive(r.ctx, "s"); err != nil || chk.Ready || chk.Reason != "active" {
			t.Fatalf("check 1 ms before the end: %+v, %v; want active", chk, err)
		}
		if res, err := r.eng.Archive(r.ctx, "s", r.lastEventID("s")); err != nil || res.Ready || res.Reason != "active" {
			t.Fatalf("archive 1 ms before the end: %+v, %v; want nothing removed, active", res, err)
		}
		r.clock.Set(end)
		chk, err := r.eng.CheckArchive(r.ctx, "s")
		if err != nil || !chk.Ready {
			t.Fatalf("check at the end: %+v, %v", chk, err)
		}
		if res, err := r.eng.Archive(r.ctx, "s", chk.Last); err != nil || !res.Ready {
			t.Fatalf("archive at the end: %+v, %v", res, err)
		}
	})
}

// A sale whose hash is gone while its stream still holds events (entries
// no consumer may have stored) is "stray": nothing is removed, neither by
// a look nor by a removal meant for what is left of an archived sale.
func TestArchiveLeavesAStrayStream(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		r.buyEach("s", "u1")
		if _, _, err := r.eng.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.Del(r.ctx, r.key("s", "sale")).Err(); err != nil {
			t.Fatal(err)
		}
		n := len(r.events("s"))
		if chk, err := r.eng.CheckArchive(r.ctx, "s"); err != nil || chk.Gone || chk.Ready || chk.Reason != "stray" {
			t.Fatalf("check of a stray stream: %+v, %v; want stray", chk, err)
		}
		if res, err := r.eng.Archive(r.ctx, "s", "-"); err != nil || res.Gone || res.Ready || res.Reason != "stray" {
			t.Fatalf("archive of a stray stream: %+v, %v; want nothing removed, stray", res, err)
		}
		if got := len(r.events("s")); got != n {
			t.Fatalf("the stray stream holds %d events, had %d", got, n)
		}
	})
}

// A rebuild under way (its lock held while it loads) is not cut short: the
// archiver's look and removal wait ("rebuilding"), and the rebuild brings
// the sale back.
func TestArchiveWaitsForARebuild(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		loading, release := make(chan struct{}, 1), make(chan struct{})
		snap := inventory.Snapshot{Sale: inventory.Sale{ID: "s", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10}}},
			EventsApplied: inventory.EventsIgnored}
		r := newRig(t, b, inventory.Options{InitLockTTL: time.Hour, InitTimeout: time.Minute,
			Loader: inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
				select {
				case loading <- struct{}{}:
				default:
				}
				<-release
				return snap, nil
			})})
		r.create(snap.Sale)
		if _, _, err := r.eng.Close(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.Del(r.ctx, r.key("s", "sale"), r.eng.EventsKey("s")).Err(); err != nil { // lost with Redis
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.eng.Stock(r.ctx, "s"); done <- err }()
		<-loading
		chk, err := r.eng.CheckArchive(r.ctx, "s")
		res, err2 := r.eng.Archive(r.ctx, "s", "-")
		close(release)
		if err != nil || chk.Gone || chk.Ready || chk.Reason != "rebuilding" {
			t.Fatalf("check during a rebuild: %+v, %v; want rebuilding", chk, err)
		}
		if err2 != nil || res.Gone || res.Ready || res.Reason != "rebuilding" {
			t.Fatalf("archive during a rebuild: %+v, %v; want nothing removed, rebuilding", res, err2)
		}
		if err := <-done; err != nil {
			t.Fatalf("the rebuild: %v", err)
		}
		if rem := r.remaining("s"); rem["A"] != 10 {
			t.Fatalf("the rebuilt sale: remaining %v, want A: 10", rem)
		}
	})
}
