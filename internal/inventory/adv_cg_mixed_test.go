package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial end-to-end tests of buy.lua's call group (cg): calls that mix
// buys sent by their ids' tails with buys sent whole (caller-chosen ids of
// other groups, resends, ids taken by another user, idempotency repeats in
// the call, tokens, payment deadlines), calls whose first buy is a resend
// of another group (so cg is that group, whose value exists), lost calls
// resent buy by buy, entry-per-order streams, and a rebuild from the
// stream. After each step the stream and the orders hash must hold exactly
// the same orders with the same records, by whole id.

// advCgStream reads the sale's raw stream: every bought order's record by
// whole order id (from "lines" of a "group", "orders" and "bought"
// one-field entries), each
// "tokens" line's order id, and how many entries held several orders.
func advCgStream(t *testing.T, r *rig, sale string) (recs map[string]string, tokens map[string]string, packed int) {
	t.Helper()
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(sale), "-", "+").Result()
	mustDo(t, err)
	recs, tokens = map[string]string{}, map[string]string{}
	for _, m := range msgs {
		if _, typed := m.Values["type"]; typed {
			continue
		}
		var text string
		if v, ok := m.Values["lines"].(string); ok {
			// by tail: each line's id is the entry's group and its tail
			g, _ := m.Values["group"].(string)
			var whole []string
			for line := range strings.SplitSeq(v, "\n") {
				if tail, _, _ := strings.Cut(line, "|"); len(tail) != 4 || g == "" {
					t.Errorf("entry %s: line %q of group %q names no order", m.ID, line, g)
				}
				whole = append(whole, g+line)
			}
			text = strings.Join(whole, "\n")
			if len(whole) > 1 { // (an order alone is an entry by tail too)
				packed++
			}
		} else if v, ok := m.Values["orders"].(string); ok {
			text = v
			packed++
		} else if v, ok := m.Values["bought"].(string); ok {
			text = v
			if strings.Contains(v, "\n") {
				t.Errorf("entry %s: a one-order entry of several lines: %q", m.ID, v)
			}
		} else {
			t.Errorf("entry %s: neither orders nor bought: %v", m.ID, m.Values)
			continue
		}
		here := map[string]bool{}
		for _, line := range strings.Split(text, "\n") {
			id, rec, ok := strings.Cut(line, "|")
			if !ok {
				t.Errorf("entry %s: line %q has no '|'", m.ID, line)
				continue
			}
			if s, err := inventory.SaleOfOrder(id); err != nil || s != sale {
				t.Errorf("entry %s: line %q does not name a whole order id of %s (%v)", m.ID, line, sale, err)
			}
			if _, dup := recs[id]; dup {
				t.Errorf("entry %s: order %s in the stream twice", m.ID, id)
			}
			recs[id], here[id] = rec, true
		}
		if tv, ok := m.Values["tokens"].(string); ok {
			for _, line := range strings.Split(tv, "\n") {
				parts := strings.Split(line, "|")
				if len(parts) != 3 || !here[parts[0]] {
					t.Errorf("entry %s: tokens line %q names no order of the entry %v", m.ID, line, slices.Sorted(maps.Keys(here)))
					continue
				}
				tokens[parts[0]] = parts[1]
			}
		}
	}
	return recs, tokens, packed
}

// advCgCheck: the stream's orders are exactly the orders hash's, record for
// record; ParseEntries reads them all; Order finds each; the sale's count
// and OrderCounts are the records'; with a payment step, the deadlines are
// exactly the orders (none paid or cancelled here). It returns the records.
func advCgCheck(t *testing.T, r *rig, sale, step string, pay bool) map[string]string {
	t.Helper()
	stream, _, _ := advCgStream(t, r, sale)
	records := r.orders(sale)
	for id := range records {
		if strings.Contains(id, "?bad") {
			t.Errorf("%s: a corrupt group value %s = %q", step, id, records[id])
		}
	}
	if !maps.Equal(stream, records) {
		for id, rec := range stream {
			if records[id] != rec {
				t.Errorf("%s: order %s: stream %q, orders hash %q", step, id, rec, records[id])
			}
		}
		for id, rec := range records {
			if _, ok := stream[id]; !ok {
				t.Errorf("%s: order %s in the orders hash (%q) but not the stream", step, id, rec)
			}
		}
	}
	evs := r.events(sale)
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.Type != inventory.EventBought {
			continue
		}
		seen[ev.Order.ID] = true
		o, err := r.eng.Order(r.ctx, ev.Order.ID)
		if err != nil || o.UserID != ev.Order.UserID || o.IdempotencyKey != ev.Order.IdempotencyKey ||
			!slices.Equal(o.Items, ev.Order.Items) || !o.CreatedAt.Equal(ev.Order.CreatedAt) {
			t.Errorf("%s: Order(%s) = %+v, %v; its event %+v", step, ev.Order.ID, o, err, ev.Order)
		}
		if ev.Spent.Token != "" && ev.Spent.OrderID != ev.Order.ID {
			t.Errorf("%s: order %s's spent token names order %s", step, ev.Order.ID, ev.Spent.OrderID)
		}
	}
	if len(seen) != len(records) {
		t.Errorf("%s: %d bought events decoded, %d records", step, len(seen), len(records))
	}
	n, err := r.rdb.HGet(r.ctx, r.key(sale, "sale"), "orders").Int64()
	if err != nil || n != int64(len(records)) {
		t.Errorf("%s: the sale's orders count %d (%v), %d records", step, n, err, len(records))
	}
	counts, errs := r.eng.OrderCounts(r.ctx, []string{sale})
	if errs[0] != nil || counts[0] != int64(len(records)) {
		t.Errorf("%s: OrderCounts %v %v, %d records", step, counts, errs, len(records))
	}
	if pay {
		dl, err := r.rdb.ZRange(r.ctx, r.key(sale, "deadlines"), 0, -1).Result()
		mustDo(t, err)
		slices.Sort(dl)
		if want := slices.Sorted(maps.Keys(records)); !slices.Equal(dl, want) {
			t.Errorf("%s: deadlines\n%v\nwant the orders\n%v", step, dl, want)
		}
	}
	return records
}

// advCgID is the id of id's group with the tail tail (a caller's choice).
func advCgID(id, tail string) string { return inventory.OrderGroup(id) + tail }

func TestAdvCgMixedCallsKeepStreamAndHashAlike(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, perOrder := range []bool{false, true} {
			t.Run(fmt.Sprint("EntryPerOrder=", perOrder), func(t *testing.T) {
				db := &recordDB{}
				r := newRig(t, b, inventory.Options{EntryPerOrder: perOrder, Loader: db})
				const sale = "c.g-x:y_"
				r.create(inventory.Sale{ID: sale, PerUserLimit: 100, PaymentTimeout: time.Hour,
					Items: []inventory.Item{{SKU: "A", Stock: 1000}, {SKU: "B", Stock: 1000}}})
				x, y := inventory.NewOrderID(sale), inventory.NewOrderID(sale)
				req := func(user string, l []inventory.Line, id, key, tok string) inventory.BuyRequest {
					q := inventory.BuyRequest{SaleID: sale, UserID: user, Lines: l, OrderID: id, IdempotencyKey: key, Token: tok}
					if tok != "" {
						q.TokenTTL = time.Minute
					}
					return q
				}
				run := func(step string, reqs []inventory.BuyRequest) []inventory.BuyResult {
					t.Helper()
					res := r.eng.BuyMany(r.ctx, reqs)
					for i, br := range res {
						t.Logf("%s: buy %d (%s %s): %s replayed=%v retried=%v %v", step, i, reqs[i].UserID, reqs[i].OrderID,
							br.Receipt.Order.ID, br.Receipt.Replayed, br.Receipt.Retried, br.Err)
					}
					return res
				}
				want := func(step string, res []inventory.BuyResult, i int, id string, replayed, retried bool) {
					t.Helper()
					br := res[i]
					if br.Err != nil || id != "" && br.Receipt.Order.ID != id || br.Receipt.Replayed != replayed || br.Receipt.Retried != retried {
						t.Errorf("%s: buy %d: %+v, %v; want order %q replayed %v retried %v", step, i, br.Receipt, br.Err, id, replayed, retried)
					}
				}

				// 1: cg is x's group (a caller's id); ids of it by tail, the
				// engine's own (another group) and y whole; a key repeated
				// in the call, an id twice (its user's: a resend; another
				// user's: a new id), a token twice, an unknown sku.
				x1, x2 := advCgID(x, "ZZZ1"), advCgID(x, "ZZZ2")
				res := run("1", []inventory.BuyRequest{
					req("a0", lines("A", 1), x, "k0", ""),
					req("a1", lines("A", 2, "B", 1), x1, "", "tok1"),
					req("a2", lines("B", 1), "", "", ""),
					req("a3", lines("A", 1), y, "k3", "tok3"),
					req("a0", lines("A", 1), "", "k0", ""),
					req("a5", lines("A", 1), x1, "", ""),
					req("a1", lines("A", 2, "B", 1), x1, "", ""),
					req("a7", lines("A", 3), "", "", ""),
					req("a8", lines("B", 2), "", "k8", ""),
					req("a9", lines("Q", 1), "", "", ""),
					req("a10", lines("A", 1), x2, "", "tok1"),
					req("a11", lines("A", 1), x2, "k11", "tok11"),
				})
				want("1", res, 0, x, false, false)
				want("1", res, 1, x1, false, false)
				want("1", res, 2, "", false, false)
				want("1", res, 3, y, false, false)
				want("1", res, 4, x, true, false)
				if res[5].Err != nil || res[5].Receipt.Order.ID == x1 || res[5].Receipt.Order.UserID != "a5" {
					t.Errorf("1: another user's buy of x1: %+v, %v; want an order of a new id", res[5].Receipt, res[5].Err)
				}
				want("1", res, 6, x1, false, true)
				want("1", res, 7, "", false, false)
				want("1", res, 8, "", false, false)
				if res[9].Err == nil {
					t.Errorf("1: a buy of an unknown sku: %+v", res[9].Receipt)
				}
				if !errors.Is(res[10].Err, inventory.ErrTokenSpent) {
					t.Errorf("1: a buy of a token spent in the call: %+v, %v", res[10].Receipt, res[10].Err)
				}
				want("1", res, 11, x2, false, false)
				if g := inventory.OrderGroup(res[2].Receipt.Order.ID); g == inventory.OrderGroup(x) || g != inventory.OrderGroup(res[7].Receipt.Order.ID) {
					t.Fatalf("1: the engine's ids: %s, %s (x %s)", res[2].Receipt.Order.ID, res[7].Receipt.Order.ID, x)
				}
				recs := advCgCheck(t, r, sale, "1", true)
				if len(recs) != 8 {
					t.Errorf("1: %d orders, want 8: %v", len(recs), recs)
				}
				_, toks, packed := advCgStream(t, r, sale)
				if toks[x1] != "tok1" || toks[y] != "tok3" || toks[x2] != "tok11" || len(toks) != 3 {
					t.Errorf("1: tokens lines %v", toks)
				}
				if perOrder && packed != 0 {
					t.Errorf("1: %d entries of several orders with EntryPerOrder", packed)
				}
				if !perOrder && b.name != "miniredis" && packed == 0 {
					t.Errorf("1: no entry of several orders on Redis")
				}
				g := res[2].Receipt.Order.ID // an engine id: its group is now cg's
				res1 := res

				// 2: the first buy a resend of g (cg g's group, which has a
				// value); ids of g's group by tail after it, the engine's
				// (whole), x resent (whole), a key repeated from call 1.
				g5, g6 := advCgID(g, "ZZZ5"), advCgID(g, "ZZZ6")
				res = run("2", []inventory.BuyRequest{
					req("a2", lines("B", 1), g, "", ""),
					req("b1", lines("A", 1), g5, "", "tok5"),
					req("b2", lines("A", 1), "", "kb2", ""),
					req("a0", lines("A", 1), x, "", ""),
					req("b3", lines("B", 1), g6, "kb3", ""),
					req("a8", lines("B", 2), "", "k8", ""),
					req("b4", lines("A", 1), "", "", "tok6"),
					req("b3", lines("B", 1), "", "kb3", ""),
				})
				want("2", res, 0, g, false, true)
				want("2", res, 1, g5, false, false)
				want("2", res, 2, "", false, false)
				want("2", res, 3, x, false, true)
				want("2", res, 4, g6, false, false)
				want("2", res, 5, res1[8].Receipt.Order.ID, true, false)
				want("2", res, 6, "", false, false)
				want("2", res, 7, g6, true, false)
				recs = advCgCheck(t, r, sale, "2", true)
				if len(recs) != 12 {
					t.Errorf("2: %d orders, want 12", len(recs))
				}

				// 3: every order bought of cg's group, by tail, after a
				// resend: the group's value grows by the call's lines; and
				// another user's buy of the resent id (a new id).
				h := res[2].Receipt.Order.ID
				res = run("3", []inventory.BuyRequest{
					req("b2", lines("A", 1), h, "", ""),
					req("c1", lines("A", 1), advCgID(h, "YYY0"), "kc1", "tok7"),
					req("c2", lines("B", 1), advCgID(h, "YYY1"), "", ""),
					req("c1", lines("A", 1), "", "kc1", ""),
					req("a7", lines("A", 3), h, "", ""),
				})
				want("3", res, 0, h, false, true)
				want("3", res, 1, advCgID(h, "YYY0"), false, false)
				want("3", res, 2, advCgID(h, "YYY1"), false, false)
				want("3", res, 3, advCgID(h, "YYY0"), true, false)
				if res[4].Err != nil || res[4].Receipt.Order.ID == h || res[4].Receipt.Order.UserID != "a7" {
					t.Errorf("3: another user's buy of h: %+v, %v; want an order of a new id", res[4].Receipt, res[4].Err)
				}
				advCgCheck(t, r, sale, "3", true)

				// 4: a rebuild from the stream: the same orders and records.
				before := r.orders(sale)
				db.catchUp(r, sale)
				r.lose(sale, false)
				if _, err := r.eng.Stock(r.ctx, sale); err != nil {
					t.Fatalf("4: Stock after a loss: %v", err)
				}
				if after := r.orders(sale); !maps.Equal(before, after) {
					t.Errorf("4: the orders after a rebuild\n%v\nwant\n%v", after, before)
				}
				if n, err := r.rdb.HGet(r.ctx, r.key(sale, "sale"), "orders").Int64(); err != nil || n != int64(len(before)) {
					t.Errorf("4: the rebuilt sale counts %d orders (%v), want %d", n, err, len(before))
				}
				// every order resent after it, in one call, is found again
				var again []inventory.BuyRequest
				var ids []string
				for id, rec := range before {
					f := strings.Split(rec, "|")
					l := inventory.Line{}
					var ls []inventory.Line
					for _, p := range strings.Split(f[3], ",") {
						sku, q, _ := strings.Cut(p, "=")
						l.SKU = sku
						fmt.Sscan(q, &l.Qty)
						ls = append(ls, l)
					}
					again = append(again, req(f[1], ls, id, "", ""))
					ids = append(ids, id)
				}
				rem := r.remaining(sale)
				res = r.eng.BuyMany(r.ctx, again)
				for i, br := range res {
					if br.Err != nil || !br.Receipt.Retried || br.Receipt.Order.ID != ids[i] {
						t.Errorf("4: resend of %s: %+v, %v", ids[i], br.Receipt, br.Err)
					}
				}
				if got := r.remaining(sale); !maps.Equal(got, rem) {
					t.Errorf("4: resends sold: %v, want %v", got, rem)
				}
				// and a new call of the old groups' ids after the rebuild
				res = run("5", []inventory.BuyRequest{
					req("d1", lines("A", 1), advCgID(x, "XXX0"), "", ""),
					req("d2", lines("A", 1), advCgID(g, "XXX1"), "kd2", ""),
					req("d3", lines("A", 1), advCgID(x, "XXX2"), "", "tokd3"),
				})
				for i := range res {
					want("5", res, i, "", false, false)
				}
				advCgCheck(t, r, sale, "5", true)

				// 6: a crowd's call (distinct: no key, no token, fresh
				// users, the engine's ids, all tails) and a lone buy: no
				// whole id is made for a buy but its deadline's.
				var crowd []inventory.BuyRequest
				for i := range 6 {
					crowd = append(crowd, req(fmt.Sprint("e", i), lines("A", 1), "", "", ""))
				}
				res = run("6", crowd)
				for i := range res {
					want("6", res, i, "", false, false)
				}
				if _, err := r.eng.Buy(r.ctx, sale, "lone", lines("B", 1), ""); err != nil {
					t.Errorf("6: a lone buy: %v", err)
				}
				if recs := advCgCheck(t, r, sale, "6", true); len(recs) != len(before)+3+7 {
					t.Errorf("6: %d orders, want %d", len(recs), len(before)+3+7)
				}
			})
		}
	})
}

// TestAdvCgLostCallsResentAlone: a call of mixed buys (cg a caller's
// group, the engine's ids whole, a resend, tokens, keys) whose reply is
// lost: each buy is then sent alone (its own group cg, its id by tail) and
// finds the order the lost call made; the stream and the hash agree.
func TestAdvCgLostCallsResentAlone(t *testing.T) {
	for _, perOrder := range []bool{false, true} {
		t.Run(fmt.Sprint("EntryPerOrder=", perOrder), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{EntryPerOrder: perOrder})
			const sale = "s1"
			r.create(inventory.Sale{ID: sale, PerUserLimit: 10, PaymentTimeout: time.Hour, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
			first, err := r.eng.Buy(r.ctx, sale, "w0", lines("A", 1), "kw") // loads the script
			mustDo(t, err)
			h := &lostPipeline{}
			h.armed.Store(true)
			rdb.AddHook(h)
			x := inventory.NewOrderID(sale)
			reqs := []inventory.BuyRequest{
				{SaleID: sale, UserID: "u0", Lines: lines("A", 1), OrderID: x},
				{SaleID: sale, UserID: "u1", Lines: lines("A", 2), OrderID: inventory.OrderGroup(x) + "ZZZ1", Token: "t1", TokenTTL: time.Minute},
				{SaleID: sale, UserID: "u2", Lines: lines("A", 1)},
				{SaleID: sale, UserID: "w0", Lines: lines("A", 1), OrderID: first.Order.ID},
				{SaleID: sale, UserID: "u3", Lines: lines("A", 1), IdempotencyKey: "k3", Token: "t3", TokenTTL: time.Minute},
				{SaleID: sale, UserID: "u3", Lines: lines("A", 1), IdempotencyKey: "k3"},
				{SaleID: sale, UserID: "u4", Lines: lines("A", 1), Token: "t1", TokenTTL: time.Minute},
				{SaleID: sale, UserID: "u5", Lines: lines("A", 1), OrderID: inventory.OrderGroup(x) + "ZZZ2"},
			}
			res := r.eng.BuyMany(r.ctx, reqs)
			if h.armed.Load() {
				t.Fatal("the call's pipeline was not lost")
			}
			for i, br := range res {
				switch i {
				case 6:
					if !errors.Is(br.Err, inventory.ErrTokenSpent) {
						t.Errorf("buy %d (a token spent in the lost call): %+v, %v", i, br.Receipt, br.Err)
					}
				case 3, 5:
					if br.Err != nil || !br.Receipt.Retried && !br.Receipt.Replayed {
						t.Errorf("buy %d (a repeat): %+v, %v", i, br.Receipt, br.Err)
					}
				default:
					if br.Err != nil || !br.Receipt.Retried {
						t.Errorf("buy %d: %+v, %v; want its order, found again", i, br.Receipt, br.Err)
					}
				}
			}
			if res[5].Receipt.Order.ID != res[4].Receipt.Order.ID {
				t.Errorf("the key's repeat names %s, the key's order is %s", res[5].Receipt.Order.ID, res[4].Receipt.Order.ID)
			}
			recs := advCgCheck(t, r, sale, "lost", true)
			if len(recs) != 6 {
				t.Errorf("%d orders, want 6", len(recs))
			}
			if rem := r.remaining(sale)["A"]; rem != 100-7 {
				t.Errorf("remaining %d, want 93", rem)
			}
		})
	}
}

// advCgLossy fails every third pipeline of buy scripts after it ran (its
// reply lost), until off.
type advCgLossy struct {
	n   atomic.Int32
	off atomic.Bool
}

func (h *advCgLossy) DialHook(next redis.DialHook) redis.DialHook { return next }

// lose reports whether the next call of buy scripts loses its reply.
func (h *advCgLossy) lose(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if c.Name() == "evalsha" || c.Name() == "eval" {
			return !h.off.Load() && h.n.Add(1)%3 == 0
		}
	}
	return false
}

func (h *advCgLossy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !h.lose(cmd) {
			return err
		}
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

func (h *advCgLossy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.lose(cmds...) {
			return err
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// TestAdvCgCoalescedCrowdWithLostReplies: concurrent buys, coalesced into
// calls, a third of whose replies are lost: each lost buy is resent, and
// may be coalesced into a later call of another group (its id whole
// there). Buyers choose ids of their own now and then (some of one shared
// group, some reused by another buyer), keys and tokens. Every success
// names an order of its buyer; the stream and the orders hash agree; the
// units sold are the records' units.
func TestAdvCgCoalescedCrowdWithLostReplies(t *testing.T) {
	for _, perOrder := range []bool{false, true} {
		t.Run(fmt.Sprint("EntryPerOrder=", perOrder), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }},
				inventory.Options{EntryPerOrder: perOrder, Coalesce: inventory.Coalesce{MaxBatch: 16, Overlap: 4}})
			const sale = "s1"
			r.create(inventory.Sale{ID: sale, PerUserLimit: 3, PaymentTimeout: time.Hour, Items: []inventory.Item{{SKU: "A", Stock: 10000}}})
			if _, err := r.eng.Buy(r.ctx, sale, "w0", lines("A", 1), ""); err != nil { // loads the script
				t.Fatal(err)
			}
			h := &advCgLossy{}
			rdb.AddHook(h)
			shared := inventory.NewOrderID(sale)
			const n = 300
			type got struct {
				rc  inventory.Receipt
				err error
			}
			out := make([]got, n)
			reqs := make([]inventory.BuyRequest, n)
			var wg sync.WaitGroup
			for i := range n {
				q := inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprint("u", i%120), Lines: lines("A", 1+i%2)}
				switch i % 7 {
				case 1:
					q.OrderID = inventory.OrderGroup(shared) + fmt.Sprintf("%c%c%c%c", "ABCD"[i%4], "EFGH"[i/4%4], "JKMN"[i/16%4], "PQRS"[i/64%4])
				case 2:
					q.IdempotencyKey = fmt.Sprint("k", i%5)
				case 3:
					q.Token, q.TokenTTL = fmt.Sprint("t", i%40), time.Minute
				case 4:
					q.OrderID = inventory.NewOrderID(sale)
				}
				reqs[i] = q
				wg.Add(1)
				go func() {
					defer wg.Done()
					rc, err := r.eng.BuyWith(r.ctx, q)
					out[i] = got{rc, err}
				}()
			}
			wg.Wait()
			h.off.Store(true)
			if h.n.Load() < 3 {
				t.Fatalf("%d pipelines: none lost", h.n.Load())
			}
			recs := advCgCheck(t, r, sale, "crowd", true)
			units := int64(0)
			for _, rec := range recs {
				f := strings.Split(rec, "|")
				_, q, _ := strings.Cut(f[3], "=")
				var k int64
				fmt.Sscan(q, &k)
				units += k
			}
			if rem := r.remaining(sale)["A"]; rem != 10000-units {
				t.Errorf("remaining %d, the records hold %d units of 10000", rem, units)
			}
			ok := 0
			for i, g := range out {
				if g.err != nil {
					continue
				}
				ok++
				if rec, found := recs[g.rc.Order.ID]; !found || !strings.HasPrefix(rec, "p|"+reqs[i].UserID+"|") {
					t.Errorf("buy %d (%s): order %s, record %q", i, reqs[i].UserID, g.rc.Order.ID, rec)
				}
			}
			if ok < n/3 {
				t.Errorf("only %d of %d buys succeeded", ok, n)
			}
			t.Logf("%d of %d buys succeeded, %d orders, %d pipelines", ok, n, len(recs), h.n.Load())
		})
	}
}
