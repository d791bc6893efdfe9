package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// advLinesRig is a rig on Redis and PostgreSQL only (entries by tail need
// XSETID), whose engine coalesces up to 2,000 buys a call.
func advLinesRig(t *testing.T) *rig {
	t.Helper()
	rdb := redistest.Standalone(t)
	db, err := store.Open(context.Background(), dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &rig{t: t, ctx: context.Background(), rdb: rdb, db: db,
		eng: inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(t, rdb), Coalesce: inventory.Coalesce{MaxBatch: 2000}})}
}

// advCreate creates sale in both places: sku A of stock, sku B of stock.
func (r *rig) advCreate(eng *inventory.Engine, sale string, stock, limit int64) {
	r.t.Helper()
	s := store.Sale{Sale: inventory.Sale{ID: sale, PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: stock}, {SKU: "B", Stock: stock}}}}
	if err := r.db.CreateSale(r.ctx, s); err != nil {
		r.t.Fatal(err)
	}
	if err := eng.CreateSale(r.ctx, s.Sale); err != nil {
		r.t.Fatal(err)
	}
}

// advBuyMany buys one order per user in one BuyMany (one call when n is
// at most the engine's MaxBatch), each of lines; users are <tag><i>.
func (r *rig) advBuyMany(eng *inventory.Engine, sale, tag string, n int, lines []inventory.Line, edit func(i int, q *inventory.BuyRequest)) []inventory.Order {
	r.t.Helper()
	reqs := make([]inventory.BuyRequest, n)
	for i := range reqs {
		reqs[i] = inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("%s%d", tag, i), Lines: lines}
		if edit != nil {
			edit(i, &reqs[i])
		}
	}
	var out []inventory.Order
	for i, res := range eng.BuyMany(r.ctx, reqs) {
		if res.Err != nil {
			r.t.Fatalf("buy %d of %s: %v", i, sale, res.Err)
		}
		out = append(out, res.Receipt.Order)
	}
	return out
}

// advSettled waits until the sale's stream has nothing in flight and the
// database holds n orders, then checks that each of want is stored once,
// as Redis made it, and that every bought journal row is one order's once.
func (r *rig) advSettled(sale string, n int, want []inventory.Order) {
	r.t.Helper()
	waitfor.Until(r.t, waitfor.Patience, "the orders stored", func() error {
		inflight, err2 := pipeline.InFlight(r.ctx, r.rdb, r.eng, sale)
		counts, err := r.db.CountOrders(r.ctx, sale)
		if err != nil || err2 != nil || counts[inventory.OrderConfirmed] != n || len(inflight) != 0 {
			return fmt.Errorf("%v stored (want %d), %d events in flight, %v %v", counts, n, len(inflight), err, err2)
		}
		return nil
	})
	for _, o := range want {
		got, err := r.db.Order(r.ctx, o.ID)
		if err != nil || got.UserID != o.UserID || !slices.Equal(got.Items, o.Items) || got.IdempotencyKey != o.IdempotencyKey {
			r.t.Errorf("order %s: stored %+v (%v), want %+v", o.ID, got, err, o)
		}
	}
	journal, err := r.db.Journal(r.ctx, sale)
	if err != nil {
		r.t.Fatal(err)
	}
	bought := map[string]map[string]bool{} // order -> its event ids
	for _, j := range journal {
		if j.Type == inventory.EventBought {
			if bought[j.OrderID] == nil {
				bought[j.OrderID] = map[string]bool{}
			}
			bought[j.OrderID][j.EventID] = true
		}
	}
	for id, evs := range bought {
		if len(evs) != 1 {
			r.t.Errorf("order %s journaled under %d events: %v", id, len(evs), evs)
		}
	}
	if len(bought) != n {
		r.t.Errorf("%d orders journaled, want %d", len(bought), n)
	}
}

// advLetters returns the sale's dead letters by event id: their "bought".
func (r *rig) advLetters(sale string) map[string]string {
	r.t.Helper()
	letters, err := r.db.DeadLetters(r.ctx, sale)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range letters {
		var fields map[string]string
		if err := json.Unmarshal([]byte(l.Payload), &fields); err != nil {
			r.t.Fatal(err)
		}
		if _, tok := fields["tokens"]; len(fields) != 1 && (len(fields) != 2 || !tok) {
			r.t.Errorf("dead letter %s: fields %v, want bought (and tokens)", l.EventID, fields)
		}
		out[l.EventID] = fields["bought"]
	}
	return out
}

// advXAdd appends an entry of several orders as buy.lua does (XADD, then
// XSETID past its orders) and returns its id.
func (r *rig) advXAdd(sale string, n int, values ...any) string {
	r.t.Helper()
	key := r.eng.EventsKey(sale)
	id, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: key, Values: values}).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	ms, seq := inventory.SplitEventID(id)
	if err := r.rdb.Do(r.ctx, "XSETID", key, fmt.Sprintf("%d-%d", ms, seq+uint64(n-1))).Err(); err != nil {
		r.t.Fatal(err)
	}
	return id
}

func advEventID(entry string, k int) string {
	ms, seq := inventory.SplitEventID(entry)
	return fmt.Sprintf("%d-%d", ms, seq+uint64(k))
}

// TestAdvLinesMixedStream: a stream of every form of bought entry, on a
// sale whose id has '.', '-' and ':': the engine's entries by tail (some
// with tokens, orders of two lines), its entries of field "orders" (a
// call of orders of several groups: ids the callers chose), its entry of
// a lone order (by tail, one line), and hand-written entries by tail holding a line that
// does not decode. The consumer stores every good order once, with its
// token, and dead-letters the bad lines under their own ids, by whole
// order id; a dead letter mended and replayed (twice) is stored once.
func TestAdvLinesMixedStream(t *testing.T) {
	r := advLinesRig(t)
	const sale = "mx.a-b:c"
	r.advCreate(r.eng, sale, 100_000, 5)
	ab := []inventory.Line{{SKU: "A", Qty: 2}, {SKU: "B", Qty: 1}}
	var orders []inventory.Order
	orders = append(orders, r.advBuyMany(r.eng, sale, "t", 40, ab, nil)...)
	orders = append(orders, r.advBuyMany(r.eng, sale, "tok", 9, []inventory.Line{{SKU: "A", Qty: 1}}, func(i int, q *inventory.BuyRequest) {
		if i%3 == 1 {
			q.Token, q.TokenTTL = fmt.Sprintf("tk%d", i), time.Hour
		}
		if i%4 == 0 {
			q.IdempotencyKey = fmt.Sprintf("key:%d", i)
		}
	})...)
	orders = append(orders, r.advBuyMany(r.eng, sale, "own", 6, []inventory.Line{{SKU: "B", Qty: 1}}, func(i int, q *inventory.BuyRequest) {
		q.OrderID = inventory.NewOrderID(sale) // each its own group
	})...)
	orders = append(orders, r.advBuyMany(r.eng, sale, "one", 1, ab, nil)...)
	// The forms in the stream.
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(sale), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var forms []string
	for _, m := range msgs {
		f := "other"
		switch {
		case m.Values["lines"] != nil && m.Values["tokens"] != nil:
			f = "lines+tokens"
		case m.Values["lines"] != nil:
			f = "lines"
		case m.Values["orders"] != nil:
			f = "orders"
		case m.Values["bought"] != nil:
			f = "bought"
		}
		forms = append(forms, f)
	}
	// (a lone order is an entry by tail of one line)
	if want := "[other lines lines+tokens orders lines]"; fmt.Sprint(forms) != want {
		t.Fatalf("stream forms %v, want %s", forms, want)
	}
	// Hand-written: an entry by tail of 4 orders, the third's record
	// corrupt, with a token for the second and for the third.
	g := inventory.OrderGroup(inventory.NewOrderID(sale))
	now := time.Now().UnixMilli()
	rec := func(tail, user string) string { return fmt.Sprintf("%s|p|%s|%d|A=1|", tail, user, now) }
	hand := []string{rec("0000", "h0"), rec("0001", "h1"), "0002|p|h2|soon|A=1|", rec("0003", "h3")}
	until := now + 3_600_000
	entry := r.advXAdd(sale, 4, "group", g, "lines", strings.Join(hand, "\n"),
		"tokens", fmt.Sprintf("%s0001|htk1|%d\n%s0002|htk2|%d", g, until, g, until))
	// And an entry by tail without its group: both its orders dead letters.
	lost := r.advXAdd(sale, 2, "lines", rec("0000", "l0")+"\n"+rec("0001", "l1"))
	handOrders := []inventory.Order{
		{ID: g + "0000", UserID: "h0", Items: []inventory.Line{{SKU: "A", Qty: 1}}},
		{ID: g + "0001", UserID: "h1", Items: []inventory.Line{{SKU: "A", Qty: 1}}},
		{ID: g + "0003", UserID: "h3", Items: []inventory.Line{{SKU: "A", Qty: 1}}},
	}

	r.consumer("c1", r.db, pipeline.Options{BatchSize: 2}) // batches split the entries
	r.advSettled(sale, len(orders)+3, append(slices.Clone(orders), handOrders...))
	letters := r.advLetters(sale)
	want := map[string]string{
		advEventID(entry, 2): g + "0002|p|h2|soon|A=1|",
		advEventID(lost, 0):  rec("0000", "l0"),
		advEventID(lost, 1):  rec("0001", "l1"),
	}
	if fmt.Sprint(letters) != fmt.Sprint(want) {
		t.Fatalf("dead letters %v, want %v", letters, want)
	}
	// Tokens: the engine's and the hand-written entry's good one.
	snap, err := r.db.Snapshot(r.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	spent := map[string]string{}
	for _, s := range snap.SpentTokens {
		spent[s.Token] = s.OrderID
	}
	wantSpent := map[string]string{"htk1": g + "0001"}
	for i, o := range orders[40:49] {
		if i%3 == 1 {
			wantSpent[fmt.Sprintf("tk%d", i)] = o.ID
		}
	}
	if fmt.Sprint(spent) != fmt.Sprint(wantSpent) {
		t.Errorf("spent tokens %v, want %v", spent, wantSpent)
	}
	// The corrupt line's dead letter, mended and replayed twice: one order.
	mended := strings.Replace(letters[advEventID(entry, 2)], "soon", fmt.Sprint(now), 1)
	replay := func() { // its token with it (see TestAdvLinesDeadLetterKeepsToken)
		tl := fmt.Sprintf("%s0002|htk2|%d", g, until)
		if err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.eng.EventsKey(sale), Values: []any{"bought", mended, "tokens", tl}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	replay()
	handOrders = append(handOrders, inventory.Order{ID: g + "0002", UserID: "h2", Items: []inventory.Line{{SKU: "A", Qty: 1}}})
	r.advSettled(sale, len(orders)+4, handOrders)
	// Replayed again (a second event of the order, which the journal
	// keeps as such): still one order, as it was.
	before, _ := r.db.Order(r.ctx, g+"0002")
	replay()
	waitfor.Until(r.t, waitfor.Patience, "the second replay consumed", func() error {
		inflight, err := pipeline.InFlight(r.ctx, r.rdb, r.eng, sale)
		if err != nil || len(inflight) != 0 {
			return fmt.Errorf("%d in flight, %v", len(inflight), err)
		}
		return nil
	})
	if snap, err := r.db.Snapshot(r.ctx, sale); err != nil || !slices.ContainsFunc(snap.SpentTokens, func(s inventory.SpentToken) bool {
		return s.Token == "htk2" && s.OrderID == g+"0002"
	}) {
		t.Errorf("the replayed order's token htk2 is not spent in the database (%v)", err)
	}
	counts, err := r.db.CountOrders(r.ctx, sale)
	after, err2 := r.db.Order(r.ctx, g+"0002")
	if err != nil || err2 != nil || counts[inventory.OrderConfirmed] != len(orders)+4 || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after a second replay: %v orders, %+v (was %+v), %v %v", counts, after, before, err, err2)
	}
	if n := len(r.advLetters(sale)); n != 3 {
		t.Errorf("%d dead letters after the replay, want 3", n)
	}
}

// TestAdvLinesHugeEntryReclaimed: a call of 2,000 buys is one entry; the
// consumer that takes it (and the entries after it) dies after its commit
// and before its XACK, or before its commit; another reclaims them and
// stores each order once. Until then InFlight has every order, and
// reconcile's in_flight every unit; after, nothing, and the database
// holds the stream up to its last generated id.
func TestAdvLinesHugeEntryReclaimed(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("after commit=%v", commit), func(t *testing.T) {
			r := advLinesRig(t)
			const sale = "s1"
			r.advCreate(r.eng, sale, 100_000, 3)
			ab := []inventory.Line{{SKU: "A", Qty: 3}, {SKU: "B", Qty: 1}}
			orders := r.advBuyMany(r.eng, sale, "u", 2000, ab, nil)
			orders = append(orders, r.advBuyMany(r.eng, sale, "v", 3, ab, nil)...)
			if n, _ := r.rdb.XLen(r.ctx, r.eng.EventsKey(sale)).Result(); n != 3 {
				t.Fatalf("%d entries, want 3 (created, a call of 2,000, a call of 3)", n)
			}
			inflight, err := pipeline.InFlight(r.ctx, r.rdb, r.eng, sale)
			if err != nil || len(inflight) != 1+2003 {
				t.Fatalf("in flight: %d events (%v), want 2,004", len(inflight), err)
			}
			rep, err := reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, sale)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range rep.Items {
				per := map[string]int64{"A": 3, "B": 1}[it.SKU]
				if it.InFlight != 2003*per || it.Drift != 0 || it.OrdersInDB != 0 {
					t.Errorf("reconcile before: %+v, want in flight %d", it, 2003*per)
				}
			}
			d := &dying{Store: r.db, commit: commit, entered: make(chan struct{}), release: make(chan struct{})}
			r.consumer("doomed", d, pipeline.Options{BatchSize: 2})
			t.Cleanup(func() { close(d.release) })
			<-d.entered
			more := r.advBuyMany(r.eng, sale, "w", 5, ab, nil)
			orders = append(orders, more...)
			r.consumer("survivor", r.db, pipeline.Options{BatchSize: 1})
			r.advSettled(sale, len(orders), orders)
			rep, err = reconcile.Sale(r.ctx, r.eng, r.rdb, r.db, sale)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range rep.Items {
				per := map[string]int64{"A": 3, "B": 1}[it.SKU]
				if it.InFlight != 0 || it.Drift != 0 || it.OrdersInDB != int64(len(orders))*per || !rep.Consistent {
					t.Errorf("reconcile after: %+v", it)
				}
			}
			info, err := r.rdb.XInfoStream(r.ctx, r.eng.EventsKey(sale)).Result()
			applied, err2 := pipeline.Applied(r.ctx, r.rdb, r.eng, sale)
			newest, err3 := r.db.NewestEvent(r.ctx, sale)
			if err != nil || err2 != nil || err3 != nil || applied != info.LastGeneratedID || newest != info.LastGeneratedID {
				t.Fatalf("applied %s, database's newest %s, last generated %s (%v %v %v)", applied, newest, info.LastGeneratedID, err, err2, err3)
			}
		})
	}
}

// TestAdvLinesRebuildWhileInFlight: the sale's keys are lost while entries
// by tail of its orders are not yet stored. A buy must not rebuild it from
// the database until they are (it would sell their units again): it waits,
// then fails; once the consumer has stored them, a buy rebuilds the sale
// with every order, and the stock sells out exactly.
func TestAdvLinesRebuildWhileInFlight(t *testing.T) {
	r := advLinesRig(t)
	const sale = "rb.x-y:z"
	loader := inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
		applied, err := pipeline.Applied(ctx, r.rdb, r.eng, saleID)
		if err != nil {
			return inventory.Snapshot{}, err
		}
		snap, err := r.db.Snapshot(ctx, saleID)
		if err != nil {
			return inventory.Snapshot{}, err
		}
		snap.EventsApplied = applied
		return snap, nil
	})
	eng := inventory.New(r.rdb, inventory.Options{Prefix: strings.TrimSuffix(strings.TrimPrefix(r.eng.Key("x", "y"), "{"), ":x}:y"),
		Loader: loader, InitTimeout: 300 * time.Millisecond, Coalesce: inventory.Coalesce{MaxBatch: 2000}})
	if eng.EventsKey(sale) != r.eng.EventsKey(sale) {
		t.Fatalf("keys %s, %s", eng.EventsKey(sale), r.eng.EventsKey(sale))
	}
	const stock = 700
	r.advCreate(eng, sale, stock, 1)
	a := []inventory.Line{{SKU: "A", Qty: 1}}
	orders := r.advBuyMany(eng, sale, "u", 600, a, nil)
	orders = append(orders, r.advBuyMany(eng, sale, "v", 50, a, nil)...)
	// lost: everything but the stream
	var keys []string
	for _, k := range []string{"sale", "bought", "orders", "idem"} {
		keys = append(keys, eng.Key(sale, k))
	}
	if err := r.rdb.Del(r.ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Buy(r.ctx, sale, "late", a, ""); !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("buy while 650 orders are in flight: %v, want unavailable", err)
	}
	r.consumer("c1", r.db, pipeline.Options{})
	r.advSettled(sale, len(orders), orders)
	// The rebuilt sale: the 650 buyers hold their unit, 50 units left.
	for _, o := range orders[:5] {
		if _, err := eng.Buy(r.ctx, sale, o.UserID, a, ""); !errors.Is(err, inventory.ErrLimitExceeded) {
			t.Errorf("buyer %s again after the rebuild: %v, want the limit", o.UserID, err)
		}
	}
	rest := r.advBuyMany(eng, sale, "w", stock-len(orders), a, nil)
	if _, err := eng.Buy(r.ctx, sale, "x", a, ""); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buy past the stock: %v, want sold out", err)
	}
	orders = append(orders, rest...)
	r.advSettled(sale, len(orders), orders)
	rep, err := reconcile.Sale(r.ctx, eng, r.rdb, r.db, sale)
	if err != nil || !rep.Consistent {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
}

// TestAdvLinesDeadLetterKeepsToken: the dead letter of an order of an
// entry by tail whose buy spent a token keeps the token ("tokens", as a
// dead letter of a one-order entry keeps its whole entry): replayed, the
// order is stored once with its token spent, so that a rebuild from the
// database still refuses the token. Both ways an order of such an entry
// becomes a dead letter: a line that does not decode, and an order the
// database refuses for good (an order of another sale).
func TestAdvLinesDeadLetterKeepsToken(t *testing.T) {
	r := advLinesRig(t)
	const sale = "dl.t-k:n"
	r.advCreate(r.eng, sale, 1000, 5)
	g := inventory.OrderGroup(inventory.NewOrderID(sale))
	other := inventory.OrderGroup(inventory.NewOrderID("zz")) // a group of another sale
	now := time.Now().UnixMilli()
	until := now + 3_600_000
	bad := fmt.Sprintf("0001|p|h1|%d|A=oops|", now)
	entry := r.advXAdd(sale, 3, "group", g, "lines",
		fmt.Sprintf("0000|p|h0|%d|A=1|\n%s\n0002|p|h2|%d|A=1|", now, bad, now),
		"tokens", fmt.Sprintf("%s0000|tk0|%d\n%s0001|tk1|%d\n%s0002|tk2|%d", g, until, g, until, g, until))
	refused := r.advXAdd(sale, 2, "group", other, "lines",
		fmt.Sprintf("0000|p|h3|%d|A=1|\n0001|p|h4|%d|A=1|", now, now),
		"tokens", fmt.Sprintf("%s0001|tk4|%d", other, until))
	r.consumer("c1", r.db, pipeline.Options{})
	r.advSettled(sale, 2, nil)
	letters, err := r.db.DeadLetters(r.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, l := range letters {
		var fields map[string]string
		if err := json.Unmarshal([]byte(l.Payload), &fields); err != nil {
			t.Fatal(err)
		}
		got[l.EventID] = fields
	}
	want := map[string]map[string]string{
		advEventID(entry, 1):   {"bought": g + bad, "tokens": fmt.Sprintf("%s0001|tk1|%d", g, until)},
		advEventID(refused, 0): {"bought": fmt.Sprintf("%s0000|p|h3|%d|A=1|", other, now)},
		advEventID(refused, 1): {"bought": fmt.Sprintf("%s0001|p|h4|%d|A=1|", other, now), "tokens": fmt.Sprintf("%s0001|tk4|%d", other, until)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters\n%v\nwant\n%v", got, want)
	}
	// The operator mends the bad line and replays the letter's fields.
	fields := got[advEventID(entry, 1)]
	var values []any
	for _, f := range []string{"bought", "tokens"} {
		if v, ok := fields[f]; ok {
			if f == "bought" {
				v = strings.Replace(v, "A=oops", "A=1", 1)
			}
			values = append(values, f, v)
		}
	}
	if err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.eng.EventsKey(sale), Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
	r.advSettled(sale, 3, []inventory.Order{{ID: g + "0001", UserID: "h1", Items: []inventory.Line{{SKU: "A", Qty: 1}}}})
	snap, err := r.db.Snapshot(r.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	spent := map[string]string{}
	for _, s := range snap.SpentTokens {
		spent[s.Token] = s.OrderID
	}
	if want := map[string]string{"tk0": g + "0000", "tk1": g + "0001", "tk2": g + "0002"}; fmt.Sprint(spent) != fmt.Sprint(want) {
		t.Fatalf("spent tokens %v, want %v", spent, want)
	}
}
