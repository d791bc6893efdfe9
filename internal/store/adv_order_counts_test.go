package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// TestAdvOrderCountsMigratedWhileWritten: migration 013 runs on a
// PostgreSQL database that already has orders while other sessions write
// orders: one transaction that inserted and updated orders before the
// migration and commits while it waits, and writers inserting, cancelling
// and paying orders all along (autocommit and multi-statement
// transactions). The counts the migration starts from plus what the
// triggers add must equal a count of the orders in the end.
func TestAdvOrderCountsMigratedWhileWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rest := openMigratedBelow(t, Postgres, dbtest.PostgresURL(t), 13)
	t.Cleanup(func() { checkOrderCounts(t, s) })
	m13 := rest[0]
	var seq atomic.Int64
	insert := func(q querier, sale, status string) (string, error) {
		id := fmt.Sprintf("%s.01J%023d", sale, seq.Add(1))
		_, err := s.exec(ctx, q, `INSERT INTO orders (id, sale_id, user_id, status, created_at, payment_status)
			VALUES (?, ?, 'u', ?, 1, '')`, id, sale, status)
		return id, err
	}
	for i := range 50 {
		_, err := insert(s.db, fmt.Sprintf("s%d", i%3), "confirmed")
		must(t, err)
	}
	// Open before the migration, committed while it waits.
	early, err := s.db.BeginTx(ctx, nil)
	must(t, err)
	id, err := insert(early, "s0", "confirmed")
	must(t, err)
	_, err = s.exec(ctx, early, "UPDATE orders SET status = 'cancelled' WHERE id = ?", id)
	must(t, err)
	_, err = insert(early, "s1", "confirmed")
	must(t, err)

	migrated := make(chan error, 1)
	go func() {
		migrated <- s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.applyMigration(ctx, tx, m13) })
	}()
	// Until the migration waits for early's lock.
	for {
		var n int
		must(t, s.queryRow(ctx, s.db, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%order_counts%'`).Scan(&n))
		if n > 0 {
			break
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sale := fmt.Sprintf("s%d", (w+i)%3)
				err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
					id, err := insert(tx, sale, "confirmed")
					if err != nil {
						return err
					}
					switch i % 3 {
					case 1:
						_, err = s.exec(ctx, tx, "UPDATE orders SET status = 'cancelled' WHERE id = ?", id)
					case 2:
						_, err = s.exec(ctx, tx, "UPDATE orders SET payment_status = 'paid' WHERE id = ?", id)
					}
					return err
				})
				if err == nil && i%4 == 0 {
					_, err = insert(s.db, sale, "cancelled")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	must(t, early.Commit())
	must(t, <-migrated)
	// A few more writes after it, then stop.
	for i := range 20 {
		_, err := insert(s.db, fmt.Sprintf("s%d", i%3), "confirmed")
		must(t, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts, err := s.CountOrdersOf(ctx, []string{"s0", "s1", "s2"})
	must(t, err)
	for _, sale := range []string{"s0", "s1", "s2"} {
		for _, st := range []inventory.OrderStatus{inventory.OrderConfirmed, inventory.OrderCancelled} {
			var n int
			must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM orders WHERE sale_id = ? AND status = ?", sale, string(st)).Scan(&n))
			check(t, sale+" "+string(st), counts[sale][st], n)
		}
	}
}
