package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/luascript"
	"github.com/seckill/seckill/internal/redistest"
)

// Adversarial, differential tests of the orders hash's group values whose
// lines name their orders by tail ("<tail>|<record>") or, written before
// that, by whole id ("<order id>|<record>"): what order.lua's order_in,
// group_sound, order_get and order_put read and write must be what Go's
// recordIn, lineOrder and groupOrders read, on every value, sound or not
// (a divergence is a store Go and the scripts disagree about).

// advTailProbe runs order.lua's functions on a group value stored at
// KEYS[1] field ARGV[1] (the group): order_get of ARGV[2] (an order id),
// group_sound of the value, then, if it found the order, order_put of
// ARGV[3] as its record. Reply: {found, record, sound, where} where is
// "group" or "own".
var advTailProbe = luascript.New("advtailprobe", intSrc+"\n"+orderSrc+"\n"+`
local v = redis.call('HGET', KEYS[1], ARGV[1])
local sound = 0
if v and group_sound(ARGV[1], v) then sound = 1 end
local rec, gv, s, e = order_get(KEYS[1], ARGV[2])
if not rec then return {0, '', sound, ''} end
local where = 'own'
if s then where = 'group' end
order_put(KEYS[1], ARGV[2], ARGV[3], gv, s, e)
return {1, rec, sound, where}
`)

// advTailSound is Go's reading of group_sound: every line of v is an
// order of group g (lineOrder).
func advTailSound(g, v string) bool {
	for line := range strings.SplitSeq(v, "\n") {
		if _, _, ok := lineOrder(g, line); !ok {
			return false
		}
	}
	return true
}

// advTailValue builds a random, often hostile, value of group g: tail
// lines and whole-id lines of orders of g (some twice, in both forms),
// whole-id lines of another group with the same tails, lines whose record
// holds text that looks like a line ("<tail>|", "<id>|"), and garbage.
func advTailValue(rng *rand.Rand, g, other string, tails []string) string {
	rec := func() string {
		keys := []string{"", "k", tails[rng.IntN(len(tails))] + "|x",
			tails[rng.IntN(len(tails))] + "|p|u|1|A=1|", g + tails[rng.IntN(len(tails))] + "|c|v|2|A=2|",
			"|" + tails[rng.IntN(len(tails))] + "|", "%p%%%0", "\r" + tails[0] + "|"}
		st := []string{"p", "c"}[rng.IntN(2)]
		return fmt.Sprintf("%s|u%d|%d|A=%d|%s", st, rng.IntN(100), rng.IntN(1000), 1+rng.IntN(9), keys[rng.IntN(len(keys))])
	}
	n := 1 + rng.IntN(6)
	lines := make([]string, 0, n)
	for range n {
		t := tails[rng.IntN(len(tails))]
		var line string
		switch k := rng.IntN(20); {
		case k < 8:
			line = t + "|" + rec()
		case k < 13:
			line = g + t + "|" + rec()
		case k < 15:
			line = other + t + "|" + rec()
		case k == 15:
			line = []string{"", "|", t, t + "x|" + rec(), t[:3] + "|" + rec(), g, g + "|" + rec()}[rng.IntN(7)]
		case k == 16:
			line = g + t + t + "|" + rec() // an id one tail too long
		case k == 17:
			line = "x" + t + "|" + rec() // a tail one character too long
		default:
			line = t + "|" + t + "|" + rec() // a record starting like a line
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// TestAdvTailOrderLuaAgreesWithGo: on thousands of random group values of
// groups whose sale ids hold every character a sale id may have (the
// pattern's magic ones included), order_get finds exactly the record
// recordOf finds (none when it finds none), group_sound says sound exactly
// when every line is an order of the group, and order_put changes the
// record recordOf then reads and no other order's record (as
// groupOrders reads them, first line of each). On Redis and on the
// embedded server (gopher-lua).
func TestAdvTailOrderLuaAgreesWithGo(t *testing.T) {
	sales := []string{"s1", ".", "-", ":", "_", "a.b-c:d_e", strings.Repeat("-.", 32), "x%"[:1]}
	tails := []string{"0000", "0001", "ZZZZ", "0A0B", "AAAA"}
	for _, srv := range redistest.SingleBackends() {
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.Client(t)
			prefix := redistest.Prefix(t, rdb)
			cases := 1500
			if srv.Name == "miniredis" {
				cases = 800
			}
			seed := uint64(20261129)
			stats := map[string]int{}
			for c := range cases {
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				sale := sales[rng.IntN(len(sales))]
				id0 := NewOrderID(sale)
				g := orderGroup(id0)
				other := orderGroup(NewOrderID(sale))
				if other == g {
					other = g[:len(g)-1] + "Q"
				}
				v := advTailValue(rng, g, other, tails)
				id := g + tails[rng.IntN(len(tails))]
				key := "{" + prefix + "}:orders"
				mustNil(t, rdb.Del(ctx, key).Err())
				mustNil(t, rdb.HSet(ctx, key, g, v).Err())
				own := ""
				if rng.IntN(4) == 0 { // an own field of the order too
					own = "p|own|5|A=1|"
					mustNil(t, rdb.HSet(ctx, key, id, own).Err())
				}
				goRec, goFound := recordOf(id, []any{v, own})
				before := map[string]string{}
				groupOrders(g, v, before)
				newRec := fmt.Sprintf("c|new%d|7|A=3|%s|", c, tails[1])

				res, _, err := luascript.Run(ctx, rdb, advTailProbe, []string{key}, g, id, newRec)
				if err != nil {
					t.Fatalf("case %d: %v", c, err)
				}
				r := res.([]any)
				luaFound, luaRec := r[0].(int64) == 1, r[1].(string)
				luaSound := r[2].(int64) == 1
				where := r[3].(string)
				if luaFound != goFound || luaRec != goRec {
					t.Errorf("case %d: order %s in %q (own %q): Lua finds %v %q, Go %v %q", c, id, v, own, luaFound, luaRec, goFound, goRec)
					continue
				}
				if want := advTailSound(g, v); luaSound != want {
					t.Errorf("case %d: group %s value %q: group_sound %v, Go's lines say %v", c, g, v, luaSound, want)
				}
				stats[fmt.Sprintf("found=%v where=%s sound=%v", luaFound, where, luaSound)]++
				if !luaFound {
					continue
				}
				after, err := rdb.HGetAll(ctx, key).Result()
				mustNil(t, err)
				gotRec, ok := recordOf(id, []any{after[g], after[id]})
				if !ok || gotRec != newRec {
					t.Errorf("case %d: after order_put of %s in %q: Go reads %q, %v; want %q (value now %q)", c, id, v, gotRec, ok, newRec, after[g])
				}
				if where == "own" {
					if after[g] != v {
						t.Errorf("case %d: order_put into the own field changed the group %q -> %q", c, v, after[g])
					}
					continue
				}
				if after[id] != own {
					t.Errorf("case %d: order_put into the group changed the own field %q -> %q", c, own, after[id])
				}
				now := map[string]string{}
				groupOrders(g, after[g], now)
				for oid, rec := range before {
					if oid == id || strings.HasSuffix(oid, "?bad") {
						continue
					}
					if now[oid] != rec {
						t.Errorf("case %d: order_put of %s changed order %s: %q -> %q (value %q -> %q)", c, id, oid, rec, now[oid], v, after[g])
					}
				}
				if strings.Count(after[g], "\n") != strings.Count(v, "\n") {
					t.Errorf("case %d: order_put changed the number of lines: %q -> %q", c, v, after[g])
				}
			}
			t.Logf("%d cases: %v", cases, stats)
			if stats["found=true where=group sound=true"] == 0 || stats["found=false where= sound=false"] == 0 {
				t.Errorf("the cases did not reach both sound finds and unsound misses: %v", stats)
			}
		})
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAdvTailLineOrderReadsBothForms: Go's own readers agree with each
// other on one mixed value: recordIn, groupOrders and the units scan
// (orderUnits.group) find each order by tail or whole id, flag a value
// that names one order twice (once by tail, once by id) as corrupt, and
// never take a whole-id line of another group, nor a line whose "tail"
// is not four characters, for one of the group's.
func TestAdvTailLineOrderReadsBothForms(t *testing.T) {
	for _, sale := range []string{"s", ".", "-", "a.b-c:d_e", strings.Repeat("_", 64)} {
		id1, id2 := NewOrderID(sale), NewOrderID(sale)
		g := orderGroup(id1)
		a, b := g+"0000", g+"0001"
		other := orderGroup(id2)
		if other == g {
			other = g[:len(g)-1] + "Q"
		}
		recA, recB := "p|ua|1|A=1|0001|p|ub|1|A=9|", "p|ub|1|A=2|"+g+"0000|c"
		mixed := a + "|" + recA + "\n0001|" + recB
		if rec, ok := recordIn(mixed, a); !ok || rec != recA {
			t.Errorf("sale %q: recordIn(%s) = %q, %v; want %q", sale, a, rec, ok, recA)
		}
		if rec, ok := recordIn(mixed, b); !ok || rec != recB {
			t.Errorf("sale %q: recordIn(%s) = %q, %v; want %q", sale, b, rec, ok, recB)
		}
		got := map[string]string{}
		groupOrders(g, mixed, got)
		if len(got) != 2 || got[a] != recA || got[b] != recB {
			t.Errorf("sale %q: groupOrders(%q) = %v", sale, mixed, got)
		}
		u := newOrderUnits(sale)
		if err := u.group(g, mixed); err != nil || u.out["A"] != 3 {
			t.Errorf("sale %q: units of %q = %v, %v; want A 3", sale, mixed, u.out, err)
		}
		// One order twice: by id, then by tail (and the other way round).
		for _, twice := range []string{mixed + "\n0000|p|x|1|A=5|", "0001|p|x|1|A=5|\n" + mixed} {
			got := map[string]string{}
			groupOrders(g, twice, got)
			if _, bad := got[badGroup(g)]; !bad {
				t.Errorf("sale %q: groupOrders(%q) did not flag an order named twice: %v", sale, twice, got)
			}
			if err := newOrderUnits(sale).group(g, twice); err == nil {
				t.Errorf("sale %q: the units scan took %q, an order named twice", sale, twice)
			}
		}
		// Lines that are not the group's.
		for _, line := range []string{other + "0000|p|x|1|A=5|", "00000|p|x|1|A=5|", "000|p|x|1|A=5|",
			g + "00000|p|x|1|A=5|", g + "|p|x|1|A=5|", "|p|x|1|A=5|", ""} {
			v := "0001|" + recB + "\n" + line
			if rec, ok := recordIn(v, a); ok {
				t.Errorf("sale %q: recordIn(%s) read %q out of a line not its own: %q", sale, a, rec, line)
			}
			got := map[string]string{}
			groupOrders(g, v, got)
			if _, bad := got[badGroup(g)]; !bad {
				t.Errorf("sale %q: groupOrders took %q as an order of %s", sale, line, g)
			}
			if err := newOrderUnits(sale).group(g, v); err == nil {
				t.Errorf("sale %q: the units scan took %q as an order of %s", sale, line, g)
			}
		}
		// groupValues writes tails, which groupOrders reads back.
		want := map[string]string{a: recA, b: recB, id2: "c|z|3|B=1|"}
		vals := groupValues(want)
		if v := vals[g]; v != "0000|"+recA+"\n0001|"+recB {
			t.Errorf("sale %q: groupValues wrote %q", sale, v)
		}
		back := OrderRecords(vals)
		if len(back) != 3 || back[a] != recA || back[b] != recB || back[id2] != want[id2] {
			t.Errorf("sale %q: OrderRecords(groupValues(x)) = %v, want %v", sale, back, want)
		}
	}
}
