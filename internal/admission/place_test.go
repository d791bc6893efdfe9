package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// agree requires Place (plain reads in Go) to answer as the script's
// place does, for each of users, read one by one and all in one pipeline
// (as concurrent reads go).
func (r *rig) agree(sale string, users ...string) {
	r.t.Helper()
	batch, err := r.rooms.readStates(r.ctx, sale, users)
	if err != nil {
		r.t.Fatal(err)
	}
	for i, u := range users {
		want, werr := r.rooms.placeByScript(r.ctx, sale, u)
		got, gerr := r.rooms.Place(r.ctx, sale, u)
		if got != want || !errors.Is(gerr, werr) && (werr != nil || gerr != nil) {
			r.t.Fatalf("%s at %v: Place %+v (%v), the script's place %+v (%v)", u, r.clock.Now(), got, gerr, want, werr)
		}
		s := batch[i]
		if !s.joined {
			if !errors.Is(werr, ErrNotJoined) {
				r.t.Fatalf("%s: not joined in a pipeline of many, the script's place %+v (%v)", u, want, werr)
			}
			continue
		}
		if inBatch, err := placeOfState(s.st, s.head, s.dsize, r.rooms.nowMs(s.facts), s.facts); inBatch != want || err != nil {
			r.t.Fatalf("%s at %v: read among many %+v (%v), the script's place %+v", u, r.clock.Now(), inBatch, err, want)
		}
	}
}

// TestPlaceAgreesWithScript walks a room through every state a place can
// show — drawing, waiting, admitted, lapsed (at until, before and after a
// step ends it), used (by a gated buy, or by MarkUsed after an ungated
// buy, before and after a step), late spends refused, sold out before
// and after the draw — and requires Place to answer as the script's place
// at each step, for every user.
func TestPlaceAgreesWithScript(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", time.Minute, "A", 3)
		r.create("s", config())
		us := []string{"d1", "d2", "d3", "d4", "a1", "a2", "nobody", "d2"}
		r.clock.Set(t0.Add(-10 * time.Second))
		for _, u := range us[:4] {
			r.join("s", u)
		}
		r.agree("s", us...) // drawing; never joined
		r.clock.Set(t0)
		r.join("s", "a1")
		r.agree("s", us...) // sealed, not drawn: drawing; an arrival
		entrants, _, err := r.rooms.Entrants(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", entrants); err != nil {
			t.Fatal(err)
		}
		r.join("s", "a2")
		r.agree("s", us...) // drawn: waiting, in draw or not
		r.step("s")         // admits three (the stock)
		r.agree("s", us...)
		var admitted []Place
		var who []string
		for _, u := range us[:6] {
			if p := r.place("s", u); p.Status == Admitted {
				admitted, who = append(admitted, p), append(who, u)
			}
		}
		if len(admitted) != 3 {
			t.Fatalf("admitted: %v", who)
		}
		// One buys gated, one buys ungated and the spend is marked as the
		// gated buy marks it, one lets its admission lapse.
		o, err := r.buyGated("s", who[0], "A", admitted[0])
		if err != nil {
			t.Fatal(err)
		}
		o1 := r.buy("s", who[1], "A", admitted[1].Nonce)
		if err := r.rooms.MarkUsed(r.ctx, "s", who[1], admitted[1].Nonce, o1.ID); err != nil {
			t.Fatal(err)
		}
		r.agree("s", us...)
		for i, order := range []string{o.ID, o1.ID} {
			if p := r.place("s", who[i]); p.Status != Used || p.OrderID != order {
				t.Fatalf("%s after its buy, before a step: %+v, want used with %s", who[i], p, order)
			}
		}
		r.clock.Set(admitted[2].AdmittedUntil) // lapsed, not yet ended by a step
		r.agree("s", us...)
		// Late spends of the lapsed admission (before the step ends it, and
		// after) and of a used one: refused, nothing changes.
		late := func() {
			t.Helper()
			if err := r.rooms.MarkUsed(r.ctx, "s", who[2], admitted[2].Nonce, "late"); !errors.Is(err, errNotLive) {
				t.Fatalf("a late spend of %s: %v, want errNotLive", who[2], err)
			}
			if err := r.rooms.MarkUsed(r.ctx, "s", who[1], admitted[1].Nonce, "again"); !errors.Is(err, errNotLive) {
				t.Fatalf("%s's used admission spent again: %v, want errNotLive", who[1], err)
			}
		}
		late()
		r.agree("s", us...)
		r.clock.Add(time.Second)
		if s := r.step("s"); s.Lapsed != 1 {
			t.Fatalf("the step past the grace: %+v, want %s lapsed", s, who[2])
		}
		r.agree("s", us...)
		late()
		r.agree("s", us...)
		r.step("s")
		r.agree("s", us...)
		if p := r.place("s", who[2]); p.Status != Lapsed {
			t.Fatalf("%s after the late spends: %+v", who[2], p)
		}
		// Sold out: the lapsed unit bought by the next in line, no unit
		// left, no admission live, no reservation awaiting payment once
		// the orders are paid.
		orders := map[string]string{who[0]: o.ID, who[1]: o1.ID}
		for _, u := range us[:6] {
			if p := r.place("s", u); p.Status == Admitted {
				ou, err := r.buyGated("s", u, "A", p)
				if err != nil {
					t.Fatal(err)
				}
				orders[u] = ou.ID
			}
		}
		if len(orders) != 3 {
			t.Fatalf("orders: %v", orders)
		}
		r.agree("s", us...)
		r.step("s")
		for u, o := range orders {
			if _, _, err := r.eng.Pay(r.ctx, o, u, "ref"); err != nil {
				t.Fatal(err)
			}
		}
		r.agree("s", us...)
		if p := r.place("s", "a2"); p.Status != SoldOut {
			t.Fatalf("a2 once sold: %+v", p)
		}
	})
}

// TestPlaceFactsKept: with SetFactsMaxAge, a place read uses the facts
// the room's last call read — no script — and still answers as the
// script does while they are fresh.
func TestPlaceFactsKept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0)
		for _, u := range users("u", 8) {
			r.join("s", u)
		}
		counted := b.Client(t)
		var scripts atomic.Int64
		counted.AddHook(scriptCounter{&scripts})
		rooms := r.newRooms(counted)
		rooms.SetFactsMaxAge(time.Hour)
		if _, err := rooms.Step(r.ctx, "s"); err != nil { // reads the facts
			t.Fatal(err)
		}
		scripts.Store(0)
		for _, u := range users("u", 8) {
			want, err := rooms.placeByScript(r.ctx, "s", u)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rooms.Place(r.ctx, "s", u)
			if err != nil || got != want {
				t.Fatalf("%s: Place %+v (%v), the script's %+v", u, got, err, want)
			}
		}
		if n := scripts.Load(); n != 8 { // the script's places alone
			t.Fatalf("%d scripts for 8 places read twice, want the 8 of placeByScript", n)
		}
		// Without facts kept, a read reads them, in its one round trip.
		fresh := r.newRooms(counted)
		scripts.Store(0)
		if _, err := fresh.Place(r.ctx, "s", "u7"); err != nil {
			t.Fatal(err)
		}
		if n := scripts.Load(); n != 1 {
			t.Fatalf("%d scripts for a read without facts", n)
		}
	})
}

// scriptCounter counts the EVALSHA and EVAL commands a client sends.
type scriptCounter struct{ n *atomic.Int64 }

func (h scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h scriptCounter) count(cmd redis.Cmder) {
	if n := strings.ToLower(cmd.Name()); n == "evalsha" || n == "eval" {
		h.n.Add(1)
	}
}

// TestJoinBatch: one join call of many users keeps every rule of a join
// alone: the same user twice is one place, max_waiting counts across the
// call, a lapsed user who joins again goes to the back, and a call at
// draw_until makes arrivals.
func TestJoinBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1)
		cfg := config()
		cfg.MaxWaiting = 4
		r.create("s", cfg)
		r.clock.Set(t0.Add(-time.Second))
		got, err := r.rooms.joinMany(r.ctx, "s", []string{"u1", "u2", "u1", "u3"})
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != got[2] || got[0].err != nil || got[0].place.Status != Drawing || got[1].place.Status != Drawing {
			t.Fatalf("the same user twice: %+v", got)
		}
		if st := r.stats("s"); st.Drawing != 3 {
			t.Fatalf("stats after 3 users (one twice): %+v", st)
		}
		r.clock.Set(t0) // sealed: arrivals, and a full room past the 4th
		got, err = r.rooms.joinMany(r.ctx, "s", []string{"a1", "a2", "u2", "a2"})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].err != nil || got[0].place.Status != Waiting || got[0].place.InDraw {
			t.Fatalf("an arrival at draw_until: %+v", got[0])
		}
		if !errors.Is(got[1].err, ErrRoomFull) || !errors.Is(got[3].err, ErrRoomFull) {
			t.Fatalf("past max_waiting in one call: %+v", got)
		}
		if got[2].err != nil || got[2].place.Status != Drawing {
			t.Fatalf("a member joins again in a full room: %+v", got[2])
		}
		entrants, _, err := r.rooms.Entrants(r.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.rooms.WriteDraw(r.ctx, "s", entrants); err != nil {
			t.Fatal(err)
		}
		r.step("s") // one unit: one admitted
		var first string
		var p Place
		for _, u := range entrants {
			if p = r.place("s", u); p.Status == Admitted {
				first = u
				break
			}
		}
		if first == "" {
			t.Fatal("nobody admitted")
		}
		r.clock.Set(p.AdmittedUntil.Add(time.Second)) // lapses, unended
		got, err = r.rooms.joinMany(r.ctx, "s", []string{first, "late", first})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].err != nil || got[0].place.Status != Waiting || got[0].place.Position != 4 || got[2] != got[0] {
			t.Fatalf("lapsed, joining again in a call: %+v", got)
		}
		if !errors.Is(got[1].err, ErrRoomFull) {
			t.Fatalf("a newcomer behind it in a full room: %+v", got[1])
		}
		if st := r.stats("s"); st.Waiting != 4 || st.Lapsed != 1 || st.Live != 0 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestJoinsCoalesce: joins of one room made while a call is in flight go
// together in the next call, each with its own place.
func TestJoinsCoalesce(t *testing.T) {
	release := make(chan struct{})
	var calls [][]string
	var mu sync.Mutex
	b := newBatcher(3, func(_ context.Context, key string, users []string) ([]string, error) {
		mu.Lock()
		calls = append(calls, users)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := make([]string, len(users))
		for i, u := range users {
			out[i] = key + ":" + u
		}
		return out, nil
	})
	var wg sync.WaitGroup
	results := make([]string, 6)
	do := func(i int) {
		defer wg.Done()
		out, err := b.do(context.Background(), "s", fmt.Sprint("u", i))
		if err != nil {
			t.Error(err)
		}
		results[i] = out
	}
	wg.Add(1)
	go do(0)
	waitQueued := func(n int) {
		for {
			b.mu.Lock()
			q, ok := b.queues["s"]
			queued := ok && len(*q) == n
			b.mu.Unlock()
			if queued {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitQueued(0) // the first call is in flight
	for i := 1; i < 6; i++ {
		wg.Add(1)
		go do(i)
	}
	waitQueued(5)
	close(release)
	wg.Wait()
	if len(calls) != 3 || len(calls[0]) != 1 || len(calls[1]) != 3 || len(calls[2]) != 2 {
		t.Fatalf("calls: %v, want one alone, then the 5 queued behind it in calls of at most 3", calls)
	}
	for i, got := range results {
		if got != fmt.Sprint("s:u", i) {
			t.Fatalf("result %d: %q", i, got)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queues) != 0 {
		t.Fatalf("an idle key kept: %v", b.queues)
	}
}

// TestJoinsConcurrent: many joins at once through Join, on two instances,
// give every user one place, each rank once, and never more than
// max_waiting.
func TestJoinsConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1)
		cfg := config()
		cfg.MaxWaiting = 150
		r.create("s", cfg)
		r.clock.Set(t0)
		other := r.newRooms(b.Client(t))
		var wg sync.WaitGroup
		var mu sync.Mutex
		byUser := map[string]Place{}
		full := 0
		for i := range 200 {
			for _, rooms := range []*Rooms{r.rooms, other} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					u := fmt.Sprint("u", i)
					p, err := rooms.Join(r.ctx, "s", u)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, ErrRoomFull):
						full++
					case err != nil:
						t.Error(err)
					default:
						if had, ok := byUser[u]; ok && had != p {
							t.Errorf("%s: two places %+v and %+v", u, had, p)
						}
						byUser[u] = p
					}
				}()
			}
		}
		wg.Wait()
		ranks := map[int64]string{}
		for u, p := range byUser {
			if p.Status != Waiting {
				t.Fatalf("%s: %+v", u, p)
			}
			if had, ok := ranks[p.Position]; ok {
				t.Fatalf("%s and %s at position %d", u, had, p.Position)
			}
			ranks[p.Position] = u
		}
		if len(byUser) != 150 || full < 100 {
			t.Fatalf("%d placed, %d refused full; want 150 placed", len(byUser), full)
		}
		if st := r.stats("s"); st.Waiting != 150 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestCheckSeesSpendAtOnce: Check sees a gated buy's spend at once
// (used, before any step), tells another nonce apart, and tells a live
// admission from a lapsed one by the script's clock (lapsed from until
// on); a buy refused at until leaves the admission unspent.
func TestCheckSeesSpendAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u")
		r.join("s", "v")
		r.step("s")
		p, v := r.place("s", "u"), r.place("s", "v")
		if c, err := r.rooms.Check(r.ctx, "s", "u", p.Nonce); c != CheckAdmitted || err != nil {
			t.Fatalf("Check: %v %v", c, err)
		}
		o, err := r.buyGated("s", "u", "A", p)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := r.rooms.Check(r.ctx, "s", "u", p.Nonce); c != CheckUsed {
			t.Fatalf("Check after the buy: %v", c)
		}
		if c, _ := r.rooms.Check(r.ctx, "s", "u", "ffff"); c != CheckNone {
			t.Fatalf("Check of another nonce: %v", c)
		}
		if q := r.join("s", "u"); q.Status != Used || q.OrderID != o.ID {
			t.Fatalf("join after the buy: %+v", q)
		}
		r.clock.Set(v.AdmittedUntil.Add(-time.Millisecond))
		if c, _ := r.rooms.Check(r.ctx, "s", "v", v.Nonce); c != CheckAdmitted {
			t.Fatalf("Check of v 1 ms before until: %v", c)
		}
		r.clock.Set(v.AdmittedUntil)
		if c, _ := r.rooms.Check(r.ctx, "s", "v", v.Nonce); c != CheckLapsed {
			t.Fatalf("Check of v at until: %v", c)
		}
		if _, err := r.buyGated("s", "v", "A", v); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("v's buy at until: %v, want ErrTokenSpent", err)
		}
		if c, _ := r.rooms.Check(r.ctx, "s", "v", v.Nonce); c != CheckLapsed {
			t.Fatalf("Check of v after a refused buy: %v", c)
		}
		if st := r.stats("s"); st.Used != 1 || st.Live != 1 {
			t.Fatalf("stats: %+v, want 1 used (u), 1 live (v, until a step)", st)
		}
	})
}

// TestStaleFacts: with facts kept for long, a gated buy of the last unit
// and Stale show every buyer in line sold_out at their next read, before
// any step (the buy took its admission out of the live ones at once).
func TestStaleFacts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 1)
		r.create("s", config())
		r.clock.Set(t0)
		r.join("s", "u1")
		r.join("s", "u2")
		r.rooms.SetFactsMaxAge(time.Hour)
		r.step("s")
		p := r.place("s", "u1")
		if q := r.place("s", "u2"); p.Status != Admitted || q.Status != Waiting {
			t.Fatalf("u1 %+v, u2 %+v", p, q)
		}
		if _, err := r.buyGated("s", "u1", "A", p); err != nil {
			t.Fatal(err)
		}
		if q := r.place("s", "u2"); q.Status != Waiting {
			t.Fatalf("u2 with the facts kept: %+v", q)
		}
		r.rooms.Stale("s")
		if q := r.place("s", "u2"); q.Status != SoldOut {
			t.Fatalf("u2 once stale: %+v", q)
		}
		if st := r.stats("s"); st.Used != 1 || st.Live != 0 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestParseStateStrict: every state room.lua writes parses, and nothing
// else does: a corrupt value is an error, never some place.
func TestParseStateStrict(t *testing.T) {
	good := map[string]state{
		"d17":               {kind: 'd', joined: 17},
		"w3:17":             {kind: 'w', rank: 3, joined: 17},
		"a17:0af:99:1":      {kind: 'a', joined: 17, nonce: "0af", until: 99, inDraw: true},
		"u17:0af:0:s.01J:x": {kind: 'u', joined: 17, nonce: "0af", order: "s.01J:x"},
		"u17::1:":           {kind: 'u', joined: 17, inDraw: true},
		"l17:0af:0":         {kind: 'l', joined: 17, nonce: "0af"},
	}
	for st, want := range good {
		if got, err := parseState(st); err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", st, got, err, want)
		}
	}
	for _, st := range []string{"", "q", "d", "dx", "d1:2", "w1", "wx:1", "w1:2:3", "w-1:2", "a1:zz:2:1", "a1::2:1",
		"a1:0a:2:2", "a1:0a:x:1", "a1:0a:2", "u1:0a:2:o", "u1:0A:1:o", "l1:0a", "l1:0a:3", "lx:0a:1"} {
		if got, err := parseState(st); err == nil {
			t.Errorf("%q parsed as %+v", st, got)
		}
	}
}
