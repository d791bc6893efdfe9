package inventory_test

// Adversarial tests of the sale hash's "table" field (saleTableField,
// keys.go): a field whose long value makes Redis keep every sale hash as
// a hash table. create.lua takes it as ARGV[10], ARGV[11] (the items from
// ARGV[12] on) and its adopt check skips it; a rebuild stages it; a repair
// never compares it. A sale without it (made by the release before, or a
// Redis configured with a larger hash-max-listpack-value) must only be
// slower, never handled differently.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// prevCreateLua is create.lua as the release before the field shipped it
// (the items from ARGV[10] on, no field skipped by its adopt check), or ""
// when git cannot show it (a checkout without history).
func prevCreateLua() string {
	out, err := exec.Command("git", "show", "3d44d33:internal/inventory/create.lua").Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// prevCreate runs the previous release's create.lua for s with token, as
// an instance of that release would (adopt: its ARGV[9]), and returns its
// reply code; it skips the test when git cannot show that script.
func (r *rig) prevCreate(s inventory.Sale, token string, adopt bool) int64 {
	r.t.Helper()
	src := prevCreateLua()
	if src == "" {
		r.t.Skip("no git show of the previous release's create.lua")
	}
	items := make([]string, len(s.Items))
	args := []any{r.clock.Now().UnixMilli(), max(s.PerUserLimit, 1), advMs(s.StartsAt), advMs(s.EndsAt), advFlag(s.Paused), "",
		token, s.PaymentTimeout.Milliseconds(), advFlag(adopt)}
	for i, it := range s.Items {
		items[i] = it.SKU + "=" + strconv.FormatInt(it.Stock, 10)
		args = append(args, it.SKU, it.Stock)
	}
	args[5] = strings.Join(items, ",")
	reply, err := r.rdb.Eval(r.ctx, src, []string{r.key(s.ID, "sale"), r.eng.EventsKey(s.ID)}, args...).Slice()
	if err != nil || len(reply) == 0 {
		r.t.Fatalf("previous release's create.lua of %s: %v, %v", s.ID, reply, err)
	}
	return reply[0].(int64)
}

func advMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func advFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// saleHash is the sale's hash as Redis holds it.
func (r *rig) saleHash(id string) map[string]string {
	r.t.Helper()
	h, err := r.rdb.HGetAll(r.ctx, r.key(id, "sale")).Result()
	if err != nil {
		r.t.Fatalf("HGETALL sale %s: %v", id, err)
	}
	return h
}

// wantCreated is the sale hash a create of s writes, but its token
// ("created"); with the field unless legacy (the previous release's).
func wantCreated(s inventory.Sale, legacy bool) map[string]string {
	items := make([]string, len(s.Items))
	want := map[string]string{"limit": strconv.FormatInt(max(s.PerUserLimit, 1), 10), "start": strconv.FormatInt(advMs(s.StartsAt), 10),
		"end": strconv.FormatInt(advMs(s.EndsAt), 10), "paused": advFlag(s.Paused)}
	if !legacy {
		want[inventory.SaleTableField] = inventory.SaleTableValue
	}
	if s.PaymentTimeout > 0 {
		want["pay"] = strconv.FormatInt(s.PaymentTimeout.Milliseconds(), 10)
	}
	for i, it := range s.Items {
		items[i] = it.SKU + "=" + strconv.FormatInt(it.Stock, 10)
		stock := strconv.FormatInt(it.Stock, 10)
		want["r:"+it.SKU], want["t:"+it.SKU] = stock, stock
		if it.Stock == inventory.Unlimited {
			want["s:"+it.SKU] = "0"
		}
	}
	want["items"] = strings.Join(items, ",")
	return want
}

// withoutToken is h without "created" (failing the test if it is missing).
func withoutToken(t testing.TB, h map[string]string) map[string]string {
	t.Helper()
	if h["created"] == "" {
		t.Errorf("sale hash has no created token: %d fields", len(h))
	}
	out := maps.Clone(h)
	delete(out, "created")
	return out
}

// diffMaps describes how got differs from want (at most a few fields).
func diffMaps(got, want map[string]string) string {
	var d []string
	for _, f := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[f]; !ok || g != want[f] {
			d = append(d, fmt.Sprintf("%s=%q want %q", f, g, want[f]))
		}
	}
	for _, f := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[f]; !ok {
			d = append(d, fmt.Sprintf("extra %s=%q", f, got[f]))
		}
	}
	if len(d) > 6 {
		d = append(d[:6], fmt.Sprintf("... %d more", len(d)-6))
	}
	return strings.Join(d, "; ")
}

// manyItems is a sale of n items, every third unlimited, each limited one
// stocked differently (so that an argument read from the wrong place
// shows).
func manyItems(id string, n int) inventory.Sale {
	s := inventory.Sale{ID: id, PerUserLimit: 2}
	for i := range n {
		stock := int64(1000 + i)
		if i%3 == 2 {
			stock = inventory.Unlimited
		}
		s.Items = append(s.Items, inventory.Item{SKU: "sku-" + strconv.Itoa(i), Stock: stock})
	}
	return s
}

// isMini: the backend has no encodings (miniredis).
func isMini(b backend) bool { return b.name == "miniredis" }

func (r *rig) encoding(id string) string {
	r.t.Helper()
	enc, err := r.rdb.ObjectEncoding(r.ctx, r.key(id, "sale")).Result()
	if err != nil {
		r.t.Fatalf("OBJECT ENCODING of sale %s: %v", id, err)
	}
	return enc
}

// TestAdvTableCreateWritesExactlyItsFields: create writes the field and
// every field the sale's definition makes, no more, none misplaced (the
// items moved from ARGV[10] to ARGV[12]): a sale of one item, one with a
// payment timeout (whose "pay" is the hash's first write), window, pause,
// an unlimited item and skus that look like the sale's own fields, and
// one of 1,500 items (create.lua's HSET chunks). Each is a hash table on
// a real Redis, and reads back as created.
func TestAdvTableCreateWritesExactlyItsFields(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		sales := []inventory.Sale{
			{ID: "one", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}},
			{ID: "pay", PerUserLimit: 3, PaymentTimeout: 90 * time.Second, Paused: true,
				StartsAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), EndsAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
				Items: []inventory.Item{{SKU: "table", Stock: 7}, {SKU: "U", Stock: inventory.Unlimited}, {SKU: "created", Stock: 0}, {SKU: "r:x", Stock: 2}}},
			manyItems("many", 1500),
		}
		for _, s := range sales {
			r.create(s)
			if got, want := withoutToken(t, r.saleHash(s.ID)), wantCreated(s, false); !reflect.DeepEqual(got, want) {
				t.Errorf("sale %s: %s", s.ID, diffMaps(got, want))
			}
			if !isMini(b) {
				if enc := r.encoding(s.ID); enc != "hashtable" {
					t.Errorf("sale %s is a %s, want a hashtable", s.ID, enc)
				}
			}
			st, err := r.eng.Stock(r.ctx, s.ID)
			if err != nil {
				t.Fatalf("Stock(%s): %v", s.ID, err)
			}
			if !reflect.DeepEqual(st.Sale.Items, s.Items) || st.Sale.PaymentTimeout != s.PaymentTimeout || st.Sale.Paused != s.Paused {
				t.Errorf("sale %s reads back as %+v", s.ID, st.Sale)
			}
		}
		// The many items' last ones sell (the chunk loop wrote them).
		if _, err := r.eng.Buy(r.ctx, "many", "u1", lines("sku-1499", 1, "sku-1498", 2), ""); err != nil {
			t.Fatalf("buy of the last items: %v", err)
		}
		st, err := r.eng.Stock(r.ctx, "many")
		if err != nil {
			t.Fatal(err)
		}
		if it := st.Items[1499]; it.SKU != "sku-1499" || it.Remaining != inventory.Unlimited || it.Sold != 1 {
			t.Errorf("last item (unlimited): %+v", it)
		}
		if it := st.Items[1498]; it.SKU != "sku-1498" || it.Stocked != 2498 || it.Remaining != 2496 || it.Sold != 2 {
			t.Errorf("last limited item: %+v", it)
		}
	})
}

// TestAdvTableAdoptAcrossReleases: CreateSales takes over a sale a create
// left behind when it is exactly what the call would make and untouched,
// field or no field: one made by the previous release (no field), one of
// this release whose field is gone or changed (a hand edit; the field is
// never compared), one of 1,500 items either way. Anything else (another
// stock of the very last item, an item less, a bought sale) is ErrExists,
// and the sale stays as it was.
func TestAdvTableAdoptAcrossReleases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		base := inventory.Sale{ID: "c:0", PerUserLimit: 2, PaymentTimeout: time.Minute,
			StartsAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), EndsAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			Items: []inventory.Item{{SKU: "A", Stock: 4}, {SKU: "U", Stock: inventory.Unlimited}}}
		many := manyItems("c:m", 1500)
		type leftover struct {
			name string
			sale inventory.Sale
			make func(s inventory.Sale) // leaves the sale a create died after
		}
		prev := func(s inventory.Sale) {
			if c := r.prevCreate(s, "died-"+s.ID, true); c != 0 {
				t.Fatalf("previous release's create: %d", c)
			}
		}
		this := func(edit func(key string)) func(s inventory.Sale) {
			return func(s inventory.Sale) {
				r.create(s)
				edit(r.key(s.ID, "sale"))
			}
		}
		cases := []leftover{
			{"previous release", base, prev},
			{"previous release, 1500 items", many, prev},
			{"this release", base, this(func(string) {})},
			{"this release, 1500 items", many, this(func(string) {})},
			{"this release, field removed", base, this(func(k string) { mustDo(t, r.rdb.HDel(r.ctx, k, inventory.SaleTableField).Err()) })},
			{"this release, field changed", base, this(func(k string) { mustDo(t, r.rdb.HSet(r.ctx, k, inventory.SaleTableField, "x").Err()) })},
		}
		for i, c := range cases {
			s := c.sale
			s.Items = slices.Clone(c.sale.Items)
			s.ID = fmt.Sprintf("%s.%d", c.sale.ID, i)
			other := s
			other.ID += "-2"
			c.make(s)
			before := r.saleHash(s.ID)
			last := len(s.Items) - 1
			refused := map[string]func(x *inventory.Sale){
				"another stock of the last item": func(x *inventory.Sale) { x.Items[last].Stock = 3 },
				"the last item left out":         func(x *inventory.Sale) { x.Items = x.Items[:last] },
				"another limit":                  func(x *inventory.Sale) { x.PerUserLimit = 5 },
			}
			for name, change := range refused {
				x, y := s, other
				x.Items, y.Items = slices.Clone(s.Items), slices.Clone(other.Items)
				change(&x)
				change(&y)
				if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{x, y}, nil); !errors.Is(err, inventory.ErrExists) {
					t.Errorf("%s, %s: %v, want ErrExists", c.name, name, err)
				}
				if keys := r.keysOf("{" + r.prefix + ":" + other.ID + "}:*"); len(keys) != 0 {
					t.Errorf("%s, %s: a refused CreateSales left %v", c.name, name, keys)
				}
			}
			existed, err := r.eng.CreateSales(r.ctx, []inventory.Sale{s, other}, nil)
			if err != nil || existed != 1 {
				t.Errorf("%s: CreateSales of the same sale = %d, %v; want it taken over", c.name, existed, err)
				continue
			}
			if after := r.saleHash(s.ID); !reflect.DeepEqual(after, before) {
				t.Errorf("%s: the sale taken over changed: %s", c.name, diffMaps(after, before))
			}
			if got, want := withoutToken(t, r.saleHash(other.ID)), wantCreated(other, false); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: the sale made beside it: %s", c.name, diffMaps(got, want))
			}
			if evs := r.events(s.ID); len(evs) != 1 || evs[0].Type != inventory.EventCreated {
				t.Errorf("%s: events %+v, want its one created event", c.name, evs)
			}
			// It sells, and once bought from it is nobody's to take over.
			sku := s.Items[0].SKU
			if _, err := r.eng.Buy(r.ctx, s.ID, "u1", lines(sku, 1), ""); err != nil && !errors.Is(err, inventory.ErrSaleNotActive) {
				t.Errorf("%s: buy: %v", c.name, err)
			}
			if _, err := r.eng.Restock(r.ctx, s.ID, sku, 1); err != nil {
				t.Errorf("%s: restock: %v", c.name, err)
			}
			third := s
			third.ID += "-3"
			if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{s, third}, nil); !errors.Is(err, inventory.ErrExists) {
				t.Errorf("%s: CreateSales over a sale restocked: %v", c.name, err)
			}
		}
	})
}

// TestAdvTableLostCreateReply: the connection fails after create.lua ran,
// for a CreateSales (the adopt path) and a CreateSale. The resend (same
// token) finds its own sale: no conflict, not counted as taken over, one
// created event, the field there. A CreateSales whose commit then fails
// removes the sale whose reply was lost (discard.lua by its token),
// field and all. On the shared Redis and on miniredis.
func TestAdvTableLostCreateReply(t *testing.T) {
	clients := map[string]func(t *testing.T) *redis.Client{
		"redis": func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		"miniredis": func(t *testing.T) *redis.Client {
			_, m := redistest.Mini(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
	}
	for _, name := range []string{"redis", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			rdb := clients[name](t)
			r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return rdb }}, inventory.Options{})
			f := &flaky{match: scriptWithKey(r.key("s1", "sale")), after: true}
			rdb.AddHook(f)
			s1 := inventory.Sale{ID: "s1", PerUserLimit: 2, PaymentTimeout: time.Minute, Items: []inventory.Item{{SKU: "A", Stock: 5}, {SKU: "U", Stock: -1}}}
			s2 := inventory.Sale{ID: "s2", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 5}}}

			// A commit that fails: s1 (reply lost) and s2 are removed.
			f.failing.Store(1)
			refused := errors.New("refused")
			if _, err := r.eng.CreateSales(r.ctx, []inventory.Sale{s1, s2}, func(context.Context) error { return refused }); !errors.Is(err, refused) || strings.Contains(err.Error(), "left") {
				t.Fatalf("CreateSales whose commit failed: %v", err)
			}
			if keys := r.keysOf("{" + r.prefix + ":s*"); len(keys) != 0 {
				t.Errorf("a failed CreateSales left %v", keys)
			}

			// The same, committed: both made by this call.
			f.failing.Store(1)
			seen := f.seen.Load()
			existed, err := r.eng.CreateSales(r.ctx, []inventory.Sale{s1, s2}, nil)
			if err != nil || existed != 0 {
				t.Fatalf("CreateSales whose first reply was lost = %d, %v; want both made by it", existed, err)
			}
			if n := f.seen.Load() - seen; n != 2 {
				t.Errorf("s1's create sent %d times, want 2 (the lost reply, the resend)", n)
			}
			for _, s := range []inventory.Sale{s1, s2} {
				if got, want := withoutToken(t, r.saleHash(s.ID)), wantCreated(s, false); !reflect.DeepEqual(got, want) {
					t.Errorf("sale %s: %s", s.ID, diffMaps(got, want))
				}
				if evs := r.events(s.ID); len(evs) != 1 {
					t.Errorf("sale %s: %d events, want its one created event", s.ID, len(evs))
				}
			}

			// A lone create whose reply is lost, twice, then answers.
			s3 := inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
			mustDo(t, r.rdb.Del(r.ctx, r.key("s1", "sale"), r.eng.EventsKey("s1")).Err())
			f.failing.Store(2)
			if err := r.eng.CreateSale(r.ctx, s3); err != nil {
				t.Fatalf("CreateSale whose replies were lost: %v", err)
			}
			if got, want := withoutToken(t, r.saleHash("s1")), wantCreated(s3, false); !reflect.DeepEqual(got, want) {
				t.Errorf("sale s1 made again: %s", diffMaps(got, want))
			}
			if err := r.eng.CreateSale(r.ctx, s3); !errors.Is(err, inventory.ErrExists) {
				t.Errorf("another create of s1: %v", err)
			}
		})
	}
}

// advRecordedSale creates s (by this release, or the previous one's
// create.lua if legacy), sells from it, cancels and restocks, and lets the
// system of record catch up.
func advRecordedSale(t *testing.T, b backend, s inventory.Sale, legacy bool) (*rig, *recordDB) {
	t.Helper()
	db := &recordDB{}
	r := newRig(t, b, inventory.Options{Loader: db})
	if legacy {
		if c := r.prevCreate(s, "old", false); c != 0 {
			t.Fatalf("previous release's create: %d", c)
		}
	} else {
		r.create(s)
	}
	a, u := s.Items[0].SKU, s.Items[1].SKU
	_, err := r.eng.Buy(r.ctx, s.ID, "u1", lines(a, 2, u, 1), "k1")
	mustDo(t, err)
	rc, err := r.eng.Buy(r.ctx, s.ID, "u2", lines(a, 1), "")
	mustDo(t, err)
	_, err = r.eng.Cancel(r.ctx, rc.Order.ID, "")
	mustDo(t, err)
	_, err = r.eng.Restock(r.ctx, s.ID, a, 5)
	mustDo(t, err)
	db.consume(r, s.ID)
	return r, db
}

// TestAdvTableRebuildAndRepair: a sale with the field and one made by the
// previous release without it, each with a payment timeout. Repair finds
// no drift in either, and adds or removes nothing. Lost and rebuilt, each
// has the field (and is a hash table), reads as before, and Repair finds
// no drift and writes nothing. A real drift is repaired alone, the field
// left as it is; a field gone by hand is no drift either.
func TestAdvTableRebuildAndRepair(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, legacy := range []bool{false, true} {
			t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
				s := inventory.Sale{ID: "s1", PerUserLimit: 3, PaymentTimeout: time.Hour,
					Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}}}
				r, db := advRecordedSale(t, b, s, legacy)
				noDrift := func(when string) {
					t.Helper()
					before := r.liveState("s1")
					got, err := r.eng.Repair(r.ctx, "s1", db)
					if err != nil || got.Changed() {
						t.Fatalf("%s: Repair = %+v, %v; want no drift", when, got, err)
					}
					if after := r.liveState("s1"); !reflect.DeepEqual(after, before) {
						t.Errorf("%s: Repair changed the sale: %s", when, diffMaps(after["sale"], before["sale"]))
					}
				}
				noDrift("before the loss")
				if _, has := r.saleHash("s1")[inventory.SaleTableField]; has == legacy {
					t.Errorf("before the loss: field there = %v", has)
				}
				want, err := r.eng.Stock(r.ctx, "s1")
				mustDo(t, err)

				r.lose("s1", true)
				got, err := r.eng.Stock(r.ctx, "s1") // rebuilds
				mustDo(t, err)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("rebuilt: %+v\nwas %+v", got, want)
				}
				h := r.saleHash("s1")
				if h[inventory.SaleTableField] != inventory.SaleTableValue {
					t.Errorf("rebuilt without the field: %q", h[inventory.SaleTableField])
				}
				if !isMini(b) {
					if enc := r.encoding("s1"); enc != "hashtable" {
						t.Errorf("rebuilt as a %s", enc)
					}
				}
				noDrift("after the rebuild")
				_, err = r.eng.Buy(r.ctx, "s1", "u3", lines("A", 1), "")
				mustDo(t, err)
				db.consume(r, "s1")
				noDrift("after a buy of the rebuilt sale")

				// A drift: only it is repaired.
				mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "sale"), "r:A", 99).Err())
				rep, err := r.eng.Repair(r.ctx, "s1", db)
				mustDo(t, err)
				wantChange := []inventory.RepairChange{{SKU: "A", Field: inventory.RepairRemaining, Before: 99, After: 12, Fixed: 1}}
				if !reflect.DeepEqual(rep.Changes, wantChange) {
					t.Errorf("Repair of a drift: %+v, want %+v", rep.Changes, wantChange)
				}
				if v := r.saleHash("s1")[inventory.SaleTableField]; v != inventory.SaleTableValue {
					t.Errorf("Repair changed the field: %q", v)
				}
				// The field gone by hand: no drift, nothing written.
				mustDo(t, r.rdb.HDel(r.ctx, r.key("s1", "sale"), inventory.SaleTableField).Err())
				noDrift("the field gone")
				if _, has := r.saleHash("s1")[inventory.SaleTableField]; has {
					t.Error("Repair wrote the field back")
				}
				if rem := r.remaining("s1")["A"]; rem != 12 {
					t.Errorf("remaining %d, want 12", rem)
				}
			})
		}
	})
}

// TestAdvTableRebuildOfManyItems: a sale of 1,200 items is staged in
// several stage.lua chunks (500 fields each), the field in the last; the
// rebuilt hash is exactly the lost one's (but its token and the order
// count a rebuild keeps), a hash table, and Repair finds no drift.
func TestAdvTableRebuildOfManyItems(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		s := manyItems("s1", 1200)
		r.create(s)
		_, err := r.eng.Buy(r.ctx, "s1", "u1", lines("sku-0", 1, "sku-1199", 2, "sku-1198", 1), "")
		mustDo(t, err)
		db.consume(r, "s1")
		before := withoutToken(t, r.saleHash("s1"))
		r.lose("s1", true)
		if _, err := r.eng.Stock(r.ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		after := r.saleHash("s1")
		if after["orders"] != "1" {
			t.Errorf("rebuilt order count %q, want 1", after["orders"])
		}
		delete(after, "orders")
		delete(before, "orders")
		if !reflect.DeepEqual(after, before) {
			t.Errorf("rebuilt: %s", diffMaps(after, before))
		}
		if !isMini(b) {
			if enc := r.encoding("s1"); enc != "hashtable" {
				t.Errorf("rebuilt as a %s", enc)
			}
		}
		if got, err := r.eng.Repair(r.ctx, "s1", db); err != nil || got.Changed() {
			t.Errorf("Repair = %+v, %v; want no drift", got, err)
		}
	})
}

// TestAdvTableReadersIgnoreTheField: every reader of the sale hash takes
// the field, or its absence, or a value changed by hand, as nothing:
// Stock, Stocks, CountWith, OrderCounts, Remaining, a move and its records
// (an HSCAN of "m:*" of a hash table), FinishMoves, Close, Archive,
// PurgeArchived.
func TestAdvTableReadersIgnoreTheField(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, edit := range []string{"as made", "field removed", "field changed"} {
			t.Run(edit, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				twoSales(r, 10, 0)
				for _, id := range []string{"a", "b"} {
					switch edit {
					case "field removed":
						mustDo(t, r.rdb.HDel(r.ctx, r.key(id, "sale"), inventory.SaleTableField).Err())
					case "field changed":
						mustDo(t, r.rdb.HSet(r.ctx, r.key(id, "sale"), inventory.SaleTableField, "x").Err())
					}
				}
				_, err := r.eng.Buy(r.ctx, "a", "u1", lines("X", 2, "U", 1), "")
				mustDo(t, err)
				if n, err := r.eng.Move(r.ctx, "a", "b", "X", 3); err != nil || n != 3 {
					t.Fatalf("Move: %d, %v", n, err)
				}
				st, err := r.eng.Stock(r.ctx, "a")
				mustDo(t, err)
				if it := st.Items[0]; it.Remaining != 5 || it.Stocked != 7 || it.Sold != 2 || len(st.Moves) != 1 || st.Items[1].Sold != 1 {
					t.Errorf("Stock(a) = %+v", st)
				}
				states, errs := r.eng.Stocks(r.ctx, []string{"a", "b"})
				if errs[0] != nil || errs[1] != nil || !reflect.DeepEqual(states[0], st) || states[1].Items[0].Remaining != 3 || len(states[1].Moves) != 1 {
					t.Errorf("Stocks = %+v, %v", states, errs)
				}
				c, err := r.eng.CountWith(r.ctx, "a", func(redis.Pipeliner) {})
				if err != nil || !reflect.DeepEqual(c.State, st) || c.Sold["X"] != 2 || c.Held["X"] != 2 {
					t.Errorf("CountWith = %+v, %v", c, err)
				}
				counts, errs := r.eng.OrderCounts(r.ctx, []string{"a", "b"})
				if errs[0] != nil || errs[1] != nil || counts[0] != 1 || counts[1] != 0 {
					t.Errorf("OrderCounts = %v, %v", counts, errs)
				}
				rem, err := r.eng.Remaining(r.ctx, "X", "a", "b")
				if err != nil || !slices.Equal(rem, []int64{5, 3}) {
					t.Errorf("Remaining = %v, %v", rem, err)
				}
				if n, err := r.eng.FinishMoves(r.ctx, "a"); err != nil || n != 0 {
					t.Errorf("FinishMoves = %d, %v; want nothing to finish", n, err)
				}
				for _, id := range []string{"a", "b"} {
					if _, _, err := r.eng.Close(r.ctx, id); err != nil {
						t.Fatal(err)
					}
					mustDo(t, r.rdb.XGroupCreate(r.ctx, r.eng.EventsKey(id), "orders", "$").Err())
					chk, err := r.eng.CheckArchive(r.ctx, id)
					if err != nil || !chk.Ready {
						t.Fatalf("CheckArchive(%s): %+v, %v", id, chk, err)
					}
					if res, err := r.eng.Archive(r.ctx, id, chk.Last); err != nil || !res.Ready {
						t.Fatalf("Archive(%s): %+v, %v", id, res, err)
					}
					if _, err := r.eng.PurgeArchived(r.ctx, id); err != nil {
						t.Fatal(err)
					}
					if n, err := r.rdb.Exists(r.ctx, r.key(id, "sale")).Result(); err != nil || n != 0 {
						t.Errorf("sale %s still there after its archive (%d, %v)", id, n, err)
					}
				}
			})
		}
	})
}

// advScenario runs one fixed history on r (a sale of three items with a
// payment timeout: buys, a cancel, a restock, a pause and resume, a loss
// and rebuild, a repair, a move) and returns what it leaves: the sale
// hashes without the token, the field and the move records (whose ids
// are random), and both sales' states without their moves.
func advScenario(t *testing.T, r *rig, db *recordDB) (hashes map[string]map[string]string, states []inventory.SaleState) {
	t.Helper()
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 3, PaymentTimeout: time.Minute,
		Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: inventory.Unlimited}, {SKU: "B", Stock: 3}}})
	r.create(inventory.Sale{ID: "s2", PerUserLimit: 3, Items: []inventory.Item{{SKU: "A", Stock: 0}}})
	_, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 1), "k1")
	mustDo(t, err)
	rc, err := r.eng.Buy(r.ctx, "s1", "u2", lines("B", 1), "")
	mustDo(t, err)
	_, err = r.eng.Cancel(r.ctx, rc.Order.ID, "")
	mustDo(t, err)
	_, err = r.eng.Restock(r.ctx, "s1", "A", 4)
	mustDo(t, err)
	mustDo(t, r.eng.Pause(r.ctx, "s1"))
	mustDo(t, r.eng.Resume(r.ctx, "s1"))
	db.consume(r, "s1")
	r.lose("s1", true)
	_, err = r.eng.Buy(r.ctx, "s1", "u3", lines("A", 1, "B", 2), "") // rebuilds
	mustDo(t, err)
	db.consume(r, "s1")
	if rep, err := r.eng.Repair(r.ctx, "s1", db); err != nil || rep.Changed() {
		t.Fatalf("Repair after the rebuild: %+v, %v", rep, err)
	}
	if n, err := r.eng.Move(r.ctx, "s1", "s2", "A", 4); err != nil || n != 4 {
		t.Fatalf("Move: %d, %v", n, err)
	}
	hashes = map[string]map[string]string{}
	for _, id := range []string{"s1", "s2"} {
		h := r.saleHash(id)
		for f := range h {
			if f == "created" || f == inventory.SaleTableField || strings.HasPrefix(f, "m:") {
				delete(h, f)
			}
		}
		hashes[id] = h
		st, err := r.eng.Stock(r.ctx, id)
		mustDo(t, err)
		st.Moves = nil
		states = append(states, st)
	}
	return hashes, states
}

// TestAdvTableLargerListpackValue: on a Redis of its own whose
// hash-max-listpack-value is larger than the field's value (by its
// command line, or by CONFIG SET after sales were made), sale hashes stay
// listpacks and everything comes out exactly as on a Redis of the default
// configuration, where they are hash tables, and on miniredis. Saved and
// loaded again (a restart), each keeps its encoding and sells: even a
// listpack loaded by a Redis of the default configuration again (it
// stays a listpack that holds a longer value than the configuration's:
// only slower).
func TestAdvTableLargerListpackValue(t *testing.T) {
	type run struct {
		name   string
		server *redistest.Server
		client func(t *testing.T) redis.UniversalClient
		enc    string // what a sale hash is once the scenario ran
	}
	def := redistest.StartServer(t)
	big := redistest.StartServer(t, "--hash-max-listpack-value", "1024")
	set := redistest.StartServer(t)
	setClient := set.Client(t)
	runs := []run{
		{"default", def, func(t *testing.T) redis.UniversalClient { return def.Client(t) }, "hashtable"},
		{"hash-max-listpack-value 1024", big, func(t *testing.T) redis.UniversalClient { return big.Client(t) }, "listpack"},
		{"CONFIG SET midway", set, func(t *testing.T) redis.UniversalClient { return setClient }, ""},
		{"miniredis", nil, func(t *testing.T) redis.UniversalClient { c, _ := redistest.Mini(t); return c }, ""},
	}
	var wantHashes map[string]map[string]string
	var wantStates []inventory.SaleState
	for i, x := range runs {
		t.Run(x.name, func(t *testing.T) {
			c := x.client(t)
			db := &recordDB{}
			r := newRig(t, backend{client: func(testing.TB) redis.UniversalClient { return c }}, inventory.Options{Loader: db})
			if x.name == "CONFIG SET midway" {
				// A sale made as a hash table before the change stays one.
				r.create(inventory.Sale{ID: "early", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 2}}})
				mustDo(t, setClient.ConfigSet(r.ctx, "hash-max-listpack-value", "1024").Err())
			}
			hashes, states := advScenario(t, r, db)
			if i == 0 {
				wantHashes, wantStates = hashes, states
			} else {
				if !reflect.DeepEqual(hashes, wantHashes) {
					for id := range wantHashes {
						t.Errorf("sale %s: %s", id, diffMaps(hashes[id], wantHashes[id]))
					}
				}
				if !reflect.DeepEqual(states, wantStates) {
					t.Errorf("states %+v\nwant %+v", states, wantStates)
				}
			}
			if x.server == nil {
				return
			}
			encs := map[string]string{"s1": x.enc, "s2": x.enc}
			if x.name == "CONFIG SET midway" {
				encs = map[string]string{"early": "hashtable", "s1": "listpack", "s2": "listpack"}
			}
			check := func(when string) {
				for id, want := range encs {
					if enc := r.encoding(id); enc != want {
						t.Errorf("%s: sale %s is a %s, want a %s", when, id, enc, want)
					}
				}
			}
			check("live")
			mustDo(t, c.Save(r.ctx).Err())
			mustDo(t, x.server.Kill())
			mustDo(t, x.server.Restart())
			// (A restart forgets CONFIG SET, but a listpack is loaded as a
			// listpack: those sales stay slower, and sell.)
			check("loaded again")
			if _, err := r.eng.Buy(r.ctx, "s1", "u9", lines("A", 1), ""); err != nil {
				t.Errorf("buy after the restart: %v", err)
			}
			if x.name == "CONFIG SET midway" {
				if _, err := r.eng.Buy(r.ctx, "early", "u9", lines("A", 1), ""); err != nil {
					t.Errorf("buy of the early sale after the restart: %v", err)
				}
			}
		})
	}
}
