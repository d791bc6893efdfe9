package inventory_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial tests of group values of both kinds of line: "<tail>|<record>"
// (written now) and "<order id>|<record>" (written before lines left their
// group out), side by side in one value, and of one order named twice in
// a value (once each way, or twice one way): Go and the scripts must read
// the same record of it, the first line's.

// advTailToWhole rewrites the lines of group g (sale's orders hash) whose
// place pick takes as "<order id>|<record>", as an engine before tails
// wrote them; it returns the new value.
func advTailToWhole(t *testing.T, r *rig, sale, g string, pick func(i int) bool) string {
	t.Helper()
	key := r.key(sale, "orders")
	v, err := r.rdb.HGet(r.ctx, key, g).Result()
	mustDo(t, err)
	ls := strings.Split(v, "\n")
	for i, l := range ls {
		if pick(i) && len(l) > 4 && l[4] == '|' {
			ls[i] = g + l
		}
	}
	v = strings.Join(ls, "\n")
	mustDo(t, r.rdb.HSet(r.ctx, key, g, v).Err())
	return v
}

// TestAdvTailMixedValuesServe: a group of whole-id and tail lines
// alternating, another of whole-id lines only. A call of caller-chosen
// ids all of the first group appends tail lines after its old ones (the
// gsub of the call's one group, of several orders); a call of ids of both
// groups appends tail lines to each. Then every order reads, every resend
// finds its own (nothing bought twice), cancels and payments and expiries
// change each record in its own line, which keeps its form; the units and
// the stock agree throughout.
func TestAdvTailMixedValuesServe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		const sale = "m.x-y:z_"
		r.create(inventory.Sale{ID: sale, PerUserLimit: 10, PaymentTimeout: time.Minute, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
		var reqs []inventory.BuyRequest
		buy := func(n int, ids []string) []string {
			t.Helper()
			var batch []inventory.BuyRequest
			for i := range n {
				q := inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", len(reqs)+i), Lines: lines("A", 1+(len(reqs)+i)%3),
					IdempotencyKey: fmt.Sprintf("%04d|k", len(reqs)+i)}
				if ids != nil {
					q.OrderID = ids[i]
				}
				batch = append(batch, q)
			}
			var out []string
			for i, br := range r.eng.BuyMany(r.ctx, batch) {
				if br.Err != nil || br.Receipt.Retried || br.Receipt.Replayed || ids != nil && br.Receipt.Order.ID != ids[i] {
					t.Fatalf("buy %d: %+v, %v", len(reqs)+i, br.Receipt, br.Err)
				}
				out = append(out, br.Receipt.Order.ID)
			}
			reqs = append(reqs, batch...)
			return out
		}
		ids := buy(9, nil)
		g1 := inventory.OrderGroup(ids[0])
		ids = append(ids, buy(3, nil)...)
		g2 := inventory.OrderGroup(ids[9])
		if g1 == g2 || inventory.OrderGroup(ids[8]) != g1 || inventory.OrderGroup(ids[11]) != g2 {
			t.Fatalf("the calls' groups: %v", ids)
		}
		old1 := advTailToWhole(t, r, sale, g1, func(i int) bool { return i%2 == 0 })
		old2 := advTailToWhole(t, r, sale, g2, func(int) bool { return true })
		records := r.orders(sale)
		if len(records) != 12 {
			t.Fatalf("%d records of mixed values, want 12: %v", len(records), records)
		}

		// A call of four ids of g1: its one group, an old value.
		ids = append(ids, buy(4, []string{g1 + "ZZZ0", g1 + "ZZZ1", g1 + "ZZZ2", g1 + "ZZZ3"})...)
		records = r.orders(sale)
		v1, err := r.rdb.HGet(r.ctx, r.key(sale, "orders"), g1).Result()
		mustDo(t, err)
		var want []string
		for i := range 4 {
			want = append(want, fmt.Sprintf("ZZZ%d|", i)+records[ids[12+i]])
		}
		if w := old1 + "\n" + strings.Join(want, "\n"); v1 != w {
			t.Errorf("g1 after a call of its own ids:\n%q\nwant\n%q", v1, w)
		}
		// A call of ids of both groups.
		ids = append(ids, buy(4, []string{g2 + "YYY0", g1 + "YYY1", g2 + "YYY2", g1 + "YYY3"})...)
		records = r.orders(sale)
		h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
		mustDo(t, err)
		if w := old2 + "\nYYY0|" + records[ids[16]] + "\nYYY2|" + records[ids[18]]; h[g2] != w {
			t.Errorf("g2 after a call of two groups:\n%q\nwant\n%q", h[g2], w)
		}
		if w := v1 + "\nYYY1|" + records[ids[17]] + "\nYYY3|" + records[ids[19]]; h[g1] != w {
			t.Errorf("g1 after a call of two groups:\n%q\nwant\n%q", h[g1], w)
		}
		if len(h) != 2 || len(records) != 20 {
			t.Errorf("%d fields, %d records; want 2 and 20", len(h), len(records))
		}
		for i, id := range ids {
			o, err := r.eng.Order(r.ctx, id)
			if err != nil || o.UserID != reqs[i].UserID || o.IdempotencyKey != reqs[i].IdempotencyKey || o.Items[0].Qty != reqs[i].Lines[0].Qty {
				t.Errorf("Order(%s) = %+v, %v; want %+v", id, o, err, reqs[i])
			}
		}
		units := func() int64 {
			t.Helper()
			u, err := r.eng.UnitsInOrders(r.ctx, sale)
			if err != nil {
				t.Fatalf("UnitsInOrders: %v", err)
			}
			return u["A"]
		}
		resends := func(stage string) {
			t.Helper()
			before := rem(r, sale)
			for i, id := range ids {
				q := reqs[i]
				q.OrderID = id
				if i%2 == 1 {
					q.IdempotencyKey = "" // found by its id alone
				}
				rc, err := r.eng.BuyWith(r.ctx, q)
				if err != nil || rc.Order.ID != id {
					t.Errorf("%s: resend %d: %+v, %v; want order %s", stage, i, rc, err, id)
				}
			}
			if got := rem(r, sale); got != before || units() != 1000-got {
				t.Errorf("%s: remaining %d after the resends (before %d), units %d", stage, got, before, units())
			}
		}
		resends("mixed")

		// Pay, cancel, expire: a third each.
		paid := int64(0)
		for i, id := range ids {
			switch i % 3 {
			case 0:
				if _, _, err := r.eng.Pay(r.ctx, id, reqs[i].UserID, "ref"); err != nil {
					t.Fatalf("Pay %d: %v", i, err)
				}
				paid += reqs[i].Lines[0].Qty
			case 1:
				if _, err := r.eng.Cancel(r.ctx, id, reqs[i].UserID); err != nil {
					t.Fatalf("Cancel %d: %v", i, err)
				}
			}
		}
		r.clock.Set(r.clock.Now().Add(2 * time.Minute))
		for {
			_, more, err := r.eng.ExpireDue(r.ctx, sale, 4)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
		}
		after, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
		mustDo(t, err)
		recs := inventory.OrderRecords(after)
		for i, id := range ids {
			before := records[id]
			want := before
			if i%3 != 0 {
				want = "c" + before[1:]
			}
			if recs[id] != want {
				t.Errorf("order %d %s: record %q, want %q", i, id, recs[id], want)
			}
			o, err := r.eng.Payment(r.ctx, id)
			if err != nil || (o.Status == inventory.OrderCancelled) != (i%3 != 0) || o.UserID != reqs[i].UserID {
				t.Errorf("Payment(%s) = %+v, %v; want cancelled %v", id, o, err, i%3 != 0)
			}
		}
		// Every line kept its form: the same lines, but for their status.
		for _, g := range []string{g1, g2} {
			was := strings.Split(h[g], "\n")
			now := strings.Split(after[g], "\n")
			if len(was) != len(now) {
				t.Fatalf("group %s: %d lines, was %d", g, len(now), len(was))
			}
			for i := range was {
				head, _, _ := strings.Cut(was[i], "|")
				if !strings.HasPrefix(now[i], head+"|") {
					t.Errorf("group %s line %d: %q, was %q: it changed its form", g, i, now[i], was[i])
				}
			}
		}
		if got := rem(r, sale); got != 1000-paid || units() != paid {
			t.Errorf("remaining %d, units %d; want %d paid", got, units(), paid)
		}
		resends("settled")
	})
}

// TestAdvTailOrderNamedTwice: one order named twice in its group's value
// (by tail then id, id then tail, tail twice, id twice), the two lines
// with different buyers. Go (Engine.Order) and the scripts (a resend, a
// cancel) read the first line's record: its buyer's resend finds the order,
// the other buyer's does not; a cancel by the other buyer is refused; a
// cancel by its buyer changes what Engine.Order reads. The units scan
// refuses the value (corrupt), and a repair from the system of record makes
// the group sound again: tails, one line per order, every order found.
func TestAdvTailOrderNamedTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		for n, form := range [][2]bool{{false, true}, {true, false}, {false, false}, {true, true}} { // whole id?
			sale := fmt.Sprintf("d.%d-", n)
			*db = recordDB{}
			ids := advTailThreeBuys(t, r, sale)
			db.consume(r, sale)
			records := r.orders(sale)
			g := inventory.OrderGroup(ids[0])
			tail := strings.TrimPrefix(ids[0], g)
			head := func(whole bool) string {
				if whole {
					return g + tail + "|"
				}
				return tail + "|"
			}
			// The first line says u1 bought order 0 (as u1 bought its own,
			// one of A); the second is u0's record of it.
			claim := "p|u1|" + strings.SplitN(records[ids[0]], "|", 4)[2] + "|A=1|"
			v := head(form[0]) + claim + "\n" + head(form[1]) + records[ids[0]]
			for _, id := range ids[1:] {
				v += "\n" + strings.TrimPrefix(id, g) + "|" + records[id]
			}
			mustDo(t, r.rdb.HSet(r.ctx, r.key(sale, "orders"), g, v).Err())
			what := fmt.Sprintf("form %v", form)

			if o, err := r.eng.Order(r.ctx, ids[0]); err != nil || o.UserID != "u1" {
				t.Errorf("%s: Order = %+v, %v; want the first line's, u1's", what, o, err)
			}
			// u1's resend (its record's lines) finds the order; u0's does
			// not (the order is another buyer's, so the buy takes a new id).
			rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: "u1", Lines: lines("A", 1), OrderID: ids[0]})
			if err != nil || rc.Order.ID != ids[0] || !rc.Retried {
				t.Errorf("%s: u1's resend of order 0: %+v, %v; want it found (the first line is u1's)", what, rc, err)
			}
			rc, err = r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: "u0", Lines: lines("A", 1), OrderID: ids[0]})
			if err == nil && rc.Order.ID == ids[0] {
				t.Errorf("%s: u0's resend of order 0 found it (%+v): the script read the second line, Go the first", what, rc)
			}
			if _, err := r.eng.Cancel(r.ctx, ids[0], "u0"); !errors.Is(err, inventory.ErrNotFound) {
				t.Errorf("%s: u0's cancel of order 0: %v; want not found (the first line is u1's)", what, err)
			}
			if _, err := r.eng.Cancel(r.ctx, ids[0], "u1"); err != nil {
				t.Errorf("%s: u1's cancel of order 0: %v", what, err)
			}
			if o, err := r.eng.Order(r.ctx, ids[0]); err != nil || o.UserID != "u1" || o.Status != inventory.OrderCancelled {
				t.Errorf("%s: after u1's cancel, Order = %+v, %v; want u1's, cancelled (the line the cancel wrote)", what, o, err)
			}
			got, err := r.rdb.HGet(r.ctx, r.key(sale, "orders"), g).Result()
			mustDo(t, err)
			if second := strings.Split(got, "\n")[1]; second != head(form[1])+records[ids[0]] {
				t.Errorf("%s: the cancel changed the second line: %q", what, second)
			}
			if _, err := r.eng.UnitsInOrders(r.ctx, sale); !errors.Is(err, inventory.ErrCorrupt) {
				t.Errorf("%s: UnitsInOrders of a group naming an order twice: %v; want ErrCorrupt", what, err)
			}
			if _, bad := r.orders(sale)[g+"?bad"]; !bad {
				t.Errorf("%s: OrderRecords did not flag the group", what)
			}

			db.consume(r, sale)
			if _, err := r.eng.Repair(r.ctx, sale, db); err != nil {
				t.Fatalf("%s: Repair: %v", what, err)
			}
			if rep, err := r.eng.Repair(r.ctx, sale, db); err != nil || rep.Changed() {
				t.Errorf("%s: a second Repair = %+v, %v; want nothing changed", what, rep, err)
			}
			h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
			mustDo(t, err)
			recs := inventory.OrderRecords(h)
			wantIDs := slices.Sorted(maps.Keys(db.orders))
			if gotIDs := slices.Sorted(maps.Keys(recs)); !slices.Equal(gotIDs, wantIDs) {
				t.Errorf("%s: after the repair the records are of %v, want %v", what, gotIDs, wantIDs)
			}
			for gr, val := range h {
				for line := range strings.SplitSeq(val, "\n") {
					if len(line) < 5 || line[4] != '|' {
						t.Errorf("%s: after the repair group %s has line %q, not a tail's", what, gr, line)
					}
				}
			}
			for id, o := range db.orders {
				got, err := r.eng.Order(r.ctx, id)
				if err != nil || got.UserID != o.UserID || got.Status != o.Status {
					t.Errorf("%s: after the repair Order(%s) = %+v, %v; want %+v", what, id, got, err, o)
				}
			}
			if _, err := r.eng.UnitsInOrders(r.ctx, sale); err != nil {
				t.Errorf("%s: UnitsInOrders after the repair: %v", what, err)
			}
		}
	})
}

// TestAdvTailOwnFieldBesideTail: an order both in a field of its own
// (stored before order groups) and, by tail or by whole id, in its group
// is corrupt to the units scan and to OrderRecords; Engine.Order and a
// cancel read and write the group's line (never the own field), and a
// repair rewrites the group and removes the own field.
func TestAdvTailOwnFieldBesideTail(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		for n, whole := range []bool{false, true} {
			sale := fmt.Sprintf("o-%d.", n)
			*db = recordDB{}
			ids := advTailThreeBuys(t, r, sale)
			g := inventory.OrderGroup(ids[1])
			if whole {
				advTailToWhole(t, r, sale, g, func(i int) bool { return i == 1 })
			}
			records := r.orders(sale)
			key := r.key(sale, "orders")
			// The own field says u0 bought order 1 (u1's in its group).
			own := "p|u0|" + strings.SplitN(records[ids[1]], "|", 4)[2] + "|A=7|"
			mustDo(t, r.rdb.HSet(r.ctx, key, ids[1], own).Err())
			if _, err := r.eng.UnitsInOrders(r.ctx, sale); !errors.Is(err, inventory.ErrCorrupt) {
				t.Errorf("whole %v: UnitsInOrders with an order in two fields: %v; want ErrCorrupt", whole, err)
			}
			recs := r.orders(sale)
			if _, bad := recs[g+"?bad"]; !bad {
				t.Errorf("whole %v: OrderRecords did not flag an order in two fields: %v", whole, recs)
			}
			if o, err := r.eng.Order(r.ctx, ids[1]); err != nil || o.UserID != "u1" || o.Items[0].Qty != 2 {
				t.Errorf("whole %v: Order = %+v, %v; want the group's record (u1's)", whole, o, err)
			}
			if _, err := r.eng.Cancel(r.ctx, ids[1], "u0"); !errors.Is(err, inventory.ErrNotFound) {
				t.Errorf("whole %v: the own field's buyer cancelled the order: %v", whole, err)
			}
			if _, err := r.eng.Cancel(r.ctx, ids[1], "u1"); err != nil {
				t.Fatalf("whole %v: cancel: %v", whole, err)
			}
			if v, err := r.rdb.HGet(r.ctx, key, ids[1]).Result(); err != nil || v != own {
				t.Errorf("whole %v: the cancel changed the own field: %q, %v", whole, v, err)
			}
			if o, err := r.eng.Order(r.ctx, ids[1]); err != nil || o.UserID != "u1" || o.Status != inventory.OrderCancelled {
				t.Errorf("whole %v: after the cancel Order = %+v, %v; want u1's, cancelled", whole, o, err)
			}
			db.consume(r, sale)
			if _, err := r.eng.Repair(r.ctx, sale, db); err != nil {
				t.Fatalf("whole %v: Repair: %v", whole, err)
			}
			h, err := r.rdb.HGetAll(r.ctx, key).Result()
			mustDo(t, err)
			if _, ok := h[ids[1]]; ok || len(h) != 1 {
				t.Errorf("whole %v: after the repair the orders hash is %v; want the group alone", whole, h)
			}
			if u, err := r.eng.UnitsInOrders(r.ctx, sale); err != nil || u["A"] != 1+3 {
				t.Errorf("whole %v: UnitsInOrders after the repair = %v, %v; want A 4", whole, u, err)
			}
			if rep, err := r.eng.Repair(r.ctx, sale, db); err != nil || rep.Changed() {
				t.Errorf("whole %v: a second Repair = %+v, %v", whole, rep, err)
			}
		}
	})
}

// advTailThreeBuys creates sale (100 of A, limit 5) and buys 1, 2 and 3
// of A for u0, u1 and u2 in one call; it returns their order ids.
func advTailThreeBuys(t *testing.T, r *rig, sale string) []string {
	t.Helper()
	r.create(inventory.Sale{ID: sale, PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
	var reqs []inventory.BuyRequest
	for i := range 3 {
		reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1+i)})
	}
	var ids []string
	for i, br := range r.eng.BuyMany(r.ctx, reqs) {
		if br.Err != nil {
			t.Fatalf("buy %d: %v", i, br.Err)
		}
		ids = append(ids, br.Receipt.Order.ID)
	}
	return ids
}
