package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, "admission") }

// backends are the Redis the room's tests run on: the machine's and a
// real Redis Cluster (the room's keys are computed in its script, so the
// cluster is what proves they share the sale's slot).
func backends() []redistest.Backend {
	return []redistest.Backend{redistest.Backends()[0], redistest.Backends()[2]}
}

// forEachBackend runs f as a subtest on each of backends.
func forEachBackend(t *testing.T, f func(t *testing.T, b redistest.Backend)) {
	for _, b := range backends() {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

// t0 is when the tests' sales start and their draws seal.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fakeClock stands in for Redis's clock in the room's script and the
// sale's buys.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// rig is one test's engine and rooms under a key prefix of its own; with
// a fake clock both decide by it, else by Redis's.
type rig struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	eng    *inventory.Engine
	rooms  *Rooms
	clock  *fakeClock // nil: Redis's clock
}

func newRig(t *testing.T, b redistest.Backend, fake bool) *rig {
	t.Helper()
	rdb := b.Client(t)
	r := &rig{t: t, ctx: context.Background(), rdb: rdb, prefix: redistest.Prefix(t, rdb)}
	opts := inventory.Options{Prefix: r.prefix}
	if fake {
		r.clock = &fakeClock{now: t0.Add(-time.Minute)}
		opts.Clock, opts.ScriptClock = r.clock, r.clock
	}
	r.eng = inventory.New(rdb, opts)
	r.rooms = r.newRooms(rdb)
	return r
}

// newRooms returns another instance's rooms, on client rdb.
func (r *rig) newRooms(rdb redis.UniversalClient) *Rooms {
	rooms := NewRooms(rdb, r.eng.Key)
	if r.clock != nil {
		rooms.clock = r.clock.Now
	}
	return rooms
}

// sale creates a sale starting at t0 with these items ("A", 3, ...).
func (r *rig) sale(id string, pay time.Duration, items ...any) {
	r.t.Helper()
	s := inventory.Sale{ID: id, PerUserLimit: 5, StartsAt: t0, PaymentTimeout: pay}
	if r.clock == nil {
		s.StartsAt = time.Time{}
	}
	for i := 0; i < len(items); i += 2 {
		s.Items = append(s.Items, inventory.Item{SKU: items[i].(string), Stock: int64(items[i+1].(int))})
	}
	if err := r.eng.CreateSale(r.ctx, s); err != nil {
		r.t.Fatalf("CreateSale: %v", err)
	}
}

// config is a room opening a minute before t0, drawing until t0.
func config() Config {
	return Config{OpensAt: t0.Add(-time.Minute), DrawUntil: t0, CapacityPerS: 1000, AdmitTTL: 10 * time.Second, MaxWaiting: 1000}
}

func (r *rig) create(sale string, cfg Config) {
	r.t.Helper()
	if err := r.rooms.Create(r.ctx, sale, cfg); err != nil {
		r.t.Fatalf("Create: %v", err)
	}
}

func (r *rig) join(sale, user string) Place {
	r.t.Helper()
	p, err := r.rooms.Join(r.ctx, sale, user)
	if err != nil {
		r.t.Fatalf("Join(%s): %v", user, err)
	}
	return p
}

func (r *rig) place(sale, user string) Place {
	r.t.Helper()
	p, err := r.rooms.Place(r.ctx, sale, user)
	if err != nil {
		r.t.Fatalf("Place(%s): %v", user, err)
	}
	return p
}

func (r *rig) step(sale string) StepResult {
	r.t.Helper()
	s, err := r.rooms.Step(r.ctx, sale)
	if err != nil {
		r.t.Fatalf("Step: %v", err)
	}
	return s
}

func (r *rig) stats(sale string) Stats {
	r.t.Helper()
	s, err := r.rooms.Stats(r.ctx, sale)
	if err != nil {
		r.t.Fatalf("Stats: %v", err)
	}
	return s
}

// buy buys one unit of sku for user with nonce as an ungated purchase
// token: it takes the unit but spends nothing in the room (the admission
// stays live until MarkUsed, or a gated buy, spends it).
func (r *rig) buy(sale, user, sku, nonce string) inventory.Order {
	r.t.Helper()
	rc, err := r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: sale, UserID: user,
		Lines: []inventory.Line{{SKU: sku, Qty: 1}}, Token: nonce, TokenTTL: time.Hour})
	if err != nil {
		r.t.Fatalf("buy by %s: %v", user, err)
	}
	return rc.Order
}

// buyGated buys one unit of sku for user with admission p, as the service
// does: gated by the room (inventory.CheckedBuy.WithGate), so the buy
// spends the admission in the room itself (used with its order, out of
// the live ones, counted).
func (r *rig) buyGated(sale, user, sku string, p Place) (inventory.Order, error) {
	r.t.Helper()
	c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: sale, UserID: user, Lines: []inventory.Line{{SKU: sku, Qty: 1}}})
	if err == nil {
		c, err = c.WithToken(p.Nonce, time.Hour)
	}
	if err == nil {
		c, err = c.WithGate(p.AdmittedUntil)
	}
	if err != nil {
		return inventory.Order{}, err
	}
	rc, err := r.eng.BuyChecked(r.ctx, c)
	return rc.Order, err
}

// roomKeys returns the sale's room keys in Redis, on every master.
func (r *rig) roomKeys(sale string) []string {
	r.t.Helper()
	pattern := r.eng.Key(sale, "room:*")
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(r.ctx, r.rdb)
	}
	if err != nil {
		r.t.Fatalf("scan %s: %v", pattern, err)
	}
	return out
}

// users are n user ids: prefix0, prefix1, ...
func users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestJoinOnePlace: joining again, at once from many clients, gives the
// one place the first join made.
func TestJoinOnePlace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		r.create("s", config())
		r.clock.Set(t0.Add(-30 * time.Second))
		first := r.join("s", "u1")
		if first.Status != Drawing || !first.InDraw || !first.JoinedAt.Equal(r.clock.Now()) {
			t.Fatalf("first join: %+v", first)
		}
		r.clock.Add(time.Second)
		var wg sync.WaitGroup
		places := make([]Place, 20)
		for i := range places {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rooms := r.rooms
				if i%2 == 1 {
					rooms = r.newRooms(b.Client(t)) // another instance
				}
				p, err := rooms.Join(r.ctx, "s", "u1")
				if err != nil {
					t.Errorf("Join: %v", err)
				}
				places[i] = p
			}()
		}
		wg.Wait()
		for _, p := range places {
			if p != first {
				t.Fatalf("joined again: %+v, first %+v", p, first)
			}
		}
		r.clock.Set(t0) // sealed: an arrival
		a := r.join("s", "u2")
		if a.Status != Waiting || a.InDraw || a.Position != 2 || a.Ahead != 1 {
			t.Fatalf("arrival: %+v", a)
		}
		r.clock.Add(time.Second)
		if again := r.join("s", "u2"); again != a {
			t.Fatalf("arrival again: %+v, first %+v", again, a)
		}
		if st := r.stats("s"); st.Drawing != 1 || st.Waiting != 1 || st.DrawSize != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestRoomFull: past max_waiting a new join is refused, a joined user's
// is not.
func TestRoomFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		cfg := config()
		cfg.MaxWaiting = 3
		r.create("s", cfg)
		r.join("s", "u1")
		r.join("s", "u2")
		r.clock.Set(t0)
		r.join("s", "u3")
		if _, err := r.rooms.Join(r.ctx, "s", "u4"); !errors.Is(err, ErrRoomFull) {
			t.Fatalf("fourth join: %v", err)
		}
		r.join("s", "u1")
		if _, err := r.rooms.Place(r.ctx, "s", "u4"); !errors.Is(err, ErrNotJoined) {
			t.Fatalf("Place of the refused: %v", err)
		}
	})
}

// TestNotOpen: joins before opens_at and from the room's or the sale's
// end are refused.
func TestNotOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		if err := r.eng.CreateSale(r.ctx, inventory.Sale{ID: "s", StartsAt: t0, EndsAt: t0.Add(time.Hour),
			Items: []inventory.Item{{SKU: "A", Stock: 5}}}); err != nil {
			t.Fatal(err)
		}
		r.sale("s2", 0, "A", 5)
		cfg := config()
		r.create("s", cfg)
		cfg.EndsAt = t0.Add(time.Minute)
		r.create("s2", cfg)
		for _, c := range []struct {
			sale string
			at   time.Time
			err  error
		}{
			{"s", t0.Add(-time.Minute - time.Millisecond), ErrNotOpen},
			{"s", t0.Add(-time.Minute), nil},
			{"s", t0.Add(time.Hour - time.Millisecond), nil},
			{"s", t0.Add(time.Hour), ErrNotOpen},
			{"s2", t0.Add(time.Minute - time.Millisecond), nil},
			{"s2", t0.Add(time.Minute), ErrNotOpen},
		} {
			r.clock.Set(c.at)
			_, err := r.rooms.Join(r.ctx, c.sale, fmt.Sprintf("u%d", c.at.UnixMilli()))
			if !errors.Is(err, c.err) && (err != nil || c.err != nil) {
				t.Errorf("join of %s at %v: %v, want %v", c.sale, c.at, err, c.err)
			}
		}
	})
}

// TestNoRoom: every operation on a sale without a room is ErrNoRoom and
// makes no key; Create refuses a sale that is not in Redis.
func TestNoRoom(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		ctx := r.ctx
		for name, call := range map[string]func() error{
			"Join":      func() error { _, err := r.rooms.Join(ctx, "s", "u"); return err },
			"Place":     func() error { _, err := r.rooms.Place(ctx, "s", "u"); return err },
			"Step":      func() error { _, err := r.rooms.Step(ctx, "s"); return err },
			"Entrants":  func() error { _, _, err := r.rooms.Entrants(ctx, "s"); return err },
			"WriteDraw": func() error { return r.rooms.WriteDraw(ctx, "s", nil) },
			"Check":     func() error { _, err := r.rooms.Check(ctx, "s", "u", "n"); return err },
			"MarkUsed":  func() error { return r.rooms.MarkUsed(ctx, "s", "u", "n", "o") },
			"Stats":     func() error { _, err := r.rooms.Stats(ctx, "s"); return err },
			"SetRate":   func() error { return r.rooms.SetRate(ctx, "s", 5) },
		} {
			if err := call(); !errors.Is(err, ErrNoRoom) {
				t.Errorf("%s: %v, want ErrNoRoom", name, err)
			}
		}
		if err := r.rooms.Remove(ctx, "s"); err != nil {
			t.Errorf("Remove: %v", err)
		}
		if err := r.rooms.Create(ctx, "gone", config()); !errors.Is(err, ErrNoSale) {
			t.Errorf("Create without a sale: %v", err)
		}
		if keys := append(r.roomKeys("s"), r.roomKeys("gone")...); len(keys) > 0 {
			t.Fatalf("keys made: %v", keys)
		}
	})
}

// TestCreateIdempotent: Create again with the same settings changes
// nothing (even after SetRate), with others it is ErrConfigChanged.
func TestCreateIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		r.create("s", config())
		r.join("s", "u")
		if err := r.rooms.SetRate(r.ctx, "s", 5); err != nil {
			t.Fatal(err)
		}
		r.create("s", config())
		other := config()
		other.MaxWaiting++
		if err := r.rooms.Create(r.ctx, "s", other); !errors.Is(err, ErrConfigChanged) {
			t.Fatalf("Create with other settings: %v", err)
		}
		if st := r.stats("s"); st.RatePerS != 5 || st.Drawing != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestSealAtDrawUntil: by the script's clock, a join a millisecond
// before draw_until is in the draw, one at it is not.
func TestSealAtDrawUntil(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		r.create("s", config())
		r.clock.Set(t0.Add(-time.Millisecond))
		if p := r.join("s", "before"); p.Status != Drawing {
			t.Fatalf("before: %+v", p)
		}
		if _, ok, _ := r.rooms.Entrants(r.ctx, "s"); ok {
			t.Fatal("entrants before the seal")
		}
		r.clock.Set(t0)
		if p := r.join("s", "at"); p.Status != Waiting || p.InDraw {
			t.Fatalf("at: %+v", p)
		}
		got, ok, err := r.rooms.Entrants(r.ctx, "s")
		if err != nil || !ok || !slices.Equal(got, []string{"before"}) {
			t.Fatalf("Entrants: %v %v %v", got, ok, err)
		}
	})
}

// TestSealByRedisClock: with Redis's own clock, the joins whose join time
// (Redis's) is before draw_until are in the draw, and the others not.
func TestSealByRedisClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, false)
		r.sale("s", 0, "A", 10)
		draw := time.Now().Add(300 * time.Millisecond)
		r.create("s", Config{OpensAt: time.Now().Add(-time.Minute), DrawUntil: draw, CapacityPerS: 10,
			AdmitTTL: time.Minute, MaxWaiting: 1000})
		var in, out int
		for i := 0; time.Now().Before(draw.Add(300 * time.Millisecond)); i++ {
			p := r.join("s", fmt.Sprint("u", i))
			before := p.JoinedAt.Before(draw.Truncate(time.Millisecond))
			if (p.Status == Drawing) != before {
				t.Fatalf("joined at %v (draw until %v): %s", p.JoinedAt, draw, p.Status)
			}
			if before {
				if out > 0 {
					t.Fatalf("in the draw after an arrival")
				}
				in++
			} else {
				out++
			}
			time.Sleep(10 * time.Millisecond)
		}
		if in == 0 || out == 0 {
			t.Fatalf("%d in the draw, %d after", in, out)
		}
	})
}

// TestAdmissionOrder: admissions follow the draw's order, then arrival
// order, exactly; a waiting buyer's position only goes down and counts
// the buyers ahead.
func TestAdmissionOrder(t *testing.T) {
	defer func(n int) { drawPart = n }(drawPart)
	drawPart = 7 // the draw written in several parts
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1000)
		cfg := config()
		cfg.RatePerS = 100
		r.create("s", cfg)
		drawn := users("d", 30)
		for i, u := range drawn {
			r.clock.Set(t0.Add(-time.Minute + time.Duration(i)*time.Second))
			r.join("s", u)
		}
		r.clock.Set(t0)
		arrivals := users("a", 10)
		for _, u := range arrivals {
			r.join("s", u)
			r.clock.Add(time.Millisecond)
		}
		if s := r.step("s"); !s.NeedsDraw || s.Admitted != 0 {
			t.Fatalf("step before the draw: %+v", s)
		}
		entrants, ok, err := r.rooms.Entrants(r.ctx, "s")
		if err != nil || !ok {
			t.Fatalf("Entrants: %v %v", ok, err)
		}
		secret, _, _ := NewSecret()
		d, err := RunDraw("s", secret, entrants)
		if err != nil {
			t.Fatal(err)
		}
		byEntry := map[string]string{}
		for _, u := range drawn {
			byEntry[Entry("s", u)] = u
		}
		var want []string
		for _, e := range d.Order {
			want = append(want, byEntry[e])
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", want); err != nil {
			t.Fatal(err)
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", want); err != nil {
			t.Fatalf("WriteDraw again: %v", err)
		}
		if _, ok, _ := r.rooms.Entrants(r.ctx, "s"); ok {
			t.Fatal("entrants after the draw")
		}
		want = append(want, arrivals...)
		last := map[string]int64{}
		for admitted := 0; admitted < len(want); {
			s := r.step("s")
			if s.NeedsDraw {
				t.Fatal("needs the draw after it")
			}
			admitted += s.Admitted
			for i, u := range want {
				p := r.place("s", u)
				switch {
				case i < admitted && p.Status != Admitted:
					t.Fatalf("after %d admissions, #%d %s is %s", admitted, i+1, u, p.Status)
				case i >= admitted && p.Status != Waiting:
					t.Fatalf("after %d admissions, #%d %s is %s", admitted, i+1, u, p.Status)
				case i >= admitted && (p.Position != int64(i-admitted+1) || p.InDraw != (i < len(drawn))):
					t.Fatalf("after %d admissions, #%d %s: %+v", admitted, i+1, u, p)
				case i >= admitted && last[u] != 0 && p.Position > last[u]:
					t.Fatalf("%s went back from %d to %d", u, last[u], p.Position)
				}
				last[u] = p.Position
			}
			r.clock.Add(10 * time.Millisecond)
		}
		if st := r.stats("s"); st.Admitted != int64(len(want)) || st.Waiting != 0 || !st.Drawn || st.DrawSize != 30 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestWriteDrawChecks: the draw written must be exactly the entrants.
func TestWriteDrawChecks(t *testing.T) {
	defer func(n int) { drawPart = n }(drawPart)
	drawPart = 2
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		r.create("s", config())
		for _, u := range []string{"a", "b", "c"} {
			r.join("s", u)
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", []string{"a", "b", "c"}); err == nil {
			t.Fatal("a draw written before the seal")
		}
		r.clock.Set(t0)
		r.join("s", "late")
		for _, bad := range [][]string{{"a", "b"}, {"a", "b", "late"}, {"a", "a", "b"}, {"a", "b", "c", "d"}} {
			if err := r.rooms.WriteDraw(r.ctx, "s", bad); err == nil {
				t.Fatalf("WriteDraw(%v) taken", bad)
			}
		}
		// The try of {"a", "b", "late"} wrote its first part, "a" and "b" at
		// ranks 1 and 2, before its second was refused: another order is
		// refused from then on, the same one goes on.
		if err := r.rooms.WriteDraw(r.ctx, "s", []string{"b", "a", "c"}); err == nil {
			t.Fatal("another order taken")
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.rooms.WriteDraw(r.ctx, "s", []string{"a", "b", "c"}); err != nil {
					t.Errorf("WriteDraw: %v", err)
				}
			}()
		}
		wg.Wait()
		for i, u := range []string{"a", "b", "c", "late"} {
			if p := r.place("s", u); p.Position != int64(i+1) {
				t.Fatalf("%s: %+v", u, p)
			}
		}
	})
}

// TestEmptyDraw: a draw nobody joined is still to be written (its record
// is published), but does not hold arrivals back.
func TestEmptyDraw(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u")
		if s := r.step("s"); !s.NeedsDraw || s.Admitted != 1 {
			t.Fatalf("step: %+v", s)
		}
		got, ok, err := r.rooms.Entrants(r.ctx, "s")
		if err != nil || !ok || got == nil || len(got) != 0 {
			t.Fatalf("Entrants: %v %v %v", got, ok, err)
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", got); err != nil {
			t.Fatal(err)
		}
		if s := r.step("s"); s.NeedsDraw {
			t.Fatalf("step after: %+v", s)
		}
	})
}

// admitted returns the nonces of users' live admissions, by user.
func (r *rig) admitted(sale string, us []string) map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, u := range us {
		if p := r.place(sale, u); p.Status == Admitted {
			out[u] = p.Nonce
		}
	}
	return out
}

// remaining is the sum of the sale's limited items' remaining.
func (r *rig) remaining(sale string) int64 {
	r.t.Helper()
	st, err := r.eng.Stock(r.ctx, sale)
	if err != nil {
		r.t.Fatal(err)
	}
	var n int64
	for _, it := range st.Items {
		if it.Remaining > 0 {
			n += it.Remaining
		}
	}
	return n
}

// TestStockRule: never more live admissions than units left of the
// limited items (summed); units coming back are offered on the next Step.
func TestStockRule(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 3, "B", 2)
		r.create("s", config())
		r.clock.Set(t0)
		us := users("u", 20)
		for _, u := range us {
			r.join("s", u)
		}
		check := func(wantLive int64) {
			t.Helper()
			st := r.stats("s")
			if st.Live != wantLive || st.Live > r.remaining("s") {
				t.Fatalf("live %d (want %d), remaining %d", st.Live, wantLive, r.remaining("s"))
			}
		}
		if s := r.step("s"); s.Admitted != 5 {
			t.Fatalf("first step: %+v", s)
		}
		r.clock.Add(time.Second)
		r.step("s")
		check(5)
		live := r.admitted("s", us)
		var orders []inventory.Order
		for u, nonce := range live {
			o := r.buy("s", u, "A", nonce)
			if err := r.rooms.MarkUsed(r.ctx, "s", u, nonce, o.ID); err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
			if len(orders) == 2 {
				break
			}
		}
		check(3) // 3 left, 3 live: the spends took theirs out at once
		r.step("s")
		check(3)
		if _, err := r.eng.Cancel(r.ctx, orders[0].ID, ""); err != nil {
			t.Fatal(err)
		}
		if s := r.step("s"); s.Admitted != 1 {
			t.Fatalf("after a cancel: %+v", s)
		}
		check(4)
		if _, err := r.eng.Restock(r.ctx, "s", "B", 2); err != nil {
			t.Fatal(err)
		}
		r.clock.Add(20 * time.Millisecond) // the next step, a step period on
		if s := r.step("s"); s.Admitted != 2 {
			t.Fatalf("after a restock: %+v", s)
		}
		check(6)
	})
}

// TestStockRuleUnlimited: a sale of unlimited items only admits as the
// rate allows; one that also has a limited item admits up to its units
// (the room's rule counts the limited items only).
func TestStockRuleUnlimited(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("all", 0, "X", -1)
		r.sale("mixed", 0, "A", 2, "X", -1)
		r.create("all", config())
		r.create("mixed", config())
		r.clock.Set(t0)
		for _, u := range users("u", 30) {
			r.join("all", u)
			r.join("mixed", u)
		}
		// 20 ms of credit at 1000/s: 21.
		if s := r.step("all"); s.Admitted != 21 {
			t.Fatalf("all unlimited: %+v", s)
		}
		if s := r.step("mixed"); s.Admitted != 2 {
			t.Fatalf("mixed: %+v", s)
		}
	})
}

// TestNotSelling: nobody is admitted before the sale starts, nor while
// it is paused.
func TestNotSelling(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 10)
		cfg := config()
		cfg.DrawUntil = cfg.OpensAt
		r.create("s", cfg)
		r.clock.Set(t0.Add(-time.Second))
		r.join("s", "u1")
		r.join("s", "u2")
		if s := r.step("s"); s.Admitted != 0 {
			t.Fatalf("before the start: %+v", s)
		}
		r.clock.Set(t0)
		if err := r.eng.Pause(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if s := r.step("s"); s.Admitted != 0 {
			t.Fatalf("paused: %+v", s)
		}
		if err := r.eng.Resume(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.clock.Add(20 * time.Millisecond) // the next step, a step period on
		if s := r.step("s"); s.Admitted != 2 {
			t.Fatalf("resumed: %+v", s)
		}
	})
}

// TestLapse: an admission not used by admitted_until is lapsed at once,
// and its slot freed a grace later; the lapsed user's join is a new place
// at the back.
func TestLapse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1)
		r.create("s", config())
		r.clock.Set(t0)
		for _, u := range []string{"u1", "u2", "u3"} {
			r.join("s", u)
		}
		r.step("s")
		p := r.place("s", "u1")
		if p.Status != Admitted || !p.AdmittedUntil.Equal(t0.Add(10*time.Second)) {
			t.Fatalf("u1: %+v", p)
		}
		r.clock.Set(p.AdmittedUntil.Add(-time.Millisecond))
		if c, _ := r.rooms.Check(r.ctx, "s", "u1", p.Nonce); c != CheckAdmitted {
			t.Fatalf("check before until: %v", c)
		}
		r.clock.Set(p.AdmittedUntil)
		if c, _ := r.rooms.Check(r.ctx, "s", "u1", p.Nonce); c != CheckLapsed {
			t.Fatalf("check at until: %v", c)
		}
		if q := r.place("s", "u1"); q.Status != Lapsed {
			t.Fatalf("u1 at until: %+v", q)
		}
		r.clock.Set(p.AdmittedUntil.Add(499 * time.Millisecond))
		if s := r.step("s"); s.Lapsed != 0 || s.Admitted != 0 {
			t.Fatalf("within the grace: %+v", s)
		}
		r.clock.Set(p.AdmittedUntil.Add(500 * time.Millisecond))
		if s := r.step("s"); s.Lapsed != 1 || s.Admitted != 1 {
			t.Fatalf("past the grace: %+v", s)
		}
		if q := r.place("s", "u2"); q.Status != Admitted {
			t.Fatalf("u2: %+v", q)
		}
		q := r.join("s", "u1")
		if q.Status != Waiting || q.Position != 2 || !q.JoinedAt.Equal(r.clock.Now()) {
			t.Fatalf("u1 again: %+v", q)
		}
		// u2's admission, past its grace but not yet ended by a Step, ends
		// at u2's join: within the grace it is still the lapsed admission.
		p2 := r.place("s", "u2")
		r.clock.Set(p2.AdmittedUntil.Add(499 * time.Millisecond))
		if q := r.join("s", "u2"); q.Status != Lapsed {
			t.Fatalf("u2 within the grace: %+v", q)
		}
		r.clock.Set(p2.AdmittedUntil.Add(500 * time.Millisecond))
		if q := r.join("s", "u2"); q.Status != Waiting || q.Position != 3 {
			t.Fatalf("u2 past the grace: %+v", q)
		}
		r.step("s") // admits u3 (the slot u2 freed)
		if c, _ := r.rooms.Check(r.ctx, "s", "u1", p.Nonce); c != CheckNone {
			t.Fatalf("the old admission: %v", c)
		}
		if st := r.stats("s"); st.Lapsed != 2 || st.Admitted != 3 || st.Waiting != 2 || st.Live != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestLapseOfSpent: an admission a buy spent (1 ms before its until) is
// used with its order at once, out of the live ones and counted, before
// any step; a step past its until and grace, and its user's join, leave
// it so: no lapse ends a used admission, and it makes no new place.
func TestLapseOfSpent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u")
		r.step("s")
		p := r.place("s", "u")
		r.clock.Set(p.AdmittedUntil.Add(-time.Millisecond))
		o, err := r.buyGated("s", "u", "A", p)
		if err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			if q := r.place("s", "u"); q.Status != Used || q.OrderID != o.ID {
				t.Fatalf("%s: place %+v, want used with %s", when, q, o.ID)
			}
			if c, err := r.rooms.Check(r.ctx, "s", "u", p.Nonce); c != CheckUsed || err != nil {
				t.Fatalf("%s: Check %v %v", when, c, err)
			}
			if st := r.stats("s"); st.Used != 1 || st.Lapsed != 0 || st.Live != 0 || st.Waiting != 0 {
				t.Fatalf("%s: stats %+v", when, st)
			}
		}
		check("right after the buy")
		r.clock.Set(p.AdmittedUntil.Add(time.Second))
		if s := r.step("s"); s.Lapsed != 0 {
			t.Fatalf("step: %+v", s)
		}
		check("after a step past the grace")
		if q := r.join("s", "u"); q.Status != Used || q.OrderID != o.ID {
			t.Fatalf("join: %+v", q)
		}
		check("after its user's join")
	})
}

// TestCheckAndMarkUsed: Check tells a live, used, lapsed or foreign
// admission apart; MarkUsed spends a live admission once, as a gated buy
// does (used with the order, out of the live ones, counted), and refuses
// (errNotLive, nothing written) anything else: another nonce, another
// user's, a user never admitted, the admission again, the admission at
// its until, and after its lapse.
func TestCheckAndMarkUsed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u")
		r.join("s", "v")
		r.step("s")
		p := r.place("s", "u")
		for _, c := range []struct {
			user, nonce string
			want        AdmissionCheck
		}{{"u", p.Nonce, CheckAdmitted}, {"u", "00", CheckNone}, {"v", p.Nonce, CheckNone}, {"w", p.Nonce, CheckNone}} {
			if got, err := r.rooms.Check(r.ctx, "s", c.user, c.nonce); got != c.want || err != nil {
				t.Fatalf("Check(%s, %s): %v %v, want %v", c.user, c.nonce, got, err, c.want)
			}
		}
		for _, c := range []struct{ user, nonce string }{{"u", "00"}, {"v", p.Nonce}, {"w", p.Nonce}} {
			if err := r.rooms.MarkUsed(r.ctx, "s", c.user, c.nonce, "o"); !errors.Is(err, errNotLive) {
				t.Fatalf("MarkUsed(%s, %s): %v, want errNotLive", c.user, c.nonce, err)
			}
		}
		if st := r.stats("s"); st.Used != 0 || st.Live != 2 {
			t.Fatalf("stats after refused spends: %+v", st)
		}
		o := r.buy("s", "u", "A", p.Nonce)
		if err := r.rooms.MarkUsed(r.ctx, "s", "u", p.Nonce, o.ID); err != nil {
			t.Fatal(err)
		}
		if err := r.rooms.MarkUsed(r.ctx, "s", "u", p.Nonce, "again"); !errors.Is(err, errNotLive) {
			t.Fatalf("MarkUsed again: %v, want errNotLive", err)
		}
		if got, _ := r.rooms.Check(r.ctx, "s", "u", p.Nonce); got != CheckUsed {
			t.Fatalf("Check after MarkUsed: %v", got)
		}
		if q := r.join("s", "u"); q.Status != Used || q.OrderID != o.ID {
			t.Fatalf("join after use: %+v", q)
		}
		if st := r.stats("s"); st.Used != 1 || st.Lapsed != 0 || st.Live != 1 {
			t.Fatalf("stats after the spend: %+v", st)
		}
		// v's admission at its until, and after its lapse: not spent.
		v := r.place("s", "v")
		r.clock.Set(v.AdmittedUntil)
		if err := r.rooms.MarkUsed(r.ctx, "s", "v", v.Nonce, "late-order"); !errors.Is(err, errNotLive) {
			t.Fatalf("MarkUsed at until: %v, want errNotLive", err)
		}
		if got, _ := r.rooms.Check(r.ctx, "s", "v", v.Nonce); got != CheckLapsed {
			t.Fatalf("Check of v at until: %v", got)
		}
		r.clock.Set(v.AdmittedUntil.Add(time.Second))
		if s := r.step("s"); s.Lapsed != 1 {
			t.Fatalf("step: %+v", s)
		}
		if err := r.rooms.MarkUsed(r.ctx, "s", "v", v.Nonce, "late-order"); !errors.Is(err, errNotLive) {
			t.Fatalf("MarkUsed after the lapse: %v, want errNotLive", err)
		}
		if q := r.place("s", "v"); q.Status != Lapsed || q.OrderID != "" {
			t.Fatalf("v after a late spend: %+v", q)
		}
		if got, _ := r.rooms.Check(r.ctx, "s", "v", v.Nonce); got != CheckLapsed {
			t.Fatalf("Check of v after its lapse: %v", got)
		}
		if st := r.stats("s"); st.Admitted != 2 || st.Used != 1 || st.Lapsed != 1 || st.Live != 0 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestSoldOut: waiting buyers read sold_out once no unit is left, no
// admission is live and no reservation awaits payment, and waiting (at
// the same place) again when units come back.
func TestSoldOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", time.Minute, "A", 1)
		r.create("s", config())
		r.clock.Set(t0)
		for _, u := range []string{"u1", "u2", "u3"} {
			r.join("s", u)
		}
		r.step("s")
		p := r.place("s", "u1")
		// The unit taken (an ungated buy) while u1's admission is live.
		o := r.buy("s", "u1", "A", p.Nonce)
		if q := r.place("s", "u2"); q.Status != Waiting {
			t.Fatalf("with a live admission: %+v", q)
		}
		// The admission spent as the gated buy spends it: none is live.
		if err := r.rooms.MarkUsed(r.ctx, "s", "u1", p.Nonce, o.ID); err != nil {
			t.Fatal(err)
		}
		if st := r.stats("s"); st.Live != 0 || st.Used != 1 {
			t.Fatalf("stats after the spend: %+v", st)
		}
		if q := r.place("s", "u2"); q.Status != Waiting {
			t.Fatalf("with a reservation awaiting payment: %+v", q)
		}
		if _, _, err := r.eng.Pay(r.ctx, o.ID, "u1", "ref1"); err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"u2", "u3"} {
			if q := r.place("s", u); q.Status != SoldOut {
				t.Fatalf("%s once sold: %+v", u, q)
			}
		}
		if q := r.place("s", "u1"); q.Status != Used {
			t.Fatalf("u1: %+v", q)
		}
		if _, err := r.eng.Restock(r.ctx, "s", "A", 1); err != nil {
			t.Fatal(err)
		}
		if q := r.place("s", "u3"); q.Status != Waiting || q.Position != 2 {
			t.Fatalf("u3 after a restock: %+v", q)
		}
		if s := r.step("s"); s.Admitted != 1 {
			t.Fatalf("step after a restock: %+v", s)
		}
		if q := r.place("s", "u2"); q.Status != Admitted {
			t.Fatalf("u2 after a restock: %+v", q)
		}
	})
}

// TestRateExact checks the admission clock's arithmetic on the script's
// clock: Step every 20 ms (or at uneven times no further apart) admits
// the rate in every second, to one admission.
func TestRateExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		for _, c := range []struct {
			rate         int64
			jitter, late bool
		}{{100, false, false}, {333, false, false}, {7, false, false}, {250, true, false}, {1000, false, true}} {
			t.Run(fmt.Sprintf("%d/s jitter %v late %v", c.rate, c.jitter, c.late), func(t *testing.T) {
				r := newRig(t, b, true)
				r.sale("s", 0, "X", -1)
				cfg := config()
				cfg.RatePerS, cfg.DrawUntil, cfg.MaxWaiting = c.rate, cfg.OpensAt, 10000
				r.create("s", cfg)
				const secs = 4
				n := int(c.rate)*secs + 5
				pipe := r.rdb.Pipeline()
				for _, u := range users("u", n) {
					pipe.EvalSha(r.ctx, roomScript.SHA, r.rooms.keys("s"), "join", r.clock.Now().UnixMicro(), u)
				}
				r.step("s") // loads the script; nobody is admitted before t0
				if _, err := pipe.Exec(r.ctx); err != nil {
					t.Fatal(err)
				}
				r.clock.Set(t0)
				perSecond := make([]int64, secs)
				gaps := []time.Duration{20 * time.Millisecond}
				if c.late { // steps of a loaded instance: up to 45 ms apart
					gaps = []time.Duration{25 * time.Millisecond, 45 * time.Millisecond, 31 * time.Millisecond, 38 * time.Millisecond}
				}
				if c.jitter {
					gaps = []time.Duration{3, 20, 11, 1, 17, 20, 7, 13}
					for i := range gaps {
						gaps[i] *= time.Millisecond
					}
				}
				for i := 0; r.clock.Now().Before(t0.Add(secs * time.Second)); i++ {
					s := r.step("s")
					perSecond[r.clock.Now().Sub(t0)/time.Second] += int64(s.Admitted)
					r.clock.Add(gaps[i%len(gaps)])
				}
				for i, got := range perSecond {
					lo, hi := c.rate-1, c.rate+1
					if c.jitter { // a call up to 20 ms after the second's last admission
						lo, hi = c.rate*98/100-1, c.rate*102/100+1
					}
					if c.late { // admissions are made at steps, up to 45 ms apart: none is lost
						lo, hi = c.rate*95/100, c.rate*105/100
					}
					if i == 0 {
						hi += c.rate/50 + 1 // the first call's credit
					}
					if got < lo || got > hi {
						t.Errorf("second %d: %d admitted, rate %d", i, got, c.rate)
					}
				}
				if c.late { // late steps catch up: the seconds add up to the rate
					var all int64
					for _, got := range perSecond {
						all += got
					}
					if want := c.rate * secs; all < want-c.rate/20 || all > want+c.rate/50+1 {
						t.Errorf("%d admitted in %d s at %d/s", all, secs, c.rate)
					}
				}
			})
		}
	})
}

// TestConcurrentSteps: two instances stepping at once, on Redis's clock,
// never admit past the rate nor past the stock.
func TestConcurrentSteps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, false)
		r.sale("rated", 0, "X", -1)
		r.sale("stocked", 0, "A", 25)
		const rate = 200
		cfg := Config{OpensAt: time.Now().Add(-time.Minute), DrawUntil: time.Now().Add(-time.Minute),
			RatePerS: rate, CapacityPerS: 1000, AdmitTTL: time.Minute, MaxWaiting: 10000}
		r.create("rated", cfg)
		cfg.RatePerS = 0
		r.create("stocked", cfg)
		// The joins in one pipeline of EVALSHA; a package running beside
		// on the same Redis may flush its scripts (NOSCRIPT): load the
		// script again and send the pipeline again (a join is idempotent).
		for attempt := 1; ; attempt++ {
			r.step("rated") // loads the script
			r.step("stocked")
			pipe := r.rdb.Pipeline()
			for _, u := range users("u", 600) {
				for _, sale := range []string{"rated", "stocked"} {
					pipe.EvalSha(r.ctx, roomScript.SHA, r.rooms.keys(sale), "join", "", u)
				}
			}
			_, err := pipe.Exec(r.ctx)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "NOSCRIPT") || attempt == 5 {
				t.Fatal(err)
			}
		}
		start := time.Now()
		before := r.stats("rated").Admitted
		var wg sync.WaitGroup
		for range 2 {
			rooms := r.newRooms(b.Client(t))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 1500*time.Millisecond {
					for _, sale := range []string{"rated", "stocked"} {
						if _, err := rooms.Step(r.ctx, sale); err != nil {
							t.Error(err)
							return
						}
					}
					st, err := rooms.Stats(r.ctx, "stocked")
					if err != nil || st.Live > 25 || st.Admitted > 25 {
						t.Errorf("stocked: %+v %v", st, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start) // at least Redis's time between the steps
		got := r.stats("rated").Admitted - before
		most := int64(float64(rate)*(elapsed+20*time.Millisecond).Seconds()) + 1
		if got > most || got < most/3 {
			t.Fatalf("%d admitted in %v at %d/s (at most %d)", got, elapsed, rate, most)
		}
		if st := r.stats("stocked"); st.Admitted != 25 {
			t.Fatalf("stocked: %+v", st)
		}
	})
}

// TestRemove: Remove deletes every key of the room, and nothing made
// afterwards brings one back.
func TestRemove(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 2)
		cfg := config()
		cfg.MaxWaiting = 1000 // 16 buckets
		r.create("s", cfg)
		us := users("u", 40)
		for _, u := range us[:20] {
			r.join("s", u)
		}
		r.clock.Set(t0)
		for _, u := range us[20:] {
			r.join("s", u)
		}
		entrants, _, _ := r.rooms.Entrants(r.ctx, "s")
		if err := r.rooms.WriteDraw(r.ctx, "s", entrants); err != nil {
			t.Fatal(err)
		}
		r.step("s")
		r.clock.Add(time.Second)
		r.step("s")
		if keys := r.roomKeys("s"); len(keys) < 8 {
			t.Fatalf("room keys before: %v", keys)
		}
		if err := r.rooms.Remove(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if keys := r.roomKeys("s"); len(keys) > 0 {
			t.Fatalf("left: %v", keys)
		}
		if _, err := r.rooms.Join(r.ctx, "s", "new"); !errors.Is(err, ErrNoRoom) {
			t.Fatalf("join after Remove: %v", err)
		}
		r.rooms.Step(r.ctx, "s")
		r.rooms.Place(r.ctx, "s", "u1")
		if err := r.rooms.MarkUsed(r.ctx, "s", "u1", "00", "o"); err == nil {
			t.Fatal("MarkUsed after Remove spent an admission")
		}
		if err := r.rooms.Remove(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if keys := r.roomKeys("s"); len(keys) > 0 {
			t.Fatalf("made again: %v", keys)
		}
	})
}
