package segment_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

func one(sku string) []inventory.Line { return []inventory.Line{{SKU: sku, Qty: 1}} }

// usersHomedAt returns n user ids whose home segment is seg.
func usersHomedAt(segs []string, seg string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		u := fmt.Sprintf("u%d", i)
		if segment.Home(segs, u) == seg {
			out = append(out, u)
		}
	}
	return out
}

// TestBuyFallsThrough: buyers who all live in one segment buy every unit of
// every segment; units are moved to their home as it runs dry, every order
// is in the home segment, and the item is sold out only when every segment
// is empty.
func TestBuyFallsThrough(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{}, segment.Options{})
		segs := r.create(inventory.Sale{ID: "hot", PerUserLimit: 1, Items: []inventory.Item{{SKU: "X", Stock: 9}}}, 4)
		users := usersHomedAt(segs, segs[1], 10)
		for i, u := range users[:9] {
			rc, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: u, Lines: one("X")})
			if err != nil {
				t.Fatalf("buy %d of 9 units: %v", i+1, err)
			}
			if rc.Order.SaleID != segs[1] {
				t.Errorf("order of %s in %s, its home is %s", u, rc.Order.SaleID, segs[1])
			}
		}
		_, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: users[9], Lines: one("X")})
		var so *inventory.SoldOutError
		if !errors.As(err, &so) || so.SKUs[0] != "X" {
			t.Fatalf("the 10th buy of 9 units: %v", err)
		}
		if moves, units := r.sel.Moved(); moves == 0 || units < 9-3 {
			t.Errorf("moved %d units in %d moves; the home segment had 3 of the 9", units, moves)
		}
		tot := r.totals("hot")["X"]
		if tot.Remaining != 0 || tot.Sold != 9 || tot.Stocked != 9 || r.ordered("hot")["X"] != 9 {
			t.Errorf("totals %+v, ordered %d; want 9 sold of 9", tot, r.ordered("hot")["X"])
		}
		// The limit holds across fall-through: the home segment saw it all.
		_, err = r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: users[0], Lines: one("X")})
		if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrLimitExceeded) {
			t.Errorf("a second unit for a buyer at the limit: %v", err)
		}
	})
}

// TestConcurrentSellOut: a crowd buys a segmented item to the last unit.
// Exactly the stock is sold, nobody holds more than the limit, every order
// is in its buyer's home segment, and only sold-out and limit refusals are
// seen.
func TestConcurrentSellOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{}, segment.Options{})
		const stock, limit, users = 301, 2, 250
		segs := r.create(inventory.Sale{ID: "hot", PerUserLimit: limit,
			Items: []inventory.Item{{SKU: "X", Stock: stock}, {SKU: "Y", Stock: 7}}}, 5)
		var mu sync.Mutex
		held := map[string]int64{}
		var wrongHome, oddErrors atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := g; i < users*4; i += 32 {
					u := fmt.Sprintf("user-%d", i%users)
					lines := one("X")
					if i%10 == 0 {
						lines = append(lines, inventory.Line{SKU: "Y", Qty: 1})
					}
					rc, err := r.sel.Buy(context.Background(), inventory.BuyRequest{SaleID: "hot", UserID: u, Lines: lines})
					switch {
					case err == nil:
						if rc.Order.SaleID != segment.Home(segs, u) {
							wrongHome.Add(1)
						}
						mu.Lock()
						for _, l := range rc.Order.Items {
							held[u+"|"+l.SKU] += l.Qty
						}
						mu.Unlock()
					case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
					default:
						oddErrors.Add(1)
						t.Errorf("buy: %v", err)
					}
				}
			})
		}
		wg.Wait()
		var sold int64
		for k, n := range held {
			if n > limit {
				t.Errorf("%s holds %d, the limit is %d", k, n, limit)
			}
			if strings.HasSuffix(k, "|X") {
				sold += n
			}
		}
		tot := r.totals("hot")
		if sold != stock || tot["X"].Sold != stock || tot["X"].Remaining != 0 || r.ordered("hot")["X"] != stock {
			t.Errorf("sold %d by receipts, %+v in Redis, %d in orders; stock %d", sold, tot["X"], r.ordered("hot")["X"], stock)
		}
		if tot["Y"].Sold+tot["Y"].Remaining != 7 || tot["Y"].Stocked != 7 {
			t.Errorf("Y: %+v", tot["Y"])
		}
		if wrongHome.Load() != 0 {
			t.Errorf("%d orders outside their buyer's home segment", wrongHome.Load())
		}
	})
}

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// TestSoldOutFlag: once every segment is empty, the seller refuses the
// item without asking Redis; stock that comes back through another seller
// is sold once the flag's TTL has passed, and at once after a cancel
// through this seller.
func TestSoldOutFlag(t *testing.T) {
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).UnixNano())
	r := newRig(t, backends[0], inventory.Options{SoldOut: inventory.SoldOut{Off: true}}, segment.Options{Clock: clock})
	r.create(inventory.Sale{ID: "hot", PerUserLimit: 5, Items: []inventory.Item{{SKU: "X", Stock: 2}}}, 2)
	buy := func(u string) (inventory.Receipt, error) {
		return r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: u, Lines: one("X")})
	}
	var orders []string
	for _, u := range []string{"a", "b"} {
		rc, err := buy(u)
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, rc.Order.ID)
	}
	if _, err := buy("c"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buy after the sell-out: %v", err)
	}
	other := segment.New(r.eng, r.rdb, segment.Options{})
	if _, err := other.Restock(r.ctx, "hot", "X", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := buy("c"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a flagged item was asked for in Redis: %v", err)
	}
	clock.ns.Add(int64(600 * time.Millisecond))
	if _, err := buy("c"); err != nil {
		t.Fatalf("buy once the flag expired: %v", err)
	}
	if _, err := buy("d"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buy after the second sell-out: %v", err)
	}
	if _, err := r.sel.Cancel(r.ctx, orders[0], ""); err != nil {
		t.Fatal(err)
	}
	if _, err := buy("d"); err != nil {
		t.Fatalf("buy after a cancel through this seller: %v", err)
	}
	// A buy with an idempotency key is never refused by the flag.
	if _, err := buy("e"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buy after the third sell-out: %v", err)
	}
	if _, err := other.Restock(r.ctx, "hot", "X", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := buy("e"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a flagged item was asked for in Redis: %v", err)
	}
	if _, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: "e", Lines: one("X"), IdempotencyKey: "k"}); err != nil {
		t.Fatalf("buy with a key while flagged: %v", err)
	}
}

// TestRebalance evens out what is left, after finishing a move a failure
// left half done.
func TestRebalance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		r := newRig(t, be, inventory.Options{}, segment.Options{})
		segs := r.create(inventory.Sale{ID: "hot", PerUserLimit: 1, Items: []inventory.Item{{SKU: "X", Stock: 40}, {SKU: "U", Stock: -1}}}, 4)
		if n, err := r.eng.Move(r.ctx, segs[1], segs[0], "X", 10); err != nil || n != 10 {
			t.Fatalf("Move: %d, %v", n, err)
		}
		if n, err := r.eng.Move(r.ctx, segs[3], segs[0], "X", 7); err != nil || n != 7 {
			t.Fatalf("Move: %d, %v", n, err)
		}
		// A move whose second half fails: its 3 units are in no segment.
		if _, err := r.eng.Fence(r.ctx, segs[2], 1); err != nil {
			t.Fatal(err)
		}
		if _, err := r.eng.Move(r.ctx, segs[0], segs[2], "X", 3); err == nil {
			t.Fatal("a move into a fenced segment succeeded")
		}
		if err := r.eng.Unfence(r.ctx, segs[2], 1); err != nil {
			t.Fatal(err)
		}
		if tot := r.totals("hot")["X"]; tot.Remaining != 37 {
			t.Fatalf("remaining %d with 3 units in a pending move", tot.Remaining)
		}
		moved, err := r.sel.Rebalance(r.ctx, "hot")
		if err != nil || moved == 0 {
			t.Fatalf("Rebalance: %d, %v", moved, err)
		}
		rem, err := r.eng.Remaining(r.ctx, "X", segs...)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range rem {
			if n != 10 {
				t.Errorf("after Rebalance: %v remaining per segment, want 10 each (segment %d)", rem, i)
				break
			}
		}
		if again, err := r.sel.Rebalance(r.ctx, "hot"); err != nil || again != 0 {
			t.Errorf("a second Rebalance moved %d, %v", again, err)
		}
	})
}

// TestCreate: bad input writes nothing, a second create is refused, a
// create that failed part way is finished by running it again.
func TestCreate(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{}, segment.Options{})
	sale := inventory.Sale{ID: "hot", PerUserLimit: 2, Items: []inventory.Item{{SKU: "X", Stock: 10}}}
	for _, k := range []int{0, segment.MaxSegments + 1} {
		if _, err := r.sel.Place(r.ctx, "hot", k); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("Place with %d segments: %v", k, err)
		}
	}
	for name, ids := range map[string][]string{
		"none":          nil,
		"other sale":    {"cold:0", "hot:1"},
		"not a segment": {"hot:0", "hot:x"},
		"too long":      {"hot:" + strings.Repeat("9", 62)},
	} {
		if err := r.sel.Create(r.ctx, sale, ids); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("Create with ids %s: %v", name, err)
		}
	}
	bad := sale
	bad.Items = []inventory.Item{{SKU: "X", Stock: -5}}
	if err := r.sel.Create(r.ctx, bad, []string{"hot:0"}); !errors.Is(err, inventory.ErrInvalid) {
		t.Errorf("Create with negative stock: %v", err)
	}
	if _, err := r.sel.Segments(r.ctx, "hot"); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("a refused create left a directory: %v", err)
	}

	ids := []string{"hot:0", "hot:1", "hot:2"}
	plan, err := segment.Plan(sale, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{plan[0].Items[0].Stock, plan[1].Items[0].Stock, plan[2].Items[0].Stock}; got[0] != 4 || got[1] != 3 || got[2] != 3 {
		t.Errorf("Plan splits 10 units as %v, want [4 3 3]", got)
	}
	// A create that stopped after its directory and first segment.
	if err := r.rdb.Set(r.ctx, r.eng.Key("hot", "segments"), strings.Join(ids, ","), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.eng.CreateSale(r.ctx, plan[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.sel.Create(r.ctx, sale, ids); err != nil {
		t.Fatalf("Create finishing a partial create: %v", err)
	}
	if tot := r.totals("hot")["X"]; tot.Stocked != 10 || tot.Remaining != 10 {
		t.Errorf("totals after finishing: %+v", tot)
	}
	if err := r.sel.Create(r.ctx, sale, ids); !errors.Is(err, inventory.ErrExists) {
		t.Errorf("a second Create: %v", err)
	}
	if err := r.sel.Create(r.ctx, sale, []string{"hot:0", "hot:5"}); !errors.Is(err, inventory.ErrExists) {
		t.Errorf("a second Create with other segments: %v", err)
	}
	other := sale
	other.PerUserLimit = 9
	if err := r.sel.Create(r.ctx, other, ids); !errors.Is(err, inventory.ErrExists) {
		t.Errorf("a second Create with another limit: %v", err)
	}
	if tot := r.totals("hot")["X"]; tot.Stocked != 10 {
		t.Errorf("a refused create changed the stock: %+v", tot)
	}
}

// TestPlace: on the cluster the segments land on different masters; on one
// node they are numbered.
func TestPlace(t *testing.T) {
	r := newRig(t, backends[2], inventory.Options{}, segment.Options{})
	ids, err := r.sel.Place(r.ctx, "hot", 3)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, id := range ids {
		slot, err := r.rdb.ClusterKeySlot(r.ctx, r.eng.Key(id, "sale")).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots, err := r.rdb.ClusterSlots(r.ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				owners[s.Nodes[0].Addr] = true
			}
		}
	}
	if len(owners) != 3 {
		t.Errorf("segments %v on %d masters, want 3", ids, len(owners))
	}
	one := newRig(t, backends[0], inventory.Options{}, segment.Options{})
	ids, err = one.sel.Place(one.ctx, "hot", 3)
	if err != nil || strings.Join(ids, ",") != "hot:0,hot:1,hot:2" {
		t.Errorf("Place on one node: %v, %v", ids, err)
	}
}

// TestDirectoryLost: a directory missing from Redis comes from
// Options.Directory, and is put back.
func TestDirectoryLost(t *testing.T) {
	r := newRig(t, backends[0], inventory.Options{}, segment.Options{})
	ids := r.create(inventory.Sale{ID: "hot", PerUserLimit: 1, Items: []inventory.Item{{SKU: "X", Stock: 4}}}, 2)
	if err := r.rdb.Del(r.ctx, r.eng.Key("hot", "segments")).Err(); err != nil {
		t.Fatal(err)
	}
	blind := segment.New(r.eng, r.rdb, segment.Options{})
	if _, err := blind.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: "u", Lines: one("X")}); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("buy without a directory: %v", err)
	}
	asked := 0
	s := segment.New(r.eng, r.rdb, segment.Options{Directory: func(_ context.Context, sale string) ([]string, error) {
		asked++
		return ids, nil
	}})
	for range 2 {
		if _, err := s.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: fmt.Sprint("u", asked), Lines: one("X")}); err != nil {
			t.Fatal(err)
		}
	}
	if asked != 1 {
		t.Errorf("directory asked %d times, want once (then cached)", asked)
	}
	if got, err := r.rdb.Get(r.ctx, r.eng.Key("hot", "segments")).Result(); err != nil || got != strings.Join(ids, ",") {
		t.Errorf("directory not put back: %q, %v", got, err)
	}
}

func TestParentOf(t *testing.T) {
	for id, want := range map[string]string{"hot:0": "hot", "a:b:12": "a:b", "hot": "", ":1": "", "hot:x": "", "hot:": "", "hot:99999999": ""} {
		if got := segment.ParentOf(id); got != want {
			t.Errorf("ParentOf(%q) = %q, want %q", id, got, want)
		}
	}
}

// TestEveryUnitFindsItsBuyer: as many buyers as units, all at once. Every
// buyer gets one: a buy is refused as sold out only when all the segments
// together are empty, however many buyers of one home segment run short at
// the same moment.
func TestEveryUnitFindsItsBuyer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, k := range []int{3, 6} {
			r := newRig(t, be, inventory.Options{}, segment.Options{})
			const units = 600
			sale := fmt.Sprintf("hot%d", k)
			r.create(inventory.Sale{ID: sale, PerUserLimit: 1, Items: []inventory.Item{{SKU: "X", Stock: units}}}, k)
			var next, refused atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= units; i = next.Add(1) {
						_, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: fmt.Sprint("b", i), Lines: one("X")})
						if err != nil {
							refused.Add(1)
							if !errors.Is(err, inventory.ErrSoldOut) {
								t.Errorf("buy: %v", err)
							}
						}
					}
				})
			}
			wg.Wait()
			if tot := r.totals(sale)["X"]; refused.Load() != 0 || tot.Sold != units {
				t.Errorf("K=%d: %d of %d buyers refused, %+v", k, refused.Load(), units, tot)
			}
		}
	})
}
