package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
)

// state is everything Apply changes, to compare before and after a repeat.
type state struct {
	Sale    Sale
	Totals  []ItemTotals
	Counts  map[inventory.OrderStatus]int
	Journal int
	Orders  []inventory.Order
}

func stateOf(t *testing.T, s *Store, saleID string) state {
	t.Helper()
	ctx := context.Background()
	var st state
	var err error
	st.Sale, err = s.Sale(ctx, saleID)
	must(t, err)
	st.Totals, err = s.Totals(ctx, saleID)
	must(t, err)
	st.Counts, err = s.CountOrders(ctx, saleID)
	must(t, err)
	j, err := s.Journal(ctx, saleID)
	must(t, err)
	st.Journal = len(j)
	snap, err := s.Snapshot(ctx, saleID)
	must(t, err)
	st.Orders = snap.Orders
	return st
}

// history is a sale's events by hand: created, buys (one of two lines), a
// cancel, a restock, a pause and a resume.
func history(sale string) []inventory.Event {
	e := newEvents(sale)
	created := e.created(3, inventory.Item{SKU: "A", Stock: 10}, inventory.Item{SKU: "B", Stock: inventory.Unlimited})
	b1 := e.bought("u1", line("A", 2), line("B", 1))
	b2 := e.bought("u2", line("A", 1))
	b3 := e.bought("u3", line("B", 3))
	c2 := e.cancelled(b2)
	r := e.restocked("A", 5)
	p := e.paused()
	res := e.resumed()
	b4 := e.bought("u4", line("A", 3))
	b5 := e.bought("u5", line("B", 1), line("A", 1))
	return []inventory.Event{created, b1, b2, b3, c2, r, p, res, b4, b5}
}

func TestApplyHistory(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		evs := history("h")
		must(t, s.Apply(ctx, "h", evs))

		st := stateOf(t, s, "h")
		check(t, "Sale", st.Sale, Sale{CreatedAt: evs[0].At, Sale: inventory.Sale{ID: "h", PerUserLimit: 3,
			Items: []inventory.Item{{SKU: "A", Stock: 15}, {SKU: "B", Stock: -1}}}})
		// A: 2 (u1) + 3 (u4) + 1 (u5); u2's unit came back. B: 1 + 3 + 1.
		check(t, "Totals", st.Totals, []ItemTotals{{"A", 15, 6}, {"B", -1, 5}})
		check(t, "CountOrders", st.Counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 4, inventory.OrderCancelled: 1})

		wantOrder := func(ev inventory.Event, status inventory.OrderStatus) inventory.Order {
			o := ev.Order
			o.Status = status
			return o
		}
		want := []inventory.Order{
			wantOrder(evs[1], inventory.OrderConfirmed), wantOrder(evs[2], inventory.OrderCancelled),
			wantOrder(evs[3], inventory.OrderConfirmed), wantOrder(evs[8], inventory.OrderConfirmed),
			wantOrder(evs[9], inventory.OrderConfirmed),
		}
		check(t, "Snapshot orders", st.Orders, want)
		for _, o := range want {
			got, err := s.Order(ctx, o.ID)
			must(t, err)
			check(t, "Order "+o.ID, got, o)
		}
		snap, err := s.Snapshot(ctx, "h")
		must(t, err)
		check(t, "Snapshot sale", snap.Sale, st.Sale.Sale)
		check(t, "EventsApplied", snap.EventsApplied, "")

		j, err := s.Journal(ctx, "h")
		must(t, err)
		type row struct {
			ev            string
			typ           inventory.EventType
			sku, order, u string
			qty           int64
		}
		var got []row
		for _, e := range j {
			if e.SaleID != "h" {
				t.Fatalf("journal row of sale %q", e.SaleID)
			}
			got = append(got, row{e.EventID, e.Type, e.SKU, e.OrderID, e.UserID, e.Qty})
		}
		o := func(i int) string { return evs[i].Order.ID }
		check(t, "Journal", got, []row{
			{evs[0].ID, inventory.EventCreated, "A", "", "", 10},
			{evs[0].ID, inventory.EventCreated, "B", "", "", -1},
			{evs[1].ID, inventory.EventBought, "A", o(1), "u1", 2},
			{evs[1].ID, inventory.EventBought, "B", o(1), "u1", 1},
			{evs[2].ID, inventory.EventBought, "A", o(2), "u2", 1},
			{evs[3].ID, inventory.EventBought, "B", o(3), "u3", 3},
			{evs[4].ID, inventory.EventCancelled, "A", o(2), "u2", 1},
			{evs[5].ID, inventory.EventRestocked, "A", "", "", 5},
			{evs[6].ID, inventory.EventPaused, "", "", "", 0},
			{evs[7].ID, inventory.EventResumed, "", "", "", 0},
			{evs[8].ID, inventory.EventBought, "A", o(8), "u4", 3},
			{evs[9].ID, inventory.EventBought, "B", o(9), "u5", 1},
			{evs[9].ID, inventory.EventBought, "A", o(9), "u5", 1},
		})
		if !j[6].At.Equal(evs[4].At) {
			t.Fatalf("journal At = %v, want the event's %v", j[6].At, evs[4].At)
		}
		var cancelledAt int64
		must(t, s.db.QueryRow(s.rebind("SELECT cancelled_at FROM orders WHERE id = ?"), o(2)).Scan(&cancelledAt))
		check(t, "cancelled_at", cancelledAt, evs[4].At.UnixMilli())
	})
}

func TestApplyTwiceAndOverlappingChangesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		evs := history("h")
		e := newEvents("h")
		e.ms += 1000 // after history's events
		for i := range 40 {
			evs = append(evs, e.bought(fmt.Sprintf("v%d", i), line("A", 1), line("B", 2)))
		}
		evs = append(evs, e.restocked("A", 7), e.paused())
		must(t, s.Apply(ctx, "h", evs))
		once := stateOf(t, s, "h")
		check(t, "Totals", once.Totals, []ItemTotals{{"A", 22, 46}, {"B", -1, 85}})
		check(t, "paused", once.Sale.Paused, true)

		// The whole batch again, then overlapping windows of it, then a batch
		// holding some events twice: each changes nothing.
		must(t, s.Apply(ctx, "h", evs))
		check(t, "after a repeat", stateOf(t, s, "h"), once)
		for _, w := range [][2]int{{0, 20}, {10, 35}, {30, len(evs)}, {5, 6}} {
			must(t, s.Apply(ctx, "h", evs[w[0]:w[1]]))
		}
		must(t, s.Apply(ctx, "h", append(append([]inventory.Event{}, evs[12:16]...), evs[12:16]...)))
		check(t, "after overlapping batches", stateOf(t, s, "h"), once)
	})
}

func TestApplyOverlappingBatchesFromScratch(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		evs := history("h")
		// A consumer that crashed after committing [0,6) re-reads [3,8), and
		// a batch repeats an event it holds.
		must(t, s.Apply(ctx, "h", evs[:6]))
		must(t, s.Apply(ctx, "h", evs[3:8]))
		must(t, s.Apply(ctx, "h", append(append([]inventory.Event{}, evs[7:]...), evs[8])))
		st := stateOf(t, s, "h")
		check(t, "Totals", st.Totals, []ItemTotals{{"A", 15, 6}, {"B", -1, 5}})
		check(t, "journal rows", st.Journal, 13)
		check(t, "CountOrders", st.Counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 4, inventory.OrderCancelled: 1})
	})
}

func TestCancelBeforeBuy(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("c")
		created := e.created(5, inventory.Item{SKU: "A", Stock: 10})
		b := e.bought("u1", line("A", 2))
		other := e.bought("u2", line("A", 1))
		c := e.cancelled(b)
		// The cancel arrives first (its bought entry was reclaimed late).
		must(t, s.Apply(ctx, "c", []inventory.Event{created, c}))
		got, err := s.Order(ctx, b.Order.ID)
		must(t, err)
		want := b.Order
		want.Status = inventory.OrderCancelled
		check(t, "order after the cancel alone", got, want)

		must(t, s.Apply(ctx, "c", []inventory.Event{b, other}))
		got, err = s.Order(ctx, b.Order.ID)
		must(t, err)
		check(t, "order after its late buy", got, want)
		totals, err := s.Totals(ctx, "c")
		must(t, err)
		check(t, "Totals", totals, []ItemTotals{{"A", 10, 1}})
		counts, err := s.CountOrders(ctx, "c")
		must(t, err)
		check(t, "CountOrders", counts, map[inventory.OrderStatus]int{inventory.OrderConfirmed: 1, inventory.OrderCancelled: 1})
	})
}

func TestCreatedEvent(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()

		// A sale created through the service keeps its row: settings and
		// creation time are the service's.
		svc := Sale{Sale: inventory.Sale{ID: "svc", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 4}}},
			Settings: `{"require_purchase_token":true}`, CreatedAt: msTime(time.Now())}
		must(t, s.CreateSale(ctx, svc))
		e := newEvents("svc")
		must(t, s.Apply(ctx, "svc", []inventory.Event{e.created(2, inventory.Item{SKU: "A", Stock: 4}), e.restocked("A", 3)}))
		got, err := s.Sale(ctx, "svc")
		must(t, err)
		svc.Items[0].Stock = 7
		check(t, "service sale", got, svc)

		// A sale created through the library appears from its event; a restock
		// applied before the created event (entries reclaimed out of order)
		// still counts, and one of an unlimited item changes nothing.
		e = newEvents("lib")
		created := e.created(0, inventory.Item{SKU: "A", Stock: 4}, inventory.Item{SKU: "U", Stock: -1})
		created.Sale.Paused = true
		must(t, s.Apply(ctx, "lib", []inventory.Event{e.restocked("A", 3), e.restocked("U", 3)}))
		if _, err := s.Sale(ctx, "lib"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("Sale before its created event = %v", err)
		}
		must(t, s.Apply(ctx, "lib", []inventory.Event{created, e.restocked("A", 1)}))
		got, err = s.Sale(ctx, "lib")
		must(t, err)
		check(t, "library sale", got, Sale{CreatedAt: created.At, Sale: inventory.Sale{ID: "lib", PerUserLimit: 1, Paused: true,
			Items: []inventory.Item{{SKU: "A", Stock: 8}, {SKU: "U", Stock: -1}}}})
	})
}

// TestPauseAndResumeApplyInStreamOrder: a consumer dies holding a pause;
// another applies the resume that followed it; the pause, reclaimed later,
// must not pause the sale again (nor a late resume revive a paused one):
// a rebuild from the database would bring the sale back in the wrong state.
func TestPauseAndResumeApplyInStreamOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		paused := func(sale string) bool {
			t.Helper()
			snap, err := s.Snapshot(ctx, sale)
			must(t, err)
			return snap.Sale.Paused
		}

		e := newEvents("pr")
		created := e.created(1, inventory.Item{SKU: "A", Stock: 4})
		pause, resume := e.paused(), e.resumed()
		must(t, s.Apply(ctx, "pr", []inventory.Event{created, resume}))
		must(t, s.Apply(ctx, "pr", []inventory.Event{pause})) // reclaimed
		check(t, "paused after a late pause", paused("pr"), false)

		e = newEvents("rp")
		created = e.created(1, inventory.Item{SKU: "A", Stock: 4})
		pause1, resume2, pause3 := e.paused(), e.resumed(), e.paused()
		must(t, s.Apply(ctx, "rp", []inventory.Event{created, pause1, pause3}))
		must(t, s.Apply(ctx, "rp", []inventory.Event{resume2})) // reclaimed
		check(t, "paused after a late resume", paused("rp"), true)

		// A sale created paused through the library: a pause and resume of
		// it applied before its created event (out of order) still leave the
		// newest, the resume.
		e = newEvents("lib")
		created = e.created(1, inventory.Item{SKU: "A", Stock: 4})
		created.Sale.Paused = true
		pause, resume = e.paused(), e.resumed()
		must(t, s.Apply(ctx, "lib", []inventory.Event{resume, pause}))
		must(t, s.Apply(ctx, "lib", []inventory.Event{created}))
		check(t, "library sale paused after its events", paused("lib"), false)
	})
}

// TestStreamIDAfter: stream ids order as numbers, not as text.
func TestStreamIDAfter(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"1-0", "", true},
		{"1700000000000-10", "1700000000000-9", true},
		{"1700000000000-9", "1700000000000-10", false},
		{"10000000000000-0", "9999999999999-5", true},
		{"1700000000001-0", "1700000000000-99", true},
		{"1700000000000-3", "1700000000000-3", false},
		{"99999999999999999999-0", "18446744073709551615-0", true},
	} {
		if got := streamIDAfter(c.a, c.b); got != c.want {
			t.Errorf("streamIDAfter(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestApplyRefusesEventsThatCanNeverBeWritten(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("p")
		good := e.bought("u1", line("A", 1))
		bad := map[string]func(ev *inventory.Event){
			"no stream id":       func(ev *inventory.Event) { ev.ID = "" },
			"stream id":          func(ev *inventory.Event) { ev.ID = "12-x" },
			"other sale":         func(ev *inventory.Event) { ev.SaleID = "q" },
			"unknown type":       func(ev *inventory.Event) { ev.Type = "exploded" },
			"no lines":           func(ev *inventory.Event) { ev.Order.Items = nil },
			"zero qty":           func(ev *inventory.Event) { ev.Order.Items = []inventory.Line{line("A", 0)} },
			"huge qty":           func(ev *inventory.Event) { ev.Order.Items = []inventory.Line{line("A", inventory.MaxQty+1)} },
			"sku twice":          func(ev *inventory.Event) { ev.Order.Items = []inventory.Line{line("A", 1), line("A", 2)} },
			"bad sku":            func(ev *inventory.Event) { ev.Order.Items = []inventory.Line{line("A\x00", 1)} },
			"bad user":           func(ev *inventory.Event) { ev.Order.UserID = "" },
			"bad key":            func(ev *inventory.Event) { ev.Order.IdempotencyKey = "a b" },
			"order of elsewhere": func(ev *inventory.Event) { ev.Order.ID = "q.01J00000000000000000000001" },
			"order id":           func(ev *inventory.Event) { ev.Order.ID = "p.1" },
			"restock qty": func(ev *inventory.Event) {
				*ev = e.restocked("A", 0)
			},
			"restock sku": func(ev *inventory.Event) {
				*ev = e.restocked("", 1)
			},
			"created without items": func(ev *inventory.Event) {
				*ev = e.created(1)
			},
			"created of another sale": func(ev *inventory.Event) {
				*ev = e.created(1, inventory.Item{SKU: "A", Stock: 1})
				ev.Sale.ID = "q"
			},
		}
		for name, spoil := range bad {
			ev := e.bought("u2", line("A", 1))
			spoil(&ev)
			err := s.Apply(ctx, "p", []inventory.Event{good, ev})
			var perm *PermanentError
			if !errors.Is(err, ErrPermanent) || !errors.As(err, &perm) || perm.EventID != ev.ID {
				t.Errorf("%s: Apply = %v, want a *PermanentError naming event %q", name, err, ev.ID)
			}
		}
		// Nothing of a refused batch was written, not even its good event.
		j, err := s.Journal(ctx, "p")
		must(t, err)
		check(t, "journal rows", len(j), 0)
		// The consumer dead-letters the bad event and applies the rest.
		must(t, s.Apply(ctx, "p", []inventory.Event{good}))
		if _, err := s.Order(ctx, good.Order.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, "not a sale", []inventory.Event{good}); !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("Apply to an invalid sale id = %v, want ErrInvalid", err)
		}
		must(t, s.Apply(ctx, "p", nil))
	})
}

func TestApplyBuyOfUnknownSaleAndSku(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		e := newEvents("ghost")
		b := e.bought("u1", line("nosuch", 2))
		must(t, s.Apply(ctx, "ghost", []inventory.Event{b}))
		counts, err := s.CountOrders(ctx, "ghost")
		must(t, err)
		check(t, "CountOrders", counts[inventory.OrderConfirmed], 1)
		if _, err := s.Snapshot(ctx, "ghost"); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("Snapshot of a sale without its row = %v, want ErrNotFound", err)
		}
	})
}

// boughtEvents returns n one-line bought events of sale, item "A".
func boughtEvents(sale string, n int) []inventory.Event {
	e := newEvents(sale)
	evs := make([]inventory.Event, n)
	for i := range evs {
		evs[i] = e.bought(fmt.Sprintf("user%d", i), line("A", 1))
	}
	return evs
}

func TestApplyBatchPastTheParameterLimit(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		// One batch of more buys than one statement takes journal rows of
		// (8 values a row: 8,191 on PostgreSQL, 4,095 on SQLite).
		n := s.maxParams/8 + 1000
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "big", Items: []inventory.Item{{SKU: "A", Stock: -1}}}}))
		evs := boughtEvents("big", n)
		evs[n/2].Order.Items = append(evs[n/2].Order.Items, line("B", 2))
		must(t, s.Apply(ctx, "big", evs))
		must(t, s.Apply(ctx, "big", evs))
		st := stateOf(t, s, "big")
		check(t, "journal rows", st.Journal, n+1)
		check(t, "orders", st.Counts[inventory.OrderConfirmed], n)
		check(t, "Totals", st.Totals, []ItemTotals{{"A", -1, int64(n)}})
		check(t, "order with two lines", st.Orders[n/2].Items, []inventory.Line{line("A", 1), line("B", 2)})

		// A created event of many items goes through the same chunking.
		var items []inventory.Item
		for i := range s.maxParams/8 + 500 {
			items = append(items, inventory.Item{SKU: fmt.Sprintf("sku%05d", i), Stock: int64(i)})
		}
		many := newEvents("many")
		must(t, s.Apply(ctx, "many", []inventory.Event{many.created(1, items...)}))
		sale, err := s.Sale(ctx, "many")
		must(t, err)
		check(t, "items", sale.Items, items)
	})
}

func TestApply20000BuysPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, dbtest.PostgresURL(t))
	must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "hot", Items: []inventory.Item{{SKU: "A", Stock: 20_000}}}}))
	evs := boughtEvents("hot", 20_000)
	start := time.Now()
	for i := 0; i < len(evs); i += 500 {
		must(t, s.Apply(ctx, "hot", evs[i:min(i+500, len(evs))]))
	}
	t.Logf("20,000 buys in batches of 500: %v", time.Since(start))
	st := stateOf(t, s, "hot")
	check(t, "orders", st.Counts[inventory.OrderConfirmed], 20_000)
	check(t, "journal rows", st.Journal, 20_000)
	check(t, "Totals", st.Totals, []ItemTotals{{"A", 20_000, 20_000}})
	check(t, "snapshot orders", len(st.Orders), 20_000)
}
