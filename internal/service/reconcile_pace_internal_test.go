package service

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestReconcileNoPauseAfterAFailedVisit: a visit that is slow because the
// database is (here: a lock held on sale_items, then the blocked backend
// killed, as a partition's timeout would) and fails reads nothing of the
// sale's size: it asks for no pause. Before, its 60× pause (a visit hung 5
// minutes on an outage: 5 hours) kept the sale from the loop, drift and
// all, right after an outage.
func TestReconcileNoPauseAfterAFailedVisit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	dbURL := dbtest.PostgresURL(t)
	cfg := Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb), DatabaseURL: dbURL}
	s, _, must := startByHand(t, cfg)
	_, err := s.eng.Buy(ctx, "s1", "u0", []inventory.Line{{SKU: "A", Qty: 1}}, "")
	must(err)
	settleS1(t, s)

	db, err := sql.Open("pgx", dbURL)
	must(err)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	must(err)
	defer tx.Rollback() //nolint:errcheck
	_, err = tx.ExecContext(ctx, "LOCK TABLE sale_items IN ACCESS EXCLUSIVE MODE")
	must(err)
	killed := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond) // more than minVisitPause / visitShare
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
				WHERE NOT l.granted AND l.relation = 'sale_items'::regclass AND l.pid <> pg_backend_pid()`).Scan(&n)
			if err != nil || n > 0 {
				killed <- err
				return
			}
		}
		killed <- context.DeadlineExceeded
	}()
	rc := newReconciler(s)
	rc.pass(ctx)
	must(<-killed)
	must(tx.Rollback())
	v, ok := rc.visited["s1"]
	if !ok || v.at.IsZero() {
		t.Fatalf("s1 not visited: %+v", v)
	}
	if !v.next.IsZero() {
		t.Fatalf("a visit that failed after %v paces the sale for %v; want no pause",
			time.Since(v.at).Round(time.Second), time.Until(v.next).Round(time.Second))
	}
}

// TestReconcilePauseCapped: however long a visit took, the sale's next is
// at most maxVisitPause after it (a visit slowed by Redis or the database,
// not by the sale's size, would otherwise delay the sale's drift detection
// by hours).
func TestReconcilePauseCapped(t *testing.T) {
	for _, c := range []struct{ took, every, want time.Duration }{
		{20 * time.Second, 30 * time.Second, 20 * time.Minute}, // twenty million orders: as before
		{5 * time.Minute, 30 * time.Second, maxVisitPause},     // a visit hung on a partition
		{time.Hour, -1, maxVisitPause},
	} {
		if got := pauseAfter(c.took, c.every); got != c.want {
			t.Errorf("pauseAfter(%v, %v) = %v, want %v", c.took, c.every, got, c.want)
		}
	}
}

// TestReconcilePaceResetOnEpochChange: a switch of the sell mode (an
// outage, a recovery) ends every pause: the first pass of the new epoch
// visits the sales, when drift is likeliest, whatever their last visit
// before it asked.
func TestReconcilePaceResetOnEpochChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rc, _ := visitedOnce(t)
	first := rc.visited["s1"]
	first.next = time.Now().Add(time.Hour)
	rc.visited["s1"] = first
	rc.pass(ctx) // same epoch: paced
	if v := rc.visited["s1"]; !v.at.Equal(first.at) {
		t.Fatalf("paced sale visited in the same epoch: %+v", v)
	}
	rc.epoch = -1 // as after a pass that found Redis not selling
	rc.pass(ctx)
	if v := rc.visited["s1"]; !v.at.After(first.at) {
		t.Fatalf("after an epoch change: %+v (first visit at %v); want visited again", v, first.at)
	}
}
