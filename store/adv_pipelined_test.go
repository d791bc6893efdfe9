package store

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/inventory"
)

// cancelAfterBatch is a pgx tracer that, once armed, cancels a context
// when a batch's results have all been read: the moment between
// applyPipelined's pipeline and its COMMIT.
type cancelAfterBatch struct {
	cancel atomic.Pointer[context.CancelFunc]
	conn   atomic.Pointer[pgx.Conn] // the connection of the batch it cancelled
}

func (c *cancelAfterBatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *cancelAfterBatch) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *cancelAfterBatch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *cancelAfterBatch) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *cancelAfterBatch) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	if f := c.cancel.Swap(nil); f != nil {
		c.conn.Store(conn)
		(*f)()
	}
}

// openTracedPostgres opens url as openPostgres does, with tracer on every
// connection, migrated, closed when the test ends.
func openTracedPostgres(t *testing.T, url string, tracer pgx.QueryTracer) *Store {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	must(t, err)
	cfg.Tracer = tracer
	s := &Store{db: stdlib.OpenDB(*cfg), dialect: Postgres, maxParams: 65535}
	must(t, s.migrate(context.Background()))
	t.Cleanup(func() {
		checkOrderCounts(t, s)
		s.Close()
	})
	return s
}

// TestAdvPipelinedCancelledBeforeCommit: the context of an ApplyMany ends
// after the pipeline (BEGIN, locks, inserts) was read and before its
// COMMIT is sent. The call fails (a retry is due), and must leave no
// transaction open on a connection of the pool: one would hold the
// sales' row locks and the uncommitted orders until something happened
// to use that connection again (another consumer's or this one's retry
// waits on the locks meanwhile), and a later statement on it would run
// inside that transaction.
func TestAdvPipelinedCancelledBeforeCommit(t *testing.T) {
	t.Parallel()
	tracer := &cancelAfterBatch{}
	url := dbtest.PostgresURL(t)
	s := openTracedPostgres(t, url, tracer)
	other := openStore(t, url) // another consumer, on the same database
	bg := context.Background()
	must(t, s.CreateSale(bg, Sale{Sale: inventory.Sale{ID: "c1", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	e := newEvents("c1")
	batch := []SaleEvents{{SaleID: "c1", Events: []inventory.Event{e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1))}}}

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	tracer.cancel.Store(&cancel)
	if err := s.ApplyMany(ctx, batch); err == nil {
		t.Fatal("ApplyMany whose context ended before COMMIT succeeded")
	}
	c := tracer.conn.Load()
	if c == nil {
		t.Fatal("no batch was sent")
	}
	if !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
		t.Fatalf("the failed apply left its connection in the pool in a transaction (status %q)", c.PgConn().TxStatus())
	}

	// The retry (here by the other consumer, its entries reclaimed) goes
	// through, and stores each order once.
	must(t, other.ApplyMany(bg, batch))
	must(t, s.ApplyMany(bg, batch))
	counts, err := other.CountOrdersOf(bg, []string{"c1"})
	must(t, err)
	check(t, "orders of c1", counts["c1"][inventory.OrderConfirmed], 2)
}
