package inventory_test

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

func lines(pairs ...any) []inventory.Line {
	var out []inventory.Line
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, inventory.Line{SKU: pairs[i].(string), Qty: int64(pairs[i+1].(int))})
	}
	return out
}

// TestBuyOutcomes covers every reply of buy.lua: each case starts from a
// fresh sale (A: 5 units, B: 1 unit, U: unlimited; limit 3), runs some
// setup buys, then one buy, and checks the outcome and that a rejected buy
// changed nothing at all.
func TestBuyOutcomes(t *testing.T) {
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	type buy struct {
		user  string
		lines []inventory.Line
		key   string
	}
	cases := []struct {
		name    string
		now     time.Time // clock at the final buy; zero: start + 1 min
		paused  bool
		setup   []buy
		buy     buy
		wantErr error    // nil: success
		skus    []string // short / over-limit / unknown skus named by the error
		status  inventory.Status
		replay  bool
		wantRem []int64
	}{
		{name: "one item", buy: buy{"u1", lines("A", 2), ""}, wantRem: []int64{3}},
		{name: "several items", buy: buy{"u1", lines("A", 1, "B", 1, "U", 3), ""}, wantRem: []int64{4, 0, -1}},
		{name: "exactly the last units", buy: buy{"u1", lines("B", 1), ""}, wantRem: []int64{0}},
		{name: "unlimited", buy: buy{"u1", lines("U", 3), ""}, wantRem: []int64{-1}},
		{name: "sold out names every short sku",
			setup: []buy{{"u2", lines("A", 3), ""}},
			buy:   buy{"u1", lines("A", 3, "B", 2, "U", 1), ""}, wantErr: inventory.ErrSoldOut, skus: []string{"A", "B"}},
		{name: "limit names every sku over it",
			setup: []buy{{"u1", lines("A", 2, "U", 3), ""}},
			buy:   buy{"u1", lines("A", 2, "B", 1, "U", 1), ""}, wantErr: inventory.ErrLimitExceeded, skus: []string{"A", "U"}},
		{name: "limit applies to unlimited items",
			buy: buy{"u1", lines("U", 4), ""}, wantErr: inventory.ErrLimitExceeded, skus: []string{"U"}},
		{name: "limit before stock", setup: []buy{{"u1", lines("B", 1), ""}},
			buy: buy{"u1", lines("B", 3), ""}, wantErr: inventory.ErrLimitExceeded, skus: []string{"B"}},
		{name: "limit is per user", setup: []buy{{"u2", lines("A", 3), ""}},
			buy: buy{"u1", lines("A", 2), ""}, wantRem: []int64{0}},
		{name: "unknown skus", buy: buy{"u1", lines("A", 1, "X", 1, "Y", 1), ""},
			wantErr: inventory.ErrNotFound, skus: []string{"X", "Y"}},
		{name: "before start", now: start.Add(-time.Millisecond), buy: buy{"u1", lines("A", 1), ""},
			wantErr: inventory.ErrSaleNotActive, status: inventory.StatusUpcoming},
		{name: "at start", now: start, buy: buy{"u1", lines("A", 1), ""}, wantRem: []int64{4}},
		{name: "at end", now: start.Add(time.Hour), buy: buy{"u1", lines("A", 1), ""},
			wantErr: inventory.ErrSaleNotActive, status: inventory.StatusEnded},
		{name: "paused", paused: true, buy: buy{"u1", lines("A", 1), ""},
			wantErr: inventory.ErrSaleNotActive, status: inventory.StatusPaused},
		{name: "idempotent repeat", setup: []buy{{"u1", lines("A", 2), "k1"}},
			buy: buy{"u1", lines("A", 2), "k1"}, replay: true, wantRem: []int64{3}},
		{name: "same key, other user", setup: []buy{{"u2", lines("A", 2), "k1"}},
			buy: buy{"u1", lines("A", 2), "k1"}, wantRem: []int64{1}},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				// The script's own order of checks: no sold-out flag answers first.
				r := newRig(t, b, inventory.Options{SoldOut: inventory.SoldOut{Off: true}})
				r.clock.Set(start.Add(time.Minute))
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 3, StartsAt: start, EndsAt: start.Add(time.Hour),
					Paused: tc.paused, Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "B", Stock: 1}, {SKU: "U", Stock: -1}}})
				var first inventory.Receipt
				for i, s := range tc.setup {
					rc, err := r.eng.Buy(r.ctx, "s1", s.user, s.lines, s.key)
					if err != nil {
						t.Fatalf("setup buy %d: %v", i, err)
					}
					first = rc
				}
				if !tc.now.IsZero() {
					r.clock.Set(tc.now)
				}
				beforeRem, beforeHeld, beforeEvents := r.remaining("s1"), r.held("s1"), len(r.events("s1"))

				rc, err := r.eng.Buy(r.ctx, "s1", tc.buy.user, tc.buy.lines, tc.buy.key)

				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("Buy err = %v, want %v", err, tc.wantErr)
					}
					checkNamed(t, err, tc.skus, tc.status)
					if got := r.remaining("s1"); !reflect.DeepEqual(got, beforeRem) {
						t.Errorf("rejected buy changed stock: %v -> %v", beforeRem, got)
					}
					if got := r.held("s1"); !reflect.DeepEqual(got, beforeHeld) {
						t.Errorf("rejected buy changed quotas: %v -> %v", beforeHeld, got)
					}
					if got := len(r.events("s1")); got != beforeEvents {
						t.Errorf("rejected buy appended %d events", got-beforeEvents)
					}
					return
				}
				if err != nil {
					t.Fatalf("Buy: %v", err)
				}
				if !slices.Equal(rc.Remaining, tc.wantRem) {
					t.Errorf("Remaining = %v, want %v", rc.Remaining, tc.wantRem)
				}
				if rc.Replayed != tc.replay {
					t.Errorf("Replayed = %v, want %v", rc.Replayed, tc.replay)
				}
				if tc.replay {
					if rc.Order.ID != first.Order.ID || !reflect.DeepEqual(rc.Order.Items, first.Order.Items) {
						t.Errorf("replay returned order %+v, want %+v", rc.Order, first.Order)
					}
					if got := len(r.events("s1")); got != beforeEvents {
						t.Errorf("replay appended %d events", got-beforeEvents)
					}
					return
				}
				evs := r.events("s1")
				last := evs[len(evs)-1]
				if last.Type != inventory.EventBought || last.Order.ID != rc.Order.ID || last.Order.UserID != tc.buy.user ||
					!reflect.DeepEqual(last.Order.Items, tc.buy.lines) || last.Order.IdempotencyKey != tc.buy.key {
					t.Errorf("last event = %+v, want the order %+v", last, rc.Order)
				}
				if sale, err := inventory.SaleOfOrder(rc.Order.ID); err != nil || sale != "s1" {
					t.Errorf("SaleOfOrder(%s) = %q, %v", rc.Order.ID, sale, err)
				}
				got, err := r.eng.Order(r.ctx, rc.Order.ID)
				if err != nil || got.Status != inventory.OrderPending || got.UserID != tc.buy.user ||
					!got.CreatedAt.Equal(r.clock.Now().Truncate(time.Millisecond)) {
					t.Errorf("Order(%s) = %+v, %v", rc.Order.ID, got, err)
				}
			})
		}
	})
}

// checkNamed checks the details a typed error carries.
func checkNamed(t *testing.T, err error, skus []string, status inventory.Status) {
	t.Helper()
	var (
		soldOut  *inventory.SoldOutError
		limit    *inventory.LimitError
		notFound *inventory.NotFoundError
		inactive *inventory.NotActiveError
		got      []string
	)
	switch {
	case errors.As(err, &soldOut):
		got = soldOut.SKUs
	case errors.As(err, &limit):
		got = limit.SKUs
	case errors.As(err, &notFound):
		got = notFound.IDs
	case errors.As(err, &inactive):
		if inactive.Status != status {
			t.Errorf("status = %s, want %s", inactive.Status, status)
		}
		return
	default:
		t.Fatalf("error %T carries no details", err)
	}
	if !slices.Equal(got, skus) {
		t.Errorf("error names %v, want %v", got, skus)
	}
}

func TestBuyInvalidInputWritesNothing(t *testing.T) {
	long := string(make([]byte, 65))
	cases := []struct {
		name       string
		sale, user string
		lines      []inventory.Line
		key        string
	}{
		{"no lines", "s1", "u1", nil, ""},
		{"zero qty", "s1", "u1", lines("A", 0), ""},
		{"negative qty", "s1", "u1", lines("A", -1), ""},
		{"qty over a billion", "s1", "u1", lines("A", 1_000_000_001), ""},
		{"duplicate sku", "s1", "u1", lines("A", 1, "A", 1), ""},
		{"bad sku", "s1", "u1", lines("A|B", 1), ""},
		{"bad sale", "s 1", "u1", lines("A", 1), ""},
		{"bad user", "s1", "", lines("A", 1), ""},
		{"user with separator", "s1", "u|1", lines("A", 1), ""},
		{"long key", "s1", "u1", lines("A", 1), long},
		{"key with space", "s1", "u1", lines("A", 1), "a b"},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", Items: []inventory.Item{{SKU: "A", Stock: 5}}})
		for _, tc := range cases {
			_, err := r.eng.Buy(r.ctx, tc.sale, tc.user, tc.lines, tc.key)
			var inv *inventory.InvalidError
			if !errors.Is(err, inventory.ErrInvalid) || !errors.As(err, &inv) || inv.Field == "" {
				t.Errorf("%s: err = %v, want an InvalidError", tc.name, err)
			}
		}
		if got := r.remaining("s1"); got["A"] != 5 {
			t.Errorf("remaining = %v after invalid buys", got)
		}
		if n := len(r.events("s1")); n != 1 { // "created" only
			t.Errorf("%d events after invalid buys, want 1", n)
		}
	})
}

func TestCreateSaleNeverResets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		s := inventory.Sale{ID: "s1", Items: []inventory.Item{{SKU: "A", Stock: 5}}}
		r.create(s)
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		s.Items[0].Stock = 100
		if err := r.eng.CreateSale(r.ctx, s); !errors.Is(err, inventory.ErrExists) {
			t.Fatalf("second CreateSale err = %v, want ErrExists", err)
		}
		if got := r.remaining("s1")["A"]; got != 4 {
			t.Errorf("remaining = %d after a second create, want 4", got)
		}
		for _, bad := range []inventory.Sale{
			{ID: "s2"},
			{ID: "s2", Items: []inventory.Item{{SKU: "A", Stock: -2}}},
			{ID: "s2", Items: []inventory.Item{{SKU: "A", Stock: 1_000_000_001}}},
			{ID: "s2", Items: []inventory.Item{{SKU: "A", Stock: 1}, {SKU: "A", Stock: 1}}},
			{ID: "s2", PerUserLimit: -1, Items: []inventory.Item{{SKU: "A", Stock: 1}}},
			{ID: "s2", StartsAt: time.Unix(10, 0), EndsAt: time.Unix(5, 0), Items: []inventory.Item{{SKU: "A", Stock: 1}}},
			{ID: "bad/id", Items: []inventory.Item{{SKU: "A", Stock: 1}}},
		} {
			if err := r.eng.CreateSale(r.ctx, bad); !errors.Is(err, inventory.ErrInvalid) {
				t.Errorf("CreateSale(%+v) err = %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := r.eng.Stock(r.ctx, "s2"); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("an invalid sale was created: Stock err = %v", err)
		}
	})
}

func TestCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 2,
			Items: []inventory.Item{{SKU: "A", Stock: 3}, {SKU: "U", Stock: -1}}})
		rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 2), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, "u2"); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("cancel by another user: err = %v, want ErrNotFound", err)
		}
		got, err := r.eng.Cancel(r.ctx, rc.Order.ID, "u1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Replayed || got.Order.Status != inventory.OrderCancelled || !slices.Equal(got.Remaining, []int64{3, -1}) {
			t.Errorf("Cancel = %+v", got)
		}
		st, _ := r.eng.Stock(r.ctx, "s1")
		if st.Items[0].Sold != 0 || st.Items[1].Sold != 0 {
			t.Errorf("sold after cancel = %+v", st.Items)
		}
		if h := r.held("s1"); len(h) != 0 {
			t.Errorf("quota not returned: %v", h)
		}
		again, err := r.eng.Cancel(r.ctx, rc.Order.ID, "") // an operator
		if err != nil || !again.Replayed || again.Order.Status != inventory.OrderCancelled {
			t.Errorf("second cancel = %+v, %v", again, err)
		}
		if rem := r.remaining("s1"); rem["A"] != 3 {
			t.Errorf("second cancel changed stock: %v", rem)
		}
		var cancels int
		for _, ev := range r.events("s1") {
			if ev.Type == inventory.EventCancelled {
				cancels++
				if ev.Order.ID != rc.Order.ID || !reflect.DeepEqual(ev.Order.Items, rc.Order.Items) || !ev.Order.CreatedAt.Equal(rc.Order.CreatedAt) {
					t.Errorf("cancel event = %+v", ev)
				}
			}
		}
		if cancels != 1 {
			t.Errorf("%d cancel events, want 1", cancels)
		}
		// The quota is back: the user can buy the full limit again.
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 2), ""); err != nil {
			t.Errorf("buy after cancel: %v", err)
		}
		if o, err := r.eng.Order(r.ctx, rc.Order.ID); err != nil || o.Status != inventory.OrderCancelled {
			t.Errorf("Order after cancel = %+v, %v", o, err)
		}
		for _, id := range []string{"s1.01JD0000000000000000000000", "nope", "s1.x"} {
			if _, err := r.eng.Cancel(r.ctx, id, ""); err == nil {
				t.Errorf("Cancel(%q) succeeded", id)
			}
		}
	})
}

func TestRestock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5,
			Items: []inventory.Item{{SKU: "A", Stock: 1}, {SKU: "U", Stock: -1}}})
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 1), ""); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("err = %v, want sold out", err)
		}
		n, err := r.eng.Restock(r.ctx, "s1", "A", 10)
		if err != nil || n != 10 {
			t.Fatalf("Restock = %d, %v", n, err)
		}
		if _, err := r.eng.Buy(r.ctx, "s1", "u2", lines("A", 2), ""); err != nil {
			t.Fatalf("buy after restock: %v", err)
		}
		st, _ := r.eng.Stock(r.ctx, "s1")
		if a := st.Items[0]; a.Stocked != 11 || a.Remaining != 8 || a.Sold != 3 {
			t.Errorf("A = %+v, want stocked 11, remaining 8, sold 3", a)
		}
		evs := r.events("s1")
		var restock *inventory.Event
		for i := range evs {
			if evs[i].Type == inventory.EventRestocked {
				restock = &evs[i]
			}
		}
		if restock == nil || restock.SKU != "A" || restock.Qty != 10 || restock.Remaining != 10 {
			t.Errorf("restock event = %+v", restock)
		}
		for _, bad := range []struct {
			sku  string
			qty  int64
			want error
		}{
			{"U", 1, inventory.ErrInvalid}, {"A", 0, inventory.ErrInvalid}, {"A", -3, inventory.ErrInvalid},
			{"A", 1_000_000_001, inventory.ErrInvalid}, {"X", 1, inventory.ErrNotFound},
		} {
			if _, err := r.eng.Restock(r.ctx, "s1", bad.sku, bad.qty); !errors.Is(err, bad.want) {
				t.Errorf("Restock(%s, %d) err = %v, want %v", bad.sku, bad.qty, err, bad.want)
			}
		}
		if _, err := r.eng.Restock(r.ctx, "nosale", "A", 1); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("Restock of an unknown sale: err = %v", err)
		}
		if got := r.remaining("s1")["A"]; got != 8 {
			t.Errorf("rejected restocks changed stock: %d", got)
		}
	})
}

func TestPauseResumeAndStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		start := r.clock.Now().Add(time.Minute)
		r.create(inventory.Sale{ID: "s1", StartsAt: start, EndsAt: start.Add(time.Minute),
			Items: []inventory.Item{{SKU: "A", Stock: 5}}})
		status := func() inventory.Status {
			st, err := r.eng.Stock(r.ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			return st.Status
		}
		if s := status(); s != inventory.StatusUpcoming {
			t.Errorf("status %s, want upcoming", s)
		}
		r.clock.Set(start)
		if s := status(); s != inventory.StatusActive {
			t.Errorf("status %s, want active", s)
		}
		if err := r.eng.Pause(r.ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if s := status(); s != inventory.StatusPaused {
			t.Errorf("status %s, want paused", s)
		}
		if err := r.eng.Pause(r.ctx, "s1"); err != nil { // no-op, not journaled
			t.Fatal(err)
		}
		if err := r.eng.Resume(r.ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), ""); err != nil {
			t.Errorf("buy after resume: %v", err)
		}
		r.clock.Set(start.Add(time.Minute))
		if s := status(); s != inventory.StatusEnded {
			t.Errorf("status %s, want ended", s)
		}
		var types []inventory.EventType
		for _, ev := range r.events("s1") {
			types = append(types, ev.Type)
		}
		want := []inventory.EventType{inventory.EventCreated, inventory.EventPaused, inventory.EventResumed, inventory.EventBought}
		if !slices.Equal(types, want) {
			t.Errorf("events %v, want %v", types, want)
		}
		if err := r.eng.Pause(r.ctx, "nosale"); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("Pause of an unknown sale: %v", err)
		}
	})
}

func TestCreatedEventCarriesTheDefinition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		s := inventory.Sale{ID: "s1", PerUserLimit: 2, StartsAt: time.UnixMilli(1_800_000_000_000).UTC(),
			Items: []inventory.Item{{SKU: "B", Stock: 7}, {SKU: "A", Stock: -1}}}
		r.create(s)
		evs := r.events("s1")
		if len(evs) != 1 || evs[0].Type != inventory.EventCreated || !reflect.DeepEqual(evs[0].Sale, s) {
			t.Fatalf("events = %+v, want one created event with %+v", evs, s)
		}
		st, err := r.eng.Stock(r.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(st.Sale, s) { // item order is kept
			t.Errorf("Stock().Sale = %+v, want %+v", st.Sale, s)
		}
	})
}

func TestRestockBoundAndCorruptCancel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 5}}})
		rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2), "")
		if err != nil {
			t.Fatal(err)
		}
		// Near the bound that keeps Lua's numbers exact, a restock is refused.
		if err := r.rdb.HSet(r.ctx, r.key("s1", "sale"), "t:A", "999999999999999").Err(); err != nil {
			t.Fatal(err)
		}
		var inv *inventory.InvalidError
		if _, err := r.eng.Restock(r.ctx, "s1", "A", 2); !errors.As(err, &inv) || inv.Field != "qty" {
			t.Errorf("Restock past the bound: err = %v, want an InvalidError on qty", err)
		}
		// A cancel that meets a spoiled counter fails and changes nothing.
		if err := r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u1|A", "two").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Cancel(r.ctx, rc.Order.ID, ""); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("Cancel err = %v, want ErrCorrupt", err)
		}
		if o, _ := r.eng.Order(r.ctx, rc.Order.ID); o.Status != inventory.OrderPending {
			t.Errorf("order is %s after a failed cancel", o.Status)
		}
		if got := r.remaining("s1")["A"]; got != 3 {
			t.Errorf("remaining %d after failed calls, want 3", got)
		}
	})
}

// TestPreloadReachesEveryNode: after Preload, buys on sales spread over
// every node of a cluster never meet NOSCRIPT.
func TestPreloadReachesEveryNode(t *testing.T) {
	b := backends[2]
	r := newRig(t, b, inventory.Options{})
	if err := b.flushScripts(r.ctx, r.rdb); err != nil {
		t.Fatal(err)
	}
	if err := r.eng.Preload(r.ctx); err != nil {
		t.Fatal(err)
	}
	masters := map[string]bool{}
	for i := range 12 {
		sale := "s" + strconv.Itoa(i)
		node, err := r.rdb.(*redis.ClusterClient).MasterForKey(r.ctx, r.key(sale, "sale"))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
		r.create(inventory.Sale{ID: sale, Items: []inventory.Item{{SKU: "A", Stock: 1}}})
		if _, err := r.eng.Buy(r.ctx, sale, "u1", lines("A", 1), ""); err != nil {
			t.Fatal(err)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("the sales landed on %d masters, want 3", len(masters))
	}
	if n := r.eng.ScriptReloads(); n != 0 {
		t.Errorf("%d NOSCRIPT reloads after Preload, want 0", n)
	}
}
