package inventory_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Adversarial tests of group values whose lines name their orders by tail
// ("<last four characters>|<record>"): buy.lua writes a call's one group
// with one string.gsub that takes the group (a Lua pattern, escaped) off
// every line of the call's stream text. Sale ids may hold '.', '-', ':' and
// '_' (a pattern's magic characters among them), be one character or 64;
// idempotency keys may hold '|' and text that looks like a tail's line.

// advTailSales are sale ids an escaped pattern could get wrong.
var advTailSales = []string{".", "-", "a.b-c:d_e", "x", strings.Repeat("-", 31) + strings.Repeat(".", 30) + ":_-"}

// advTailKeys are idempotency keys that look like lines of a group value.
func advTailKeys(probeGroup string) []string {
	keys := []string{"0001|x", "0000|p|u9|1|A=9|", "", "ZZZZ", "|0002|", probeGroup + "0003|p|u8|1|A=1|", "", "%.-|" + probeGroup}
	for i, k := range keys {
		keys[i] = k[:min(len(k), inventory.MaxIdempotencyKey)]
	}
	return keys
}

// advTailCheckGroup checks that the orders hash of sale holds exactly one
// field, group g, whose lines are, in order, "<tail>|<record>" of ids.
func advTailCheckGroup(t *testing.T, r *rig, sale string, ids []string) string {
	t.Helper()
	h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
	mustDo(t, err)
	g := inventory.OrderGroup(ids[0])
	if len(h) != 1 || h[g] == "" {
		t.Fatalf("sale %q: orders hash %v, want one field %q", sale, h, g)
	}
	records := inventory.OrderRecords(h)
	got := strings.Split(h[g], "\n")
	if len(got) != len(ids) {
		t.Fatalf("sale %q: group value %q has %d lines, want %d", sale, h[g], len(got), len(ids))
	}
	for i, id := range ids {
		tail := strings.TrimPrefix(id, g)
		if len(tail) != 4 {
			t.Fatalf("order %s is not of group %s", id, g)
		}
		if want := tail + "|" + records[id]; got[i] != want || records[id] == "" {
			t.Errorf("sale %q: line %d = %q, want %q (the group left out of it)", sale, i, got[i], want)
		}
		if strings.HasPrefix(got[i], g) {
			t.Errorf("sale %q: line %d still starts with its group: %q", sale, i, got[i])
		}
	}
	return g
}

// advTailStreamIDs returns the order ids the sale's stream names, line by
// line of its raw entries ("bought" or "orders": "<order id>|<record>").
func advTailStreamIDs(t *testing.T, r *rig, sale string) []string {
	t.Helper()
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(sale), "-", "+").Result()
	mustDo(t, err)
	var ids []string
	for _, m := range msgs {
		group, _ := m.Values["group"].(string) // an entry of "lines" names its orders by tail
		for _, f := range []string{"bought", "orders", "lines"} {
			v, ok := m.Values[f].(string)
			if !ok {
				continue
			}
			for line := range strings.SplitSeq(v, "\n") {
				id, _, _ := strings.Cut(line, "|")
				if f == "lines" {
					id = group + id
				}
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// TestAdvTailMagicSaleIDs: for sale ids of pattern magic characters, one
// character and 64 long, one call of eight buys (keys like lines of a
// group value) writes one group of tail lines, in order; the stream names
// the orders by whole id; every order reads back; every resend after a
// lost reply finds its order and every repeat of a key its own; a cancel
// changes its order alone; the units count; a repair of the sound group
// changes nothing; and, the sale lost and rebuilt from the system of
// record, all of it again.
func TestAdvTailMagicSaleIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		for _, sale := range advTailSales {
			if !inventory.ValidID(sale) || len(sale) > 64 {
				t.Fatalf("sale id %q is not valid", sale)
			}
			*db = recordDB{}
			r.create(inventory.Sale{ID: sale, PerUserLimit: 10, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
			probe := inventory.OrderGroup(inventory.NewOrderID(sale))
			var reqs []inventory.BuyRequest
			for i, k := range advTailKeys(probe) {
				reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1+i), IdempotencyKey: k})
			}
			res := r.eng.BuyMany(r.ctx, reqs)
			var ids []string
			for i, br := range res {
				if br.Err != nil {
					t.Fatalf("sale %q buy %d: %v", sale, i, br.Err)
				}
				ids = append(ids, br.Receipt.Order.ID)
			}
			advTailCheckGroup(t, r, sale, ids)
			if got := advTailStreamIDs(t, r, sale); strings.Join(got, " ") != strings.Join(ids, " ") {
				t.Errorf("sale %q: the stream names orders %v, want %v (whole ids)", sale, got, ids)
			}
			n := 0
			for _, ev := range r.events(sale) {
				if ev.Type == inventory.EventBought {
					if ev.Order.ID != ids[n] || ev.Order.UserID != reqs[n].UserID || ev.Order.IdempotencyKey != reqs[n].IdempotencyKey {
						t.Errorf("sale %q: bought event %d = %+v, want order %s of %s", sale, n, ev.Order, ids[n], reqs[n].UserID)
					}
					n++
				}
			}
			if n != len(ids) {
				t.Errorf("sale %q: %d bought events, want %d", sale, n, len(ids))
			}
			check := func(stage string, cancelled int) {
				t.Helper()
				for i, id := range ids {
					o, err := r.eng.Order(r.ctx, id)
					if err != nil || o.UserID != reqs[i].UserID || o.IdempotencyKey != reqs[i].IdempotencyKey ||
						len(o.Items) != 1 || o.Items[0].Qty != int64(1+i) || (o.Status == inventory.OrderCancelled) != (i == cancelled) {
						t.Errorf("sale %q %s: Order(%s) = %+v, %v; want %s's, %d of A, cancelled %v", sale, stage, id, o, err, reqs[i].UserID, 1+i, i == cancelled)
					}
				}
				before := r.remaining(sale)["A"]
				for i, id := range ids {
					resend := reqs[i]
					resend.OrderID = id
					rc, err := r.eng.BuyWith(r.ctx, resend)
					if err != nil || rc.Order.ID != id || rc.Order.UserID != reqs[i].UserID {
						t.Errorf("sale %q %s: resend %d: %+v, %v; want order %s", sale, stage, i, rc, err, id)
					}
					if reqs[i].IdempotencyKey != "" {
						rc, err := r.eng.BuyWith(r.ctx, reqs[i])
						if err != nil || !rc.Replayed || rc.Order.ID != id {
							t.Errorf("sale %q %s: repeat of key %q: %+v, %v; want order %s", sale, stage, reqs[i].IdempotencyKey, rc, err, id)
						}
					}
				}
				if rem := r.remaining(sale)["A"]; rem != before {
					t.Errorf("sale %q %s: remaining %d after the resends, %d before: a resend bought again", sale, stage, rem, before)
				}
				want := int64(0)
				for i := range ids {
					if i != cancelled {
						want += int64(1 + i)
					}
				}
				if units, err := r.eng.UnitsInOrders(r.ctx, sale); err != nil || units["A"] != want || rem(r, sale) != 1000-want {
					t.Errorf("sale %q %s: UnitsInOrders = %v, %v, remaining %d; want A %d, remaining %d", sale, stage, units, err, rem(r, sale), want, 1000-want)
				}
				if n := len(r.orders(sale)); n != len(ids) {
					t.Errorf("sale %q %s: %d order records, want %d", sale, stage, n, len(ids))
				}
			}
			check("bought", -1)
			if _, err := r.eng.Cancel(r.ctx, ids[3], reqs[3].UserID); err != nil {
				t.Fatalf("sale %q: cancel: %v", sale, err)
			}
			advTailCheckGroup(t, r, sale, ids)
			check("one cancelled", 3)
			db.consume(r, sale)
			if rep, err := r.eng.Repair(r.ctx, sale, db); err != nil || rep.Changed() {
				t.Errorf("sale %q: Repair of a sound group of tails = %+v, %v; want nothing changed", sale, rep, err)
			}
			r.lose(sale, false)
			first := reqs[0]
			first.OrderID = ids[0]
			if rc, err := r.eng.BuyWith(r.ctx, first); err != nil || rc.Order.ID != ids[0] {
				t.Fatalf("sale %q: the first resend after the loss (a rebuild): %+v, %v", sale, rc, err)
			}
			check("rebuilt", 3)
			advTailCheckGroup(t, r, sale, ids)
		}
	})
}

func rem(r *rig, sale string) int64 { return r.remaining(sale)["A"] }

// TestAdvTailMagicSaleIDsPayExpire: the payment step on sale ids of magic
// characters: of one call's orders (one group of tails), a third paid, a
// third cancelled, the rest expired; each record changes on its own line,
// every unit not paid comes back, and
// resends after all that find their orders, buying nothing.
func TestAdvTailMagicSaleIDsPayExpire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		for _, sale := range advTailSales {
			r.create(inventory.Sale{ID: sale, PerUserLimit: 3, PaymentTimeout: time.Minute, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
			probe := inventory.OrderGroup(inventory.NewOrderID(sale))
			var reqs []inventory.BuyRequest
			for i := range 12 {
				keys := advTailKeys(probe)
				reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1+i%3), IdempotencyKey: keys[i%len(keys)]})
			}
			res := r.eng.BuyMany(r.ctx, reqs)
			var ids []string
			for i, br := range res {
				if br.Err != nil {
					t.Fatalf("sale %q buy %d: %v", sale, i, br.Err)
				}
				ids = append(ids, br.Receipt.Order.ID)
			}
			advTailCheckGroup(t, r, sale, ids)
			paid := int64(0)
			for i, id := range ids {
				switch i % 3 {
				case 0:
					if _, _, err := r.eng.Pay(r.ctx, id, reqs[i].UserID, "ref"+id[len(id)-4:]); err != nil {
						t.Fatalf("sale %q: Pay %d: %v", sale, i, err)
					}
					paid += reqs[i].Lines[0].Qty
				case 1:
					if _, err := r.eng.Cancel(r.ctx, id, reqs[i].UserID); err != nil {
						t.Fatalf("sale %q: Cancel %d: %v", sale, i, err)
					}
				}
			}
			r.clock.Set(r.clock.Now().Add(2 * time.Minute))
			var expired []string
			for {
				got, more, err := r.eng.ExpireDue(r.ctx, sale, 3)
				if err != nil {
					t.Fatalf("sale %q: ExpireDue: %v", sale, err)
				}
				expired = append(expired, got...)
				if !more {
					break
				}
			}
			if len(expired) != 4 {
				t.Errorf("sale %q: expired %v, want 4 orders", sale, expired)
			}
			advTailCheckGroup(t, r, sale, ids)
			for i, id := range ids {
				o, err := r.eng.Payment(r.ctx, id)
				if err != nil || o.UserID != reqs[i].UserID || (o.Status == inventory.OrderCancelled) != (i%3 != 0) {
					t.Errorf("sale %q: Payment(%s) = %+v, %v; want %s's, cancelled %v", sale, id, o, err, reqs[i].UserID, i%3 != 0)
				}
			}
			if got := rem(r, sale); got != 1000-paid {
				t.Errorf("sale %q: remaining %d, want %d", sale, got, 1000-paid)
			}
			for i, id := range ids {
				resend := reqs[i]
				resend.OrderID = id
				if rc, err := r.eng.BuyWith(r.ctx, resend); err != nil || rc.Order.ID != id {
					t.Errorf("sale %q: resend %d: %+v, %v; want order %s", sale, i, rc, err, id)
				}
			}
			if units, err := r.eng.UnitsInOrders(r.ctx, sale); err != nil || units["A"] != paid || rem(r, sale) != 1000-paid {
				t.Errorf("sale %q: after the resends UnitsInOrders = %v, %v, remaining %d; want A %d, remaining %d", sale, units, err, rem(r, sale), paid, 1000-paid)
			}
		}
	})
}

// TestAdvTailBigCallOfMagicSale: a crowd's call (hundreds of buys, in as
// many calls as the engine makes of them) on a sale id of magic
// characters only: every group's value is exactly its orders' tail lines
// (the one gsub took every group off, and nothing else), in order; every
// order reads back, and the crowd's resends all find their orders.
func TestAdvTailBigCallOfMagicSale(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		const sale = "-.:_"
		r.create(inventory.Sale{ID: sale, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10000}}})
		var reqs []inventory.BuyRequest
		for i := range 700 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1), IdempotencyKey: fmt.Sprintf("%04d|", i)})
		}
		byGroup := map[string][]string{}
		var ids []string
		for i, br := range r.eng.BuyMany(r.ctx, reqs) {
			if br.Err != nil {
				t.Fatalf("buy %d: %v", i, br.Err)
			}
			id := br.Receipt.Order.ID
			ids = append(ids, id)
			byGroup[inventory.OrderGroup(id)] = append(byGroup[inventory.OrderGroup(id)], id)
		}
		h, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
		mustDo(t, err)
		if len(h) != len(byGroup) {
			t.Errorf("%d fields for %d groups", len(h), len(byGroup))
		}
		records := inventory.OrderRecords(h)
		for g, gids := range byGroup {
			var want []string
			for _, id := range gids {
				want = append(want, strings.TrimPrefix(id, g)+"|"+records[id])
			}
			if w := strings.Join(want, "\n"); h[g] != w {
				t.Errorf("group %s:\n%.300q\nwant\n%.300q", g, h[g], w)
			}
		}
		for i, id := range ids {
			if rec := records[id]; !strings.HasPrefix(rec, "p|"+reqs[i].UserID+"|") || !strings.HasSuffix(rec, "|"+reqs[i].IdempotencyKey) {
				t.Errorf("order %d %s: record %q", i, id, rec)
			}
		}
		for i := range reqs {
			reqs[i].OrderID = ids[i]
			reqs[i].IdempotencyKey = ""
		}
		for i, br := range r.eng.BuyMany(r.ctx, reqs) {
			if br.Err != nil || br.Receipt.Order.ID != ids[i] {
				t.Errorf("resend %d: %+v, %v; want order %s", i, br.Receipt, br.Err, ids[i])
			}
		}
		if got := rem(r, sale); got != 10000-700 {
			t.Errorf("remaining %d after the resends, want %d", got, 10000-700)
		}
	})
}

// TestAdvTailLostCallOfMagicSale: on sale ids of magic characters, a call
// of twenty buys runs but its reply is lost; the engine sends them again,
// and each finds its order in the group the lost call wrote with its one
// gsub (Retried), buying nothing twice; the group holds the twenty tail
// lines once each.
func TestAdvTailLostCallOfMagicSale(t *testing.T) {
	for _, sale := range []string{"-", ".", "a.b-c:d_e", strings.Repeat(":", 64)} {
		t.Run(sale, func(t *testing.T) {
			rdb, b := advSingle(t)
			r := newRig(t, b, inventory.Options{})
			r.create(inventory.Sale{ID: sale, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
			if _, err := r.eng.Buy(r.ctx, sale, "w0", lines("A", 1), ""); err != nil { // loads the script
				t.Fatal(err)
			}
			f := &lostPipeline{}
			f.armed.Store(true)
			rdb.AddHook(f)
			var reqs []inventory.BuyRequest
			for i := range 20 {
				reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d", i), Lines: lines("A", 1), IdempotencyKey: fmt.Sprintf("%04d|", i)})
			}
			var ids []string
			for i, br := range r.eng.BuyMany(r.ctx, reqs) {
				if br.Err != nil || !br.Receipt.Retried {
					t.Fatalf("buy %d: %+v, %v; want its order found again (Retried)", i, br.Receipt, br.Err)
				}
				ids = append(ids, br.Receipt.Order.ID)
			}
			if f.armed.Load() {
				t.Fatal("the call's reply was not lost")
			}
			if got := rem(r, sale); got != 79 {
				t.Errorf("remaining %d, want 79: a resend bought again", got)
			}
			g := inventory.OrderGroup(ids[0])
			v, err := r.rdb.HGet(r.ctx, r.key(sale, "orders"), g).Result()
			mustDo(t, err)
			records := r.orders(sale)
			var want []string
			for _, id := range ids {
				want = append(want, strings.TrimPrefix(id, g)+"|"+records[id])
			}
			if w := strings.Join(want, "\n"); v != w || len(records) != 21 {
				t.Errorf("the lost call's group (%d records):\n%q\nwant\n%q", len(records), v, w)
			}
		})
	}
}
