package inventory_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// buyUsers buys one unit of sku A for each user in one BuyMany call (one
// script call) and returns the orders, in order.
func (r *rig) buyUsers(users ...string) []inventory.Order {
	r.t.Helper()
	reqs := make([]inventory.BuyRequest, len(users))
	for i, u := range users {
		reqs[i] = inventory.BuyRequest{SaleID: "s1", UserID: u, Lines: []inventory.Line{{SKU: "A", Qty: 1}}}
	}
	var out []inventory.Order
	for i, res := range r.eng.BuyMany(r.ctx, reqs) {
		if res.Err != nil {
			r.t.Fatalf("buy of %s: %v", users[i], res.Err)
		}
		out = append(out, res.Receipt.Order)
	}
	return out
}

// streamInfo returns the stream's entries and last generated id.
func (r *rig) streamInfo(sale string) ([]redis.XMessage, string) {
	r.t.Helper()
	key := r.eng.EventsKey(sale)
	msgs, err := r.rdb.XRange(r.ctx, key, "-", "+").Result()
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := r.rdb.XInfoStream(r.ctx, key).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return msgs, info.LastGeneratedID
}

// checkBoughtIDs checks that the stream's bought events are the orders, in
// order, with ids strictly ascending, and that the last of them is the
// stream's last generated id.
func checkBoughtIDs(t *testing.T, evs []inventory.Event, orders []inventory.Order, last string) {
	t.Helper()
	var bought []inventory.Event
	for _, ev := range evs {
		if ev.Type == inventory.EventBought {
			bought = append(bought, ev)
		}
	}
	if len(bought) != len(orders) {
		t.Fatalf("%d bought events, want %d: %+v", len(bought), len(orders), bought)
	}
	for i, ev := range bought {
		if ev.Order.ID != orders[i].ID || ev.Order.UserID != orders[i].UserID {
			t.Fatalf("bought event %d is order %s of %s, want %s of %s", i, ev.Order.ID, ev.Order.UserID, orders[i].ID, orders[i].UserID)
		}
		if i > 0 && inventory.CompareEventIDs(ev.ID, bought[i-1].ID) <= 0 {
			t.Fatalf("event ids not ascending: %s after %s", ev.ID, bought[i-1].ID)
		}
	}
	if got := bought[len(bought)-1].ID; got != last {
		t.Fatalf("last order's event id %s, stream's last generated id %s", got, last)
	}
}

// TestBuyStreamEntries: a buy.lua call of several bought orders appends one
// entry for them on Redis (whose last id it moves to the last order's), one
// per order on the embedded server and with EntryPerOrder; a call of one
// order appends today's one-field entry; either way every order decodes
// with an id of its own, and later entries come after them all.
func TestBuyStreamEntries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, perOrder := range []bool{false, true} {
			t.Run(fmt.Sprintf("perOrder=%v", perOrder), func(t *testing.T) {
				r := newRig(t, b, inventory.Options{EntryPerOrder: perOrder})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
				orders := r.buyUsers("u1", "u2", "u3", "u4", "u5")
				msgs, last := r.streamInfo("s1")
				batched := b.name != "miniredis" && !perOrder
				if batched {
					if len(msgs) != 2 || !inventory.HoldsOrders(msgs[1]) {
						t.Fatalf("stream %v: want created and one entry of the 5 orders", msgs)
					}
					// by tail: the call's lines of its group's value, and the group
					if g := msgs[1].Values["group"]; g != inventory.OrderGroup(orders[0].ID) || msgs[1].Values["lines"] == nil {
						t.Fatalf("entry %v: want the orders' group %s and their lines", msgs[1], inventory.OrderGroup(orders[0].ID))
					}
					ms, seq := inventory.SplitEventID(msgs[1].ID)
					if want := fmt.Sprintf("%d-%d", ms, seq+4); last != want {
						t.Fatalf("last generated id %s, want %s (the entry %s's 5th order)", last, want, msgs[1].ID)
					}
				} else if len(msgs) != 6 {
					t.Fatalf("stream %v: want created and an entry per order", msgs)
				}
				checkBoughtIDs(t, r.events("s1"), orders, last)

				// One order: an entry by tail of it, whatever the mode.
				orders = append(orders, r.buyUsers("u6")...)
				msgs, last = r.streamInfo("s1")
				want := orders[len(orders)-1].ID
				if m := msgs[len(msgs)-1]; len(m.Values) != 2 || m.Values["group"] != inventory.OrderGroup(want) ||
					!strings.HasPrefix(fmt.Sprint(m.Values["lines"]), strings.TrimPrefix(want, inventory.OrderGroup(want))+"|p|u6|") || m.ID != last {
					t.Fatalf("entry of one order %v, last generated id %s", m, last)
				}
				// A later entry of any kind comes after every order.
				orders = append(orders, r.buyUsers("u7", "u8")...)
				if _, err := r.eng.Restock(r.ctx, "s1", "A", 1); err != nil {
					t.Fatal(err)
				}
				msgs, last = r.streamInfo("s1")
				evs := r.events("s1")
				if evs[len(evs)-1].Type != inventory.EventRestocked || evs[len(evs)-1].ID != last {
					t.Fatalf("last event %+v, last generated id %s", evs[len(evs)-1], last)
				}
				checkBoughtIDs(t, evs[:len(evs)-1], orders, evs[len(evs)-2].ID)
			})
		}
	})
}

// TestEmbeddedServerHasNoXSETID: why the embedded server gets an entry per
// order.
func TestEmbeddedServerHasNoXSETID(t *testing.T) {
	for _, b := range backends {
		if b.name != "miniredis" {
			continue
		}
		r := newRig(t, b, inventory.Options{})
		key := r.eng.EventsKey("s1")
		id, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: key, Values: []any{"a", "1"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms, seq := inventory.SplitEventID(id)
		if err := r.rdb.Do(r.ctx, "XSETID", key, fmt.Sprintf("%d-%d", ms, seq+3)).Err(); err == nil {
			t.Fatal("the embedded server has XSETID now: buy.lua may write one entry per call there")
		}
	}
}

// TestBuyStreamEntrySeqUnsafe: a stream whose last id's sequence is too
// large for Lua's doubles, or leaves no room for the call's orders below
// 2^64, gets an entry per order instead; a large one that still adds up
// exactly gets one entry.
func TestBuyStreamEntrySeqUnsafe(t *testing.T) {
	for _, b := range backends {
		if b.name != "redis" {
			continue
		}
		for _, tc := range []struct {
			name    string
			seq     string // the stream's last id's sequence, set by hand
			batched bool
		}{
			{"15 digits", "999999999999990", true},
			{"16 digits", "9007199254740990", false}, // 2^53 - 2
			{"below 2^64", "18446744073709551612", false},
			{"2^64-1", "18446744073709551615", true}, // '*' moves to the next ms, seq 0
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
				key := r.eng.EventsKey("s1")
				_, created := r.streamInfo("s1")
				ms, _ := inventory.SplitEventID(created)
				// An hour ahead: every '*' id of the test is in that ms.
				future := strconv.FormatUint(ms+3_600_000, 10)
				if err := r.rdb.Do(r.ctx, "XSETID", key, future+"-"+tc.seq).Err(); err != nil {
					t.Fatal(err)
				}
				orders := r.buyUsers("u1", "u2", "u3", "u4")
				msgs, last := r.streamInfo("s1")
				several := 0
				for _, m := range msgs {
					if inventory.HoldsOrders(m) {
						several++
					}
				}
				if tc.batched && (len(msgs) != 2 || several != 1) || !tc.batched && (len(msgs) != 5 || several != 0) {
					t.Fatalf("stream %v: batched %v", msgs, tc.batched)
				}
				evs := r.events("s1")
				checkBoughtIDs(t, evs, orders, last)
				if tc.batched && tc.seq == "999999999999990" {
					for i, ev := range evs[1:] {
						if want := future + "-" + strconv.Itoa(999999999999991+i); ev.ID != want {
							t.Fatalf("order %d's id %s, want %s", i, ev.ID, want)
						}
					}
				}
				// The stream goes on after them.
				more := r.buyUsers("u5", "u6")
				_, last = r.streamInfo("s1")
				checkBoughtIDs(t, r.events("s1"), append(orders, more...), last)
			})
		}
	}
}

// TestParseEntry: an entry of several orders decodes to one event per
// order with consecutive ids; a stream of old entries (typed, one-field)
// and new ones decodes alike; an order that does not decode is left out
// alone, under its own id, as an entry of its own; an order whose id would
// pass 2^64-1 has none.
func TestParseEntry(t *testing.T) {
	rec := func(id, user string) string { return id + "|p|" + user + "|1700000000000|A=1|" }
	msgs := []redis.XMessage{
		{ID: "5-0", Values: map[string]any{"type": "bought", "at": "1700000000000", "order": "o1", "user": "u1", "items": "A=1", "key": ""}},
		{ID: "5-1", Values: map[string]any{"bought": rec("o2", "u2")}},
		{ID: "6-3", Values: map[string]any{"orders": rec("o3", "u3") + "\n" + rec("o4", "u4") + "\n" + rec("o5", "u5")}},
		{ID: "7-0", Values: map[string]any{"type": "paused", "at": "1700000000001"}},
	}
	evs, err := inventory.ParseEntries("s1", msgs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.ID+":"+string(ev.Type)+":"+ev.Order.ID)
	}
	want := "5-0:bought:o1 5-1:bought:o2 6-3:bought:o3 6-4:bought:o4 6-5:bought:o5 7-0:paused:"
	if strings.Join(got, " ") != want {
		t.Fatalf("decoded %v, want %s", got, want)
	}
	if _, err := inventory.ParseEvent("s1", msgs[2]); !errors.Is(err, inventory.ErrSeveralEvents) {
		t.Fatalf("ParseEvent of an entry of 3 orders: %v", err)
	}

	bad := redis.XMessage{ID: "9-7", Values: map[string]any{"orders": rec("o6", "u6") + "\nnot a record\n" + rec("o8", "u8")}}
	evs, bads := inventory.ParseEntry(nil, "s1", bad)
	if len(evs) != 2 || evs[0].ID != "9-7" || evs[1].ID != "9-9" || evs[1].Order.ID != "o8" {
		t.Fatalf("decoded %+v", evs)
	}
	if len(bads) != 1 || bads[0].ID != "9-8" || bads[0].Values["bought"] != "not a record" || !errors.Is(bads[0].Err, inventory.ErrCorrupt) {
		t.Fatalf("bad %+v", bads)
	}

	top := redis.XMessage{ID: "9-18446744073709551614", Values: map[string]any{"orders": rec("o1", "u1") + "\n" + rec("o2", "u2") + "\n" + rec("o3", "u3")}}
	evs, bads = inventory.ParseEntry(nil, "s1", top)
	if len(evs) != 2 || evs[1].ID != "9-18446744073709551615" || len(bads) != 1 || !errors.Is(bads[0].Err, inventory.ErrCorrupt) {
		t.Fatalf("decoded %+v, bad %+v", evs, bads)
	}
}

// TestParseEntryByTail: an entry of several orders of one group ("group",
// "lines") names each by its tail, and decodes to the orders' whole ids,
// one event each; its one order alone is ParseEvent's. A line whose tail
// is not four characters, or an entry without its group, is corrupt: the
// order is a dead letter under its own id with its line as the group
// wrote it, and the others decode.
func TestParseEntryByTail(t *testing.T) {
	const g = "s1.01M8MND0A9RK2K8HVVPNSQ"
	rec := func(tail, user string) string { return tail + "|p|" + user + "|1700000000000|A=1|" }
	entry := redis.XMessage{ID: "6-3", Values: map[string]any{"group": g,
		"lines": rec("0000", "u3") + "\n" + rec("0001", "u4") + "\n" + rec("0002", "u5")}}
	evs, bads := inventory.ParseEntry(nil, "s1", entry)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.ID+":"+ev.Order.ID+":"+ev.Order.UserID)
	}
	want := "6-3:" + g + "0000:u3 6-4:" + g + "0001:u4 6-5:" + g + "0002:u5"
	if strings.Join(got, " ") != want || len(bads) != 0 {
		t.Fatalf("decoded %v (bad %v), want %s", got, bads, want)
	}
	if !inventory.HoldsOrders(entry) {
		t.Error("HoldsOrders of an entry by tail: false")
	}
	one := redis.XMessage{ID: "7-0", Values: map[string]any{"group": g, "lines": rec("000Z", "u6")}}
	if ev, err := inventory.ParseEvent("s1", one); err != nil || ev.Order.ID != g+"000Z" || ev.Order.UserID != "u6" {
		t.Errorf("ParseEvent of one order by tail: %+v, %v", ev, err)
	}

	bad := redis.XMessage{ID: "9-7", Values: map[string]any{"group": g,
		"lines": rec("0000", "u6") + "\n" + rec("00001", "u7") + "\n" + rec("0002", "u8")}}
	evs, bads = inventory.ParseEntry(nil, "s1", bad)
	if len(evs) != 2 || evs[0].Order.ID != g+"0000" || evs[1].ID != "9-9" || evs[1].Order.ID != g+"0002" {
		t.Fatalf("decoded %+v", evs)
	}
	if len(bads) != 1 || bads[0].ID != "9-8" || bads[0].Values["bought"] != g+rec("00001", "u7") || !errors.Is(bads[0].Err, inventory.ErrCorrupt) {
		t.Fatalf("bad %+v", bads)
	}
	lost := redis.XMessage{ID: "9-20", Values: map[string]any{"lines": rec("0000", "u6")}}
	if evs, bads := inventory.ParseEntry(nil, "s1", lost); len(evs) != 0 || len(bads) != 1 || !errors.Is(bads[0].Err, inventory.ErrCorrupt) {
		t.Fatalf("an entry by tail without its group: %+v, bad %+v", evs, bads)
	}
}
