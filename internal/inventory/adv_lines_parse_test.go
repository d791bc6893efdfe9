package inventory_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// advLinesRec is a record line by tail as buy.lua writes it.
func advLinesRec(tail, user string) string {
	return tail + "|p|" + user + "|1700000000000|A=1,B=2|k-" + user
}

// TestAdvLinesParseHostile: entries of fields "group" and "lines" that the
// engine could not have written. Each bad line is a dead letter of its own,
// under the id buy.lua gave it (<ms>-<seq+k>), whose one field "bought" is
// the group and the line (the whole order id, when the group is there);
// every other line decodes to its whole id.
func TestAdvLinesParseHostile(t *testing.T) {
	for _, sale := range []string{"s1", "a.b-c:d", "x:y", "p-q.r", "a..b", "_._"} {
		g := inventory.OrderGroup(inventory.NewOrderID(sale))
		cases := []struct {
			name    string
			values  map[string]any
			good    []string // the whole ids that decode, in order, with their stream ids
			bad     []string // the stream ids of the dead letters
			badWhat []string // their "bought"
		}{
			{"no group", map[string]any{"lines": advLinesRec("0000", "u1") + "\n" + advLinesRec("0001", "u2")},
				nil, []string{"5-7", "5-8"}, []string{advLinesRec("0000", "u1"), advLinesRec("0001", "u2")}},
			{"empty group", map[string]any{"group": "", "lines": advLinesRec("0000", "u1") + "\n" + advLinesRec("0001", "u2")},
				nil, []string{"5-7", "5-8"}, []string{advLinesRec("0000", "u1"), advLinesRec("0001", "u2")}},
			{"tail of 3", map[string]any{"group": g, "lines": advLinesRec("0000", "u1") + "\n" + advLinesRec("001", "u2") + "\n" + advLinesRec("0002", "u3")},
				[]string{"5-7 " + g + "0000", "5-9 " + g + "0002"}, []string{"5-8"}, []string{g + advLinesRec("001", "u2")}},
			{"tail of 5", map[string]any{"group": g, "lines": advLinesRec("00000", "u1") + "\n" + advLinesRec("0001", "u2")},
				[]string{"5-8 " + g + "0001"}, []string{"5-7"}, []string{g + advLinesRec("00000", "u1")}},
			{"no bar", map[string]any{"group": g, "lines": advLinesRec("0000", "u1") + "\n" + "0001p-u2-1700000000000"},
				[]string{"5-7 " + g + "0000"}, []string{"5-8"}, []string{g + "0001p-u2-1700000000000"}},
			{"empty lines", map[string]any{"group": g, "lines": ""},
				nil, []string{"5-7"}, []string{g}},
			{"empty line inside", map[string]any{"group": g, "lines": advLinesRec("0000", "u1") + "\n\n" + advLinesRec("0002", "u3")},
				[]string{"5-7 " + g + "0000", "5-9 " + g + "0002"}, []string{"5-8"}, []string{g}},
			{"bad record", map[string]any{"group": g, "lines": advLinesRec("0000", "u1") + "\n" + "0001|p|u2|notatime|A=1|"},
				[]string{"5-7 " + g + "0000"}, []string{"5-8"}, []string{g + "0001|p|u2|notatime|A=1|"}},
		}
		for _, c := range cases {
			t.Run(sale+"/"+c.name, func(t *testing.T) {
				msg := redis.XMessage{ID: "5-7", Values: c.values}
				if !inventory.HoldsOrders(msg) {
					t.Fatalf("HoldsOrders(%v) = false", msg)
				}
				evs, bads := inventory.ParseEntry(nil, sale, msg)
				var got []string
				for _, ev := range evs {
					got = append(got, ev.ID+" "+ev.Order.ID)
					if s, err := inventory.SaleOfOrder(ev.Order.ID); err != nil || s != sale || ev.Order.SaleID != sale {
						t.Errorf("order %s decoded: sale %q (%v), event's %q", ev.Order.ID, s, err, ev.Order.SaleID)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(c.good) {
					t.Errorf("decoded %v, want %v", got, c.good)
				}
				if len(bads) != len(c.bad) {
					t.Fatalf("bad %+v, want ids %v", bads, c.bad)
				}
				for i, b := range bads {
					if b.ID != c.bad[i] || len(b.Values) != 1 || b.Values["bought"] != c.badWhat[i] || !errors.Is(b.Err, inventory.ErrCorrupt) {
						t.Errorf("bad %d: %s %v (%v), want %s bought %q, corrupt", i, b.ID, b.Values, b.Err, c.bad[i], c.badWhat[i])
					}
				}
			})
		}
	}
}

// TestAdvLinesDeadLetterRoundTrip: an order of an entry by tail that the
// database refuses is dead-lettered as inventory.OrderEntry: an entry of
// its own, field "bought", whose order is the whole id with the very
// record; read back (a replay), it decodes to the same order. So does a
// line of the entry that does not decode once its record is mended.
func TestAdvLinesDeadLetterRoundTrip(t *testing.T) {
	for _, sale := range []string{"s1", "a.b-c:d"} {
		g := inventory.OrderGroup(inventory.NewOrderID(sale))
		lines := []string{
			"0000|p|u1|1700000000001|A=1|",
			"ZZZZ|p|u:2|1700000000002|A=3,B=1|key.2",
			"00A0|p|u-3|1700000000003|B=7|k:e-y_3",
		}
		msg := redis.XMessage{ID: "1700000000003-0", Values: map[string]any{"group": g, "lines": strings.Join(lines, "\n")}}
		evs, bads := inventory.ParseEntry(nil, sale, msg)
		if len(evs) != 3 || len(bads) != 0 {
			t.Fatalf("%s: decoded %+v, bad %+v", sale, evs, bads)
		}
		for k, ev := range evs {
			tail, rec, _ := strings.Cut(lines[k], "|")
			if ev.Order.ID != g+tail || ev.ID != fmt.Sprintf("1700000000003-%d", k) {
				t.Errorf("event %d: %s order %s, want order %s", k, ev.ID, ev.Order.ID, g+tail)
			}
			letter := inventory.OrderEntry(ev)
			if letter["bought"] != g+tail+"|"+rec {
				t.Errorf("dead letter of %s: %v, want bought %q", ev.Order.ID, letter, g+tail+"|"+rec)
			}
			again, bad := inventory.ParseEntry(nil, sale, redis.XMessage{ID: "1800000000000-5", Values: letter})
			if len(again) != 1 || len(bad) != 0 || !reflect.DeepEqual(again[0].Order, ev.Order) || again[0].ID != "1800000000000-5" {
				t.Errorf("replay of %v: %+v, bad %+v; want %+v", letter, again, bad, ev.Order)
			}
			one, err := inventory.ParseEvent(sale, redis.XMessage{ID: "9-9", Values: map[string]any{"group": g, "lines": lines[k]}})
			if err != nil || !reflect.DeepEqual(one.Order, ev.Order) {
				t.Errorf("ParseEvent of line %d alone: %+v, %v", k, one, err)
			}
		}
		if _, err := inventory.ParseEvent(sale, msg); !errors.Is(err, inventory.ErrSeveralEvents) {
			t.Errorf("ParseEvent of the entry of 3: %v", err)
		}
		for _, bad := range []map[string]any{{"lines": lines[0]}, {"group": "", "lines": lines[0]}, {"group": g, "lines": "000|p|u1|1700000000001|A=1|"}} {
			if _, err := inventory.ParseEvent(sale, redis.XMessage{ID: "9-9", Values: bad}); !errors.Is(err, inventory.ErrCorrupt) {
				t.Errorf("ParseEvent(%v): %v, want corrupt", bad, err)
			}
		}
	}
}

// TestAdvLinesTokens: an entry by tail whose "tokens" names (by whole id)
// some of its orders gives each its token, and none to the others; a
// tokens line for a line that does not decode leaves the others' tokens
// alone; a tokens line naming an order by its tail names nothing.
func TestAdvLinesTokens(t *testing.T) {
	sale := "a.b-c:d"
	g := inventory.OrderGroup(inventory.NewOrderID(sale))
	lines := advLinesRec("0000", "u1") + "\n" + advLinesRec("0001", "u2") + "\n" + "0002|p|u3|bad|A=1|" + "\n" + advLinesRec("0003", "u4")
	tokens := g + "0001|tokA|1700000009000\n" + g + "0002|tokB|1700000009001\n" + g + "0003|tokC|1700000009002"
	evs, bads := inventory.ParseEntry(nil, sale, redis.XMessage{ID: "3-0", Values: map[string]any{"group": g, "lines": lines, "tokens": tokens}})
	if len(evs) != 3 || len(bads) != 1 || bads[0].ID != "3-2" || bads[0].Values["bought"] != g+"0002|p|u3|bad|A=1|" {
		t.Fatalf("decoded %+v, bad %+v", evs, bads)
	}
	want := map[string]inventory.SpentToken{
		g + "0001": {Token: "tokA", UserID: "u2", OrderID: g + "0001", Until: time.UnixMilli(1700000009000).UTC()},
		g + "0003": {Token: "tokC", UserID: "u4", OrderID: g + "0003", Until: time.UnixMilli(1700000009002).UTC()},
	}
	for _, ev := range evs {
		if ev.Spent != want[ev.Order.ID] {
			t.Errorf("order %s spent %+v, want %+v", ev.Order.ID, ev.Spent, want[ev.Order.ID])
		}
		// its dead letter (the database refusing it) keeps its token, and
		// replayed gives it back
		again, bad := inventory.ParseEntry(nil, sale, redis.XMessage{ID: "4-0", Values: inventory.OrderEntry(ev)})
		if len(again) != 1 || len(bad) != 0 || again[0].Spent != ev.Spent || again[0].Order.ID != ev.Order.ID {
			t.Errorf("replay of order %s's dead letter %v: %+v, bad %+v", ev.Order.ID, inventory.OrderEntry(ev), again, bad)
		}
	}
	// the bad line's dead letter keeps its token line
	if tl := bads[0].Values["tokens"]; tl != g+"0002|tokB|1700000009001" || len(bads[0].Values) != 2 {
		t.Errorf("dead letter of the bad line: %v, want its tokens line", bads[0].Values)
	}
	// a token line by tail: no order of the entry is "0001"
	evs, bads = inventory.ParseEntry(nil, sale, redis.XMessage{ID: "3-0", Values: map[string]any{"group": g, "lines": lines, "tokens": "0001|tokA|1700000009000"}})
	for _, ev := range evs {
		if ev.Spent.Token != "" {
			t.Errorf("order %s given %+v by a line naming a tail", ev.Order.ID, ev.Spent)
		}
	}
	if len(evs) != 3 || len(bads) != 1 {
		t.Fatalf("decoded %+v, bad %+v", evs, bads)
	}
	// a corrupt tokens field: every order of the entry is a dead letter, whole
	evs, bads = inventory.ParseEntry(nil, sale, redis.XMessage{ID: "3-0", Values: map[string]any{"group": g, "lines": lines, "tokens": "garbage"}})
	if len(evs) != 0 || len(bads) != 4 {
		t.Fatalf("corrupt tokens: decoded %+v, bad %+v", evs, bads)
	}
	for _, b := range bads {
		v, _ := b.Values["bought"].(string)
		if !strings.HasPrefix(v, g) || len(strings.SplitN(v, "|", 2)[0]) != len(g)+4 {
			t.Errorf("dead letter %s: %v: not by whole id", b.ID, b.Values)
		}
	}
}

// TestAdvLinesEngineEntries (Redis, Cluster): BuyMany calls on sales whose
// ids have '.', '-' and ':' write one entry by tail per call, whose group
// is the orders' and whose lines are the text the call added to the
// group's value; decoded, the stream's orders are the receipts', by whole
// id, each with the id buy.lua gave it. A call of 2,000 buys is one entry
// of 2,000 lines.
func TestAdvLinesEngineEntries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.name == "miniredis" {
			t.Skip("one entry per order on the embedded server")
		}
		r := newRig(t, b, inventory.Options{Coalesce: inventory.Coalesce{MaxBatch: 2000}})
		for _, sale := range []string{"a.b-c:d", "x:y:z", "s-1.2"} {
			r.create(inventory.Sale{ID: sale, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 10_000}}})
			var receipts []inventory.Order
			for _, n := range []int{2, 7, 2000} {
				reqs := make([]inventory.BuyRequest, n)
				for i := range reqs {
					reqs[i] = inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprintf("u%d-%d", n, i), Lines: []inventory.Line{{SKU: "A", Qty: 1}}}
				}
				for _, res := range r.eng.BuyMany(r.ctx, reqs) {
					if res.Err != nil {
						t.Fatal(res.Err)
					}
					receipts = append(receipts, res.Receipt.Order)
				}
			}
			msgs, last := r.streamInfo(sale)
			if len(msgs) != 4 { // created, 3 calls
				t.Fatalf("%s: %d entries, want 4", sale, len(msgs))
			}
			groups, err := r.rdb.HGetAll(r.ctx, r.key(sale, "orders")).Result()
			if err != nil {
				t.Fatal(err)
			}
			at := 0
			for i, n := range []int{2, 7, 2000} {
				m := msgs[i+1]
				g := inventory.OrderGroup(receipts[at].ID)
				if m.Values["group"] != g || m.Values["orders"] != nil || len(m.Values) != 2 {
					t.Fatalf("%s: entry %s: fields %v, want group %s and lines", sale, m.ID, keysOf(m.Values), g)
				}
				if lines := m.Values["lines"].(string); groups[g] != lines || strings.Count(lines, "\n") != n-1 {
					t.Fatalf("%s: entry %s: %d lines; the group's value differs: %v", sale, m.ID, strings.Count(lines, "\n")+1, groups[g] != lines)
				}
				evs, bad := inventory.ParseEntry(nil, sale, m)
				ms, seq := inventory.SplitEventID(m.ID)
				if len(evs) != n || len(bad) != 0 {
					t.Fatalf("%s: entry %s: %d events, bad %v", sale, m.ID, len(evs), bad)
				}
				for k, ev := range evs {
					if ev.Order.ID != receipts[at+k].ID || ev.ID != fmt.Sprintf("%d-%d", ms, seq+uint64(k)) || ev.Order.UserID != receipts[at+k].UserID {
						t.Fatalf("%s: order %d of entry %s: %s %s, want %s", sale, k, m.ID, ev.ID, ev.Order.ID, receipts[at+k].ID)
					}
				}
				if i == 2 && last != evs[n-1].ID {
					t.Fatalf("%s: last generated id %s, want the last order's %s", sale, last, evs[n-1].ID)
				}
				at += n
			}
		}
	})
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
