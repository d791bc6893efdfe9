package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
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
	s := &Store{db: stdlib.OpenDB(*cfg), dialect: Postgres, maxParams: 65535, schema: cfg.RuntimeParams["search_path"]}
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

// lossyConn is a connection to PostgreSQL that, once armed, loses the
// reply to the next COMMIT it sends: the server committed, the client
// sees a broken connection.
type lossyConn struct {
	net.Conn
	armed *atomic.Bool
	lose  bool
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if c.armed.Load() && bytes.Contains(p, []byte("COMMIT\x00")) {
		c.armed.Store(false)
		c.lose = true
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if !c.lose {
		return c.Conn.Read(p)
	}
	// The reply comes (COMMIT is done), and is lost with the connection.
	_, _ = c.Conn.Read(p)
	_ = c.Conn.Close()
	return 0, errors.New("lossyConn: reply lost")
}

// TestAdvPipelinedCommitReplyLost: the pipelined apply's COMMIT is
// carried out but its reply is lost (the connection breaks). ApplyMany
// must fail (the consumer does not acknowledge what it does not know
// stored), the orders are stored, and applying the batch again, as the
// consumer does, stores nothing twice and leaves the counts right.
func TestAdvPipelinedCommitReplyLost(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	cfg, err := pgx.ParseConfig(url)
	must(t, err)
	var armed atomic.Bool
	var d net.Dialer
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: c, armed: &armed}, nil
	}
	s := &Store{db: stdlib.OpenDB(*cfg), dialect: Postgres, maxParams: 65535, schema: cfg.RuntimeParams["search_path"]}
	bg := context.Background()
	must(t, s.migrate(bg))
	t.Cleanup(func() { s.Close() })
	other := openStore(t, url)
	for _, id := range []string{"l1", "l2"} {
		must(t, s.CreateSale(bg, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	}
	e1, e2 := newEvents("l1"), newEvents("l2")
	batch := []SaleEvents{
		{SaleID: "l1", Events: []inventory.Event{e1.bought("u1", line("A", 1)), e1.bought("u2", line("A", 2))}},
		{SaleID: "l2", Events: []inventory.Event{e2.bought("u1", line("A", 1))}},
	}
	txs := s.txs.Load()
	armed.Store(true)
	if err := s.ApplyMany(bg, batch); err == nil {
		t.Fatal("ApplyMany whose COMMIT reply was lost reported success")
	}
	if armed.Load() {
		t.Fatal("no COMMIT was sent")
	}
	check(t, "transactions (the pipeline only)", s.txs.Load()-txs, int64(1))
	counts, err := other.CountOrdersOf(bg, []string{"l1", "l2"})
	must(t, err)
	check(t, "orders stored by the commit whose reply was lost", counts["l1"][inventory.OrderConfirmed]+counts["l2"][inventory.OrderConfirmed], 3)
	before := dumpState(t, other)
	for range 2 { // the consumer's retries
		must(t, s.ApplyMany(bg, batch))
	}
	after := dumpState(t, other)
	for table := range before {
		check(t, table, after[table], before[table])
	}
}

// TestAdvPipelinedBackendKilledBeforeCommit: the pipelined apply's
// backend is terminated (pg_terminate_backend, waiting until it is gone)
// after the pipeline and before COMMIT. ApplyMany fails, nothing of the
// batch is stored, and the store's next apply (a fresh connection) stores
// it once.
func TestAdvPipelinedBackendKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	killer := openStore(t, url)
	tracer := &killAfterBatch{killer: killer}
	s := openTracedPostgres(t, url, tracer)
	bg := context.Background()
	must(t, s.CreateSale(bg, Sale{Sale: inventory.Sale{ID: "k1", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	e := newEvents("k1")
	batch := []SaleEvents{{SaleID: "k1", Events: []inventory.Event{e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1))}}}
	tracer.armed.Store(true)
	if err := s.ApplyMany(bg, batch); err == nil {
		t.Fatal("ApplyMany whose backend was killed before COMMIT succeeded")
	}
	if tracer.armed.Load() {
		t.Fatal("no batch was sent")
	}
	must(t, tracer.err)
	counts, err := killer.CountOrdersOf(bg, []string{"k1"})
	must(t, err)
	check(t, "orders after the killed apply", counts["k1"][inventory.OrderConfirmed], 0)
	must(t, s.ApplyMany(bg, batch))
	must(t, s.ApplyMany(bg, batch))
	counts, err = killer.CountOrdersOf(bg, []string{"k1"})
	must(t, err)
	check(t, "orders after the retries", counts["k1"][inventory.OrderConfirmed], 2)
}

// killAfterBatch terminates, once armed, the backend of the connection
// whose batch was just read, and waits until it is gone.
type killAfterBatch struct {
	cancelAfterBatch
	killer *Store
	armed  atomic.Bool
	err    error
}

func (k *killAfterBatch) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	if k.armed.Swap(false) {
		var ok bool
		k.err = k.killer.queryRow(context.Background(), k.killer.db, "SELECT pg_terminate_backend($1, 600000)", conn.PgConn().PID()).Scan(&ok)
		if k.err == nil && !ok {
			k.err = errors.New("backend not terminated")
		}
	}
}

// TestAdvPipelinedFailsMidway: a statement of the pipeline fails after
// the orders went in (here the insert of an order's lines in order_items,
// refused by a trigger the test adds: any error but the unique key's). Nothing of
// the batch stays (orders, lines, counts, degraded-mode counters), the
// error is returned, and the connection — the only one of the pool — is
// usable: the next apply goes through on it.
func TestAdvPipelinedFailsMidway(t *testing.T) {
	t.Parallel()
	s := openStore(t, dbtest.PostgresURL(t))
	s.db.SetMaxOpenConns(1)
	bg := context.Background()
	must(t, s.CreateSale(bg, Sale{Sale: inventory.Sale{ID: "m1", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	_, err := s.exec(bg, s.db, "INSERT INTO degraded_stock (sale_id, sku, epoch, sold) VALUES ('m1', 'A', 1, 5)")
	must(t, err)
	_, err = s.db.ExecContext(bg, `CREATE FUNCTION refuse_line() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.sku = 'poison' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_line BEFORE INSERT ON order_items FOR EACH ROW EXECUTE FUNCTION refuse_line()`)
	must(t, err)
	e := newEvents("m1")
	poisoned := []SaleEvents{{SaleID: "m1", Events: []inventory.Event{e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1), line("poison", 1))}}}
	txs := s.txs.Load()
	if err := s.ApplyMany(bg, poisoned); err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("ApplyMany of a batch whose lines are refused: %v", err)
	}
	check(t, "transactions (the pipeline only)", s.txs.Load()-txs, int64(1))
	for _, table := range []string{"orders", "order_items", "journal", "order_counts"} {
		var n int
		must(t, s.queryRow(bg, s.db, "SELECT COUNT(*) FROM "+table).Scan(&n))
		check(t, table+" rows left by the failed batch", n, 0)
	}
	var left int
	must(t, s.queryRow(bg, s.db, "SELECT COUNT(*) FROM degraded_stock").Scan(&left))
	check(t, "degraded-mode counters (deleted by the failed batch: back)", left, 1)
	good := []SaleEvents{{SaleID: "m1", Events: []inventory.Event{e.bought("u1", line("A", 1)), e.bought("u2", line("A", 1))}}}
	must(t, s.ApplyMany(bg, good))
	counts, err := s.CountOrdersOf(bg, []string{"m1"})
	must(t, err)
	check(t, "orders", counts["m1"][inventory.OrderConfirmed], 2)
}

// TestAdvPipelinedConsumersRace: several consumers apply the same entries
// at once (reclaimed from one another), in batches of overlapping sets of
// sales — some with a row in sales (locked), one without (nothing to
// lock). Every apply succeeds (no deadlock between them, no error to
// retry), and each order is stored once, counted once.
func TestAdvPipelinedConsumersRace(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	bg := context.Background()
	var stores []*Store
	for range 4 {
		stores = append(stores, openStore(t, url))
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		must(t, stores[0].CreateSale(bg, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	}
	gens := map[string]*events{}
	ids := []string{"r1", "r2", "r3", "r4"} // r4: no row in sales
	for _, id := range ids {
		gens[id] = newEvents(id)
	}
	const rounds = 15
	want := 0
	var sets [][][]SaleEvents // per round, the batch of each consumer
	for r := range rounds {
		evs := map[string][]inventory.Event{}
		for _, id := range ids {
			for i := range 3 {
				evs[id] = append(evs[id], gens[id].bought(fmt.Sprintf("u%d-%d", r, i), line("A", 1)))
				want++
			}
		}
		var round [][]SaleEvents
		for c := range stores {
			var batch []SaleEvents
			for j, id := range ids {
				if (j+c+r)%4 != 3 { // each consumer leaves out one sale: overlapping sets
					batch = append(batch, SaleEvents{SaleID: id, Events: evs[id]})
				}
			}
			round = append(round, batch)
		}
		// And one consumer with every sale, so each order is applied.
		round = append(round, []SaleEvents{{SaleID: "r1", Events: evs["r1"]}, {SaleID: "r2", Events: evs["r2"]}, {SaleID: "r3", Events: evs["r3"]}, {SaleID: "r4", Events: evs["r4"]}})
		sets = append(sets, round)
	}
	for _, round := range sets {
		var wg sync.WaitGroup
		errs := make([]error, len(round))
		for c, batch := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[c] = stores[c%len(stores)].ApplyMany(bg, batch)
			}()
		}
		wg.Wait()
		for c, err := range errs {
			if err != nil {
				t.Errorf("consumer %d: %v", c, err)
			}
		}
	}
	counts, err := stores[0].CountOrdersOf(bg, ids)
	must(t, err)
	got := 0
	for _, id := range ids {
		got += counts[id][inventory.OrderConfirmed]
	}
	check(t, "orders counted", got, want)
	var n int
	must(t, stores[0].queryRow(bg, stores[0].db, "SELECT COUNT(*) FROM orders").Scan(&n))
	check(t, "orders stored", n, want)
	must(t, stores[0].queryRow(bg, stores[0].db, allJournalRows).Scan(&n))
	check(t, "journal rows", n, want)
}

// TestAdvPipelinedMixedAndLarge: a batch whose bought events are mixed
// with others in one sale (a buy and its cancel; a buy and its payment)
// does not take the pipeline, whose statements know only buys: each order
// ends as its events say. And a batch of bought events whose rows carry
// more values than a statement's parameter limit (65535) goes as one
// pipeline, and again (the consumer crashed before its ack) changes
// nothing.
func TestAdvPipelinedMixedAndLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, dbtest.PostgresURL(t))
	for _, id := range []string{"x1", "x2", "x3"} {
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}, {SKU: "B", Stock: -1}}}}))
	}
	e1, e2 := newEvents("x1"), newEvents("x2")
	b1, b2, b3 := e1.bought("u1", line("A", 1)), e1.bought("u2", line("A", 1)), e2.bought("u3", line("A", 1))
	paid := e1.next(inventory.EventPaid)
	paid.Order = b2.Order
	paid.Order.PaymentRef = "ref"
	must(t, s.ApplyMany(ctx, []SaleEvents{
		{SaleID: "x1", Events: []inventory.Event{b1, e1.cancelled(b1), b2, paid}},
		{SaleID: "x2", Events: []inventory.Event{b3}},
	}))
	for id, want := range map[string]inventory.OrderStatus{b1.Order.ID: inventory.OrderCancelled, b2.Order.ID: inventory.OrderConfirmed, b3.Order.ID: inventory.OrderConfirmed} {
		o, err := s.Order(ctx, id)
		must(t, err)
		check(t, "status of "+id, o.Status, want)
	}
	o, err := s.Order(ctx, b2.Order.ID)
	must(t, err)
	check(t, "payment of the paid order", o.Payment, inventory.PaymentPaid)
	// Events that name no order of the batch, with buys: a restock, a
	// pause, a cancel of an order stored before.
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "x4", Items: []inventory.Item{{SKU: "A", Stock: 10}}}}))
	e4 := newEvents("x4")
	b4, b5, b6, b7 := e4.bought("u1", line("A", 1)), e4.bought("u2", line("A", 1)), e4.bought("u3", line("A", 1)), e4.bought("u4", line("A", 1))
	must(t, s.ApplyMany(ctx, []SaleEvents{{SaleID: "x4", Events: []inventory.Event{b4}}}))
	// One at a time: two would give the pipeline two rows of one key, and
	// its unique key would send the batch the careful way whatever.
	for _, ev := range []inventory.Event{e4.restocked("A", 5), e4.paused(), e4.cancelled(b4)} {
		must(t, s.ApplyMany(ctx, []SaleEvents{{SaleID: "x4", Events: []inventory.Event{b5, ev}}}))
		b5, b6 = b6, b7
	}
	sale, err := s.Sale(ctx, "x4")
	must(t, err)
	check(t, "x4 stocked after the restock", sale.Items[0].Stock, int64(15))
	check(t, "x4 paused", sale.Paused, true)
	var n int
	must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM orders WHERE sale_id = 'x4'").Scan(&n))
	check(t, "orders of x4", n, 4)
	o, err = s.Order(ctx, b4.Order.ID)
	must(t, err)
	check(t, "the order cancelled", o.Status, inventory.OrderCancelled)

	e3 := newEvents("x3")
	var evs []inventory.Event
	for i := range 9000 { // 9000 orders of 2 lines: 36000 line and 144000 journal values
		evs = append(evs, e3.bought(fmt.Sprintf("u%d", i), line("A", 1), line("B", 1)))
	}
	batch := []SaleEvents{{SaleID: "x3", Events: evs}}
	txs := s.txs.Load()
	must(t, s.ApplyMany(ctx, batch))
	check(t, "transactions of the large batch", s.txs.Load()-txs, int64(1))
	before := dumpState(t, s)
	must(t, s.ApplyMany(ctx, batch))
	after := dumpState(t, s)
	for table := range before {
		if len(after[table]) != len(before[table]) {
			t.Errorf("%s: %d rows after the batch again, %d before", table, len(after[table]), len(before[table]))
		}
	}
	counts, err := s.CountOrdersOf(ctx, []string{"x3"})
	must(t, err)
	check(t, "orders of x3", counts["x3"][inventory.OrderConfirmed], 9000)
}

// TestAdvPipelinedRacesHandOver: an instance hands over (AdoptOrders) the
// orders Redis acknowledged while the consumer applies their bought
// events, of two sales, at the same time, round after round; and a
// degraded-mode counter is there to forget. Neither fails (no deadlock),
// each order is stored once with its lines, the counts are right.
func TestAdvPipelinedRacesHandOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.PostgresURL(t)
	consumer, instance := openStore(t, url), openStore(t, url)
	for _, id := range []string{"h1", "h2"} {
		must(t, consumer.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
	}
	g1, g2 := newEvents("h1"), newEvents("h2")
	want := 0
	for r := range 20 {
		_, err := consumer.exec(ctx, consumer.db, "INSERT INTO degraded_stock (sale_id, sku, epoch, sold) VALUES ('h1', 'A', ?, 1)", r+1)
		must(t, err)
		var evs1, evs2 []inventory.Event
		var orders []inventory.Order
		for i := range 4 {
			evs1 = append(evs1, g1.bought(fmt.Sprintf("a%d-%d", r, i), line("A", 1)))
			evs2 = append(evs2, g2.bought(fmt.Sprintf("b%d-%d", r, i), line("A", 1)))
			want += 2
		}
		// The hand-over holds some of the orders (the others Redis had
		// sent down the stream before), listed sale h2's first.
		for i := range 3 {
			orders = append(orders, evs2[i].Order, evs1[i+1].Order)
		}
		var wg sync.WaitGroup
		var errApply, errAdopt error
		wg.Add(2)
		go func() {
			defer wg.Done()
			errApply = consumer.ApplyMany(ctx, []SaleEvents{{SaleID: "h2", Events: evs2}, {SaleID: "h1", Events: evs1}})
		}()
		go func() { defer wg.Done(); errAdopt = instance.AdoptOrders(ctx, orders) }()
		wg.Wait()
		must(t, errApply)
		must(t, errAdopt)
	}
	var n, lines, journal int
	must(t, consumer.queryRow(ctx, consumer.db, "SELECT COUNT(*) FROM orders").Scan(&n))
	must(t, consumer.queryRow(ctx, consumer.db, "SELECT COUNT(*) FROM "+orderLines("true")+" l").Scan(&lines))
	must(t, consumer.queryRow(ctx, consumer.db, allJournalRows).Scan(&journal))
	check(t, "orders", n, want)
	check(t, "lines", lines, want)
	check(t, "journal rows (every bought event once)", journal, want)
	counts, err := consumer.CountOrdersOf(ctx, []string{"h1", "h2"})
	must(t, err)
	check(t, "orders counted", counts["h1"][inventory.OrderConfirmed]+counts["h2"][inventory.OrderConfirmed], want)
}

// TestAdvPipelinedRacesDegradedBuys: degraded-mode buys run while the
// consumer applies orders Redis sold (each batch through the pipeline,
// some again as after a crash before the ack). Every buy and apply
// succeeds (the stock is ample), and in the end degraded mode's counters
// agree with the orders: the next buy's remaining is the stock less every
// live order's units, not a count the consumer's writes made stale.
func TestAdvPipelinedRacesDegradedBuys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, dbtest.PostgresURL(t))
	now := time.Now()
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "d1", PerUserLimit: 100, Items: []inventory.Item{{SKU: "A", Stock: 100}}}}))
	m, err := s.SellMode(ctx)
	must(t, err)
	m, err = s.SwitchMode(ctx, m.Epoch, ModeDB, now, now, "test")
	must(t, err)
	e := newEvents("d1")
	var batches [][]SaleEvents
	for b := range 10 {
		var evs []inventory.Event
		for i := range 2 {
			evs = append(evs, e.bought(fmt.Sprintf("r%d-%d", b, i), line("A", 1)))
		}
		batches = append(batches, []SaleEvents{{SaleID: "d1", Events: evs}})
	}
	var wg sync.WaitGroup
	var degraded atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				_, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Buy: checked(inventory.BuyRequest{SaleID: "d1", UserID: fmt.Sprintf("g%d", g),
					Lines: []inventory.Line{line("A", 1)}, IdempotencyKey: fmt.Sprint(i)}), Now: now})
				switch {
				case err == nil:
					degraded.Add(1)
				case errors.Is(err, inventory.ErrSoldOut):
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, b := range batches {
			if err := s.ApplyMany(ctx, b); err != nil {
				t.Error(err)
			}
			if i%3 == 2 {
				if err := s.ApplyMany(ctx, b); err != nil { // again: no ack came
					t.Error(err)
				}
			}
		}
	}()
	wg.Wait()
	buy := func(user string) inventory.Receipt {
		rc, err := s.Buy(ctx, DegradedBuy{Epoch: m.Epoch, Buy: checked(inventory.BuyRequest{SaleID: "d1", UserID: user,
			Lines: []inventory.Line{line("A", 1)}}), Now: now})
		must(t, err)
		degraded.Add(1)
		return rc
	}
	// Degraded mode's counters are there now; one more batch from Redis
	// (through the pipeline) must make the next buy count again.
	buy("probe")
	must(t, s.ApplyMany(ctx, []SaleEvents{{SaleID: "d1", Events: []inventory.Event{e.bought("late", line("A", 1))}}}))
	var units int64
	must(t, s.queryRow(ctx, s.db, `SELECT COALESCE(CAST(SUM(l.qty) AS BIGINT), 0) FROM `+
		orderLines("o.sale_id = 'd1' AND o.status = 'confirmed'")+` l`).Scan(&units))
	check(t, "live units (21 from Redis, the rest degraded)", units, 21+degraded.Load())
	check(t, "remaining after the race", buy("last").Remaining, []int64{100 - units - 1})
}
