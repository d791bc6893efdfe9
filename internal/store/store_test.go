package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// openStore opens url and closes the store when the test ends.
func openStore(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		checkOrderCounts(t, s)
		s.Close()
	})
	return s
}

// openMigratedBelow opens the database of dialect (SQLite or Postgres) at
// url without migrating it, applies its migrations below version, and
// returns the store (closed when the test ends) and the migrations from
// version on; s.migrate applies them.
func openMigratedBelow(t *testing.T, dialect, url string, version int) (*Store, []migration) {
	t.Helper()
	var s *Store
	var err error
	if dialect == SQLite {
		s, err = openSQLite(strings.TrimPrefix(url, "sqlite://"))
	} else {
		s, err = openPostgres(url, "")
	}
	must(t, err)
	t.Cleanup(func() { s.Close() })
	ms, err := migrations(s.dialect)
	must(t, err)
	for i, m := range ms {
		if m.version >= version {
			return s, ms[i:]
		}
		must(t, s.inTx(context.Background(), nil, func(tx *sql.Tx) error { return s.applyMigration(context.Background(), tx, m) }))
	}
	return s, nil
}

// checkOrderCounts fails the test if the counts the triggers of migration
// 013 keep in order_counts differ from a count of the orders themselves:
// every test that writes orders through a store of openStore checks them
// at its end, whatever path wrote them. A store whose database can no
// longer be read (closed by the test, or its tables dropped) is skipped.
func checkOrderCounts(t testing.TB, s *Store) {
	t.Helper()
	read := func(q string) (map[string]int64, error) {
		rows, err := s.db.QueryContext(context.Background(), q)
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		err = scanEach(rows, func() error {
			var sale, status, pay string
			var n int64
			err := rows.Scan(&sale, &status, &pay, &n)
			out[sale+"|"+status+"|"+pay] = n
			return err
		})
		return out, err
	}
	counted, err := read("SELECT sale_id, status, payment_status, n FROM order_counts WHERE n <> 0")
	if err != nil {
		return
	}
	want, err := read("SELECT sale_id, status, payment_status, COUNT(*) FROM orders GROUP BY sale_id, status, payment_status")
	if err != nil {
		return
	}
	if !reflect.DeepEqual(counted, want) {
		t.Errorf("order_counts %v, a count of the orders %v", counted, want)
	}
}

// onBoth runs f as a parallel subtest on a fresh store of each dialect.
func onBoth(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Helper()
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			if s.Dialect() != d.Name {
				t.Fatalf("Dialect() = %q, want %q", s.Dialect(), d.Name)
			}
			f(t, s)
		})
	}
}

// check fails the test if got and want differ.
func check[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func migrationVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), "SELECT version FROM schema_migrations ORDER BY version")
	must(t, err)
	var vs []int
	must(t, scanEach(rows, func() error {
		var v int
		err := rows.Scan(&v)
		vs = append(vs, v)
		return err
	}))
	return vs
}

func wantVersions(t *testing.T, dialect string) []int {
	t.Helper()
	ms, err := migrations(dialect)
	must(t, err)
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.version)
	}
	if len(vs) == 0 {
		t.Fatalf("no migrations embedded for %s", dialect)
	}
	return vs
}

func TestOpenMigratesOnceAcrossReopens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, d.URL)
			check(t, "versions", migrationVersions(t, s), wantVersions(t, d.Name))
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "kept", Items: []inventory.Item{{SKU: "A", Stock: 1}}}}))
			must(t, s.Close())

			s = openStore(t, d.URL)
			check(t, "versions after reopening", migrationVersions(t, s), wantVersions(t, d.Name))
			if _, err := s.Sale(ctx, "kept"); err != nil {
				t.Fatalf("the sale did not survive reopening: %v", err)
			}
		})
	}
}

func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			const n = 6
			var wg sync.WaitGroup
			errs := make([]error, n)
			stores := make([]*Store, n)
			for i := range n {
				wg.Go(func() { stores[i], errs[i] = Open(context.Background(), d.URL) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("Open #%d: %v", i, err)
				}
				defer stores[i].Close()
			}
			check(t, "versions", migrationVersions(t, stores[0]), wantVersions(t, d.Name))
		})
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{"mysql://user:secret@x/db", []string{`"postgres://..."`, `"sqlite://PATH"`, `"mysql"`}},
		{"seckill.db", []string{`"postgres://..."`, `"sqlite://PATH"`, "without a scheme"}},
		{"sqlite://", []string{"needs a file path"}},
		{"postgres://127.0.0.1:1/x?sslmode=disable", []string{"cannot reach database"}},
		// The parser's own message is not shown: it can quote the password.
		{"postgres://u:secret@127.0.0.1:5432/x?sslmode=bogus", []string{"bad database url"}},
		{"sqlite://" + filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), []string{"cannot reach database"}},
	} {
		s, err := Open(ctx, tc.url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %q, want it to mention %s", tc.url, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %q shows the password", tc.url, err)
		}
	}
}

func TestOpenDefaultsToSQLiteFileInWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dialect() != SQLite {
		t.Fatalf("Dialect() = %q", s.Dialect())
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultSQLiteFile)); err != nil {
		t.Fatalf("no %s in the working directory: %v", DefaultSQLiteFile, err)
	}
	var mode string
	must(t, s.db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	var fk, busy int
	must(t, s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk))
	must(t, s.db.QueryRow("PRAGMA busy_timeout").Scan(&busy))
	if mode != "wal" || fk != 1 || busy != 5000 {
		t.Fatalf("journal_mode=%s foreign_keys=%d busy_timeout=%d, want wal, 1, 5000", mode, fk, busy)
	}
}

func TestNumberPlaceholders(t *testing.T) {
	check(t, "rebind", numberPlaceholders("INSERT INTO t (a, b) VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING"),
		"INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING")
	check(t, "no placeholders", numberPlaceholders("SELECT 1"), "SELECT 1")
	check(t, "placeholders", placeholders(2, 3), "(?,?,?),(?,?,?)")
}

// msTime rounds t to what the database keeps: unix milliseconds, UTC.
func msTime(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

func TestSales(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		start := msTime(time.Now().Add(time.Hour))
		want := Sale{
			Sale: inventory.Sale{ID: "s1", PerUserLimit: 2, StartsAt: start, EndsAt: start.Add(time.Hour),
				Items: []inventory.Item{{SKU: "phone", Stock: 100}, {SKU: "case", Stock: inventory.Unlimited}, {SKU: "cable", Stock: 0}}},
			Settings:  `{"require_purchase_token":true,"per_user":"2/s,burst=3","per_sale":"off"}`,
			CreatedAt: msTime(time.Now()),
		}
		must(t, s.CreateSale(ctx, want))
		got, err := s.Sale(ctx, "s1")
		must(t, err)
		check(t, "Sale", got, want)

		// The id is taken: ErrExists, and the sale is untouched.
		other := want
		other.PerUserLimit, other.Items = 9, []inventory.Item{{SKU: "x", Stock: 1}}
		if err := s.CreateSale(ctx, other); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("CreateSale of a taken id = %v, want ErrExists", err)
		}
		got, err = s.Sale(ctx, "s1")
		must(t, err)
		check(t, "Sale after a refused create", got, want)

		// Defaults: limit 0 means 1, CreatedAt now; paused is kept.
		before := time.Now().Add(-time.Second)
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "b", Paused: true, Items: []inventory.Item{{SKU: "A", Stock: 1}}}}))
		b, err := s.Sale(ctx, "b")
		must(t, err)
		if b.PerUserLimit != 1 || !b.Paused || b.CreatedAt.Before(before) || b.Settings != "" || !b.StartsAt.IsZero() || !b.EndsAt.IsZero() {
			t.Fatalf("Sale b = %+v", b)
		}

		// Invalid definitions are refused as the engine refuses them.
		for _, bad := range []inventory.Sale{
			{ID: "bad id", Items: []inventory.Item{{SKU: "A", Stock: 1}}},
			{ID: "c"},
			{ID: "c", Items: []inventory.Item{{SKU: "A", Stock: 1}, {SKU: "A", Stock: 2}}},
			{ID: "c", Items: []inventory.Item{{SKU: "A", Stock: -2}}},
		} {
			if err := s.CreateSale(ctx, Sale{Sale: bad}); !errors.Is(err, inventory.ErrInvalid) {
				t.Fatalf("CreateSale(%+v) = %v, want ErrInvalid", bad, err)
			}
		}

		// Sorted in byte order, whatever the database's collation.
		for _, id := range []string{"a", "C"} {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: 1}}}}))
		}
		ids, err := s.SaleIDs(ctx)
		must(t, err)
		check(t, "SaleIDs", ids, []string{"C", "a", "b", "s1"})

		totals, err := s.Totals(ctx, "s1")
		must(t, err)
		check(t, "Totals", totals, []ItemTotals{{"phone", 100, 0}, {"case", -1, 0}, {"cable", 0, 0}})

		must(t, s.DeleteSale(ctx, "b"))
		if _, err := s.Sale(ctx, "b"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("Sale of a deleted sale = %v, want ErrNotFound", err)
		}
		ids, err = s.SaleIDs(ctx)
		must(t, err)
		check(t, "SaleIDs after delete", ids, []string{"C", "a", "s1"})
		// The id can be used again.
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "b", Items: []inventory.Item{{SKU: "Z", Stock: 3}}}}))
	})
}

func TestNotFound(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		errs := map[string]error{}
		_, errs["Sale"] = s.Sale(ctx, "nope")
		_, errs["Snapshot"] = s.Snapshot(ctx, "nope")
		_, errs["Totals"] = s.Totals(ctx, "nope")
		_, errs["Order"] = s.Order(ctx, "nope.01J00000000000000000000000")
		errs["DeleteSale"] = s.DeleteSale(ctx, "nope")
		for call, err := range errs {
			var nf *inventory.NotFoundError
			if !errors.Is(err, inventory.ErrNotFound) || !errors.As(err, &nf) {
				t.Errorf("%s of an unknown id = %v, want a *NotFoundError", call, err)
			}
		}
		counts, err := s.CountOrders(ctx, "nope")
		must(t, err)
		check(t, "CountOrders", counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 0, inventory.OrderCancelled: 0})
		j, err := s.Journal(ctx, "nope")
		must(t, err)
		check(t, "Journal", len(j), 0)
	})
}

func TestDeleteSaleRefusesALiveSale(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, id := range []string{"ordered", "journaled"} {
			must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: id, Items: []inventory.Item{{SKU: "A", Stock: 5}}}}))
		}
		ev := newEvents("ordered")
		must(t, s.Apply(ctx, "ordered", []inventory.Event{ev.bought("u1", line("A", 1))}))
		ev = newEvents("journaled")
		must(t, s.Apply(ctx, "journaled", []inventory.Event{ev.paused()}))
		for _, id := range []string{"ordered", "journaled"} {
			if err := s.DeleteSale(ctx, id); !errors.Is(err, ErrSaleInUse) {
				t.Fatalf("DeleteSale(%s) = %v, want ErrSaleInUse", id, err)
			}
			if _, err := s.Sale(ctx, id); err != nil {
				t.Fatalf("the sale is gone: %v", err)
			}
		}
	})
}

func TestDeadLetter(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		fields := map[string]any{"type": "bought", "items": "A=x", "at": "1700000000000"}
		must(t, s.DeadLetter(ctx, "s1", "1-1", "bad quantity", fields))
		must(t, s.DeadLetter(ctx, "s1", "1-1", "another reason", map[string]any{"type": "other"}))
		must(t, s.DeadLetter(ctx, "s2", "1-1", "elsewhere", nil))
		dls, err := s.DeadLetters(ctx, "s1")
		must(t, err)
		if len(dls) != 1 {
			t.Fatalf("DeadLetters = %+v, want one", dls)
		}
		d := dls[0]
		if d.SaleID != "s1" || d.EventID != "1-1" || d.Reason != "bad quantity" || d.At.Before(before) {
			t.Fatalf("DeadLetter = %+v", d)
		}
		check(t, "payload", d.Payload, `{"at":"1700000000000","items":"A=x","type":"bought"}`)
		dls, err = s.DeadLetters(ctx, "none")
		must(t, err)
		check(t, "DeadLetters of another sale", len(dls), 0)
		if err := s.DeadLetter(ctx, "s1", "2-1", "x", map[string]any{"c": make(chan int)}); err == nil {
			t.Fatal("DeadLetter with fields JSON cannot encode succeeded")
		}
	})
}

func TestAudit(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		at := msTime(time.Now())
		first := AuditEntry{At: at, Action: "restocked", SaleID: "s1", Target: "A", Detail: map[string]any{"qty": float64(5)},
			Remote: "127.0.0.1:5000", RequestID: "r1"}
		must(t, s.Audit(ctx, first))
		must(t, s.Audit(ctx, AuditEntry{At: at, Action: "paused", SaleID: "s2"}))
		must(t, s.Audit(ctx, AuditEntry{At: at, Action: "resumed", SaleID: "s1"}))
		log, err := s.AuditLog(ctx, "s1")
		must(t, err)
		check(t, "AuditLog(s1)", log, []AuditEntry{first, {At: at, Action: "resumed", SaleID: "s1"}})
		all, err := s.AuditLog(ctx, "")
		must(t, err)
		check(t, "actions", []string{all[0].Action, all[1].Action, all[2].Action}, []string{"restocked", "paused", "resumed"})
	})
}

// events makes hand-built events of one sale with increasing stream ids.
type events struct {
	sale string
	ms   int64
	seq  int
}

func newEvents(sale string) *events { return &events{sale: sale, ms: 1_700_000_000_000} }

func (e *events) next(typ inventory.EventType) inventory.Event {
	e.seq++
	if e.seq%3 == 0 {
		e.ms++
	}
	return inventory.Event{ID: fmt.Sprintf("%d-%d", e.ms, e.seq), SaleID: e.sale, Type: typ, At: time.UnixMilli(e.ms).UTC()}
}

func line(sku string, qty int64) inventory.Line { return inventory.Line{SKU: sku, Qty: qty} }

// orderSeq numbers the orders of hand-built events, so that no two share an id.
var orderSeq atomic.Int64

// orderID returns a new valid order id of the sale.
func (e *events) orderID() string { return fmt.Sprintf("%s.01J%023d", e.sale, orderSeq.Add(1)) }

func (e *events) bought(user string, lines ...inventory.Line) inventory.Event {
	ev := e.next(inventory.EventBought)
	ev.Order = inventory.Order{ID: e.orderID(), SaleID: e.sale, UserID: user, Status: inventory.OrderPending,
		Items: lines, IdempotencyKey: "key-" + user, CreatedAt: ev.At}
	return ev
}

func (e *events) cancelled(of inventory.Event) inventory.Event {
	ev := e.next(inventory.EventCancelled)
	ev.Order = of.Order
	ev.Order.Status = inventory.OrderCancelled
	return ev
}

func (e *events) created(limit int64, items ...inventory.Item) inventory.Event {
	ev := e.next(inventory.EventCreated)
	ev.Sale = inventory.Sale{ID: e.sale, PerUserLimit: limit, Items: items}
	return ev
}

func (e *events) restocked(sku string, qty int64) inventory.Event {
	ev := e.next(inventory.EventRestocked)
	ev.SKU, ev.Qty = sku, qty
	return ev
}

func (e *events) paused() inventory.Event  { return e.next(inventory.EventPaused) }
func (e *events) resumed() inventory.Event { return e.next(inventory.EventResumed) }

// checked is r checked by inventory.CheckBuy, as the service checks a buy
// before it reaches the database; r must be valid.
func checked(r inventory.BuyRequest) inventory.CheckedBuy {
	b, err := inventory.CheckBuy(r)
	if err != nil {
		panic(err)
	}
	return b
}
