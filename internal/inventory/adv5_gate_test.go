package inventory_test

import (
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// adv5Room is a waiting room's keys of sale s1 as the room writes them,
// with nb state hashes.
type adv5Room struct {
	r              *rig
	live, cfg, pfx string
	nb             int
}

func newAdv5Room(r *rig, nb int) *adv5Room {
	mustDo(r.t, r.rdb.HSet(r.ctx, r.key("s1", "room:cfg"), "nb", nb, "used", 0, "admitted", 0, "lapsed", 0).Err())
	return &adv5Room{r: r, live: r.key("s1", "room:live"), cfg: r.key("s1", "room:cfg"), pfx: r.key("s1", "room:b:"), nb: nb}
}

// bucket is user's state hash, as room.lua's bucket().
func (a *adv5Room) bucket(user string) string {
	sum := sha1.Sum([]byte(user))
	return a.pfx + strconv.FormatInt(int64(binary.BigEndian.Uint32(sum[:4]))%int64(a.nb), 10)
}

// admit gives user the live admission nonce until until, as the room's
// step does (state, live, admitted counted).
func (a *adv5Room) admit(user, nonce string, until time.Time) {
	r := a.r
	st := "a1:" + nonce + ":" + strconv.FormatInt(until.UnixMilli(), 10) + ":0"
	mustDo(r.t, r.rdb.HSet(r.ctx, a.bucket(user), user, st).Err())
	mustDo(r.t, r.rdb.ZAdd(r.ctx, a.live, redisZ(until, user)).Err())
	mustDo(r.t, r.rdb.HIncrBy(r.ctx, a.cfg, "admitted", 1).Err())
}

func (a *adv5Room) state(user string) string {
	return a.r.rdb.HGet(a.r.ctx, a.bucket(user), user).Val()
}

// counts checks admitted = used + lapsed + live.
func (a *adv5Room) counts(when string) {
	r := a.r
	r.t.Helper()
	c := r.rdb.HMGet(r.ctx, a.cfg, "admitted", "used", "lapsed").Val()
	n := func(v any) int64 {
		s, _ := v.(string)
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			r.t.Fatalf("%s: room:cfg count %q", when, s)
		}
		return x
	}
	live := r.rdb.ZCard(r.ctx, a.live).Val()
	if n(c[0]) != n(c[1])+n(c[2])+live {
		r.t.Errorf("%s: admitted %v != used %v + lapsed %v + live %d", when, c[0], c[1], c[2], live)
	}
}

// roomSnapshot is every room key, as a snapshot (RDB, AOF, a replica)
// holds them.
type roomSnapshot struct {
	hashes map[string]map[string]string
	live   []redis.Z
}

func (a *adv5Room) save() roomSnapshot {
	r := a.r
	s := roomSnapshot{hashes: map[string]map[string]string{}}
	keys := []string{a.cfg}
	for n := range a.nb {
		keys = append(keys, a.pfx+strconv.Itoa(n))
	}
	for _, k := range keys {
		s.hashes[k] = r.rdb.HGetAll(r.ctx, k).Val()
	}
	s.live = r.rdb.ZRangeWithScores(r.ctx, a.live, 0, -1).Val()
	return s
}

func (a *adv5Room) restore(s roomSnapshot) {
	r := a.r
	for k, h := range s.hashes {
		mustDo(r.t, r.rdb.Del(r.ctx, k).Err())
		if len(h) > 0 {
			mustDo(r.t, r.rdb.HSet(r.ctx, k, h).Err())
		}
	}
	mustDo(r.t, r.rdb.Del(r.ctx, a.live).Err())
	if len(s.live) > 0 {
		mustDo(r.t, r.rdb.ZAdd(r.ctx, a.live, s.live...).Err())
	}
}

// gatedBuy is a buy of one unit of A by user: with token (a purchase
// token), gated by until when until is not zero, with key and order id if
// given.
func gatedBuy(r *rig, user, token, key, orderID string, until time.Time) (inventory.Receipt, error) {
	c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines("A", 1), IdempotencyKey: key, OrderID: orderID})
	if err == nil && token != "" {
		c, err = c.WithToken(token, time.Hour)
	}
	if err == nil && !until.IsZero() {
		c, err = c.WithGate(until)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return r.eng.BuyChecked(r.ctx, c)
}

// TestAdv5UsedAdmissionBuysAgainAfterLostWritesAndRepair: Redis restarts
// having lost its last writes (an AOF fsync'd every second, an RDB
// snapshot, a failover to a replica that was behind: failover's doc, "A
// Redis seen to restart ... may have lost writes the database or an
// instance's acks still have"). The order of an accepted buy reached the
// system of record; Redis went back to before the buy: the sale's keys
// and the room's keys alike. Recovery repairs the sale from the database
// (Engine.Repair: the order, the counts, the spent tokens' marks) and
// touches no room. A purchase token stays spent (its mark comes back from
// the database's spent tokens). An admission must stay spent too: one
// admission never buys twice. The room's state is back to "a...": only
// the spent admission the database kept with the order, whose mark the
// repair puts back, refuses the very same admission a second order.
func TestAdv5UsedAdmissionBuysAgainAfterLostWritesAndRepair(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, kind := range []string{"purchase token", "admission"} {
			t.Run(kind, func(t *testing.T) {
				db := &recordDB{}
				r := newRig(t, b, inventory.Options{Loader: db})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
				db.consume(r, "s1")
				room := newAdv5Room(r, 1)
				until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
				gate := time.Time{}
				if kind == "admission" {
					gate = until
					room.admit("u1", "0e1", until)
				}
				// the snapshot Redis comes back with
				sale, rooms := r.liveState("s1"), room.save()

				rc, err := gatedBuy(r, "u1", "0e1", "", "", gate)
				if err != nil {
					t.Fatalf("the first buy: %v", err)
				}
				db.consume(r, "s1") // the order is in the system of record

				// Redis comes back from before the buy (with the stream
				// settled: the consumer had it all)
				r.restore("s1", sale)
				room.restore(rooms)
				mustDo(t, r.rdb.Del(r.ctx, r.key("s1", "ptoken:0e1")).Err())
				if _, err := r.eng.Repair(r.ctx, "s1", db); err != nil {
					t.Fatalf("Repair: %v", err)
				}
				if _, ok := r.orders("s1")[rc.Order.ID]; !ok {
					t.Fatalf("the repair did not bring the order back")
				}
				if got := r.remaining("s1")["A"]; got != 9 {
					t.Fatalf("%d remaining after the repair, want 9", got)
				}

				// the same token / admission again
				rc2, err := gatedBuy(r, "u1", "0e1", "", "", gate)
				if err == nil {
					t.Errorf("one %s bought twice: orders %s and %s (room state of u1 %q, %d remaining)",
						kind, rc.Order.ID, rc2.Order.ID, room.state("u1"), r.remaining("s1")["A"])
				} else if !errors.Is(err, inventory.ErrTokenSpent) {
					t.Errorf("the %s again: %v, want ErrTokenSpent", kind, err)
				}
			})
		}
	})
}

// TestAdv5GatedResendsAndRepeats: a gated buy's resend with the same order
// id (a lost reply: finishBuyAfter) is its own order again, whatever the
// admission's state now; with a new order id it is refused; a repeat of
// its idempotency key with another (later) admission of the user is a
// replay and leaves that admission live; the count holds throughout. On
// every backend.
func TestAdv5GatedResendsAndRepeats(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		room := newAdv5Room(r, 4)
		until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
		room.admit("u1", "0e1", until)
		id := inventory.NewOrderID("s1")
		rc, err := gatedBuy(r, "u1", "0e1", "k1", id, until)
		if err != nil || rc.Order.ID != id {
			t.Fatalf("first: %+v %v", rc, err)
		}
		used := room.state("u1")
		if used != "u1:0e1:0:"+id {
			t.Fatalf("state %q", used)
		}
		room.counts("after the buy")
		// the resend after a lost reply: same order id
		again, err := gatedBuy(r, "u1", "0e1", "k1", id, until)
		if err != nil || !again.Retried || again.Order.ID != id {
			t.Errorf("resend with the same order id: %+v %v", again, err)
		}
		again, err = gatedBuy(r, "u1", "0e1", "", id, until)
		if err != nil || !again.Retried || again.Order.ID != id {
			t.Errorf("resend with the same order id, no key: %+v %v", again, err)
		}
		// a new order id: the admission is spent
		if _, err := gatedBuy(r, "u1", "0e1", "", inventory.NewOrderID("s1"), until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("the used admission with a new order id: %v", err)
		}
		// a later admission of u1: a repeat of k1 with it replays, and
		// leaves it live
		room.admit("u1", "0e2", until)
		st2 := room.state("u1")
		rep, err := gatedBuy(r, "u1", "0e2", "k1", "", until)
		if err != nil || !rep.Replayed || rep.Order.ID != id {
			t.Errorf("a repeat of k1 with the next admission: %+v %v", rep, err)
		}
		if got := room.state("u1"); got != st2 {
			t.Errorf("a replay changed the next admission: %q, want %q", got, st2)
		}
		// a resend of the first order id with the second admission: the
		// first order, the second admission untouched
		rep, err = gatedBuy(r, "u1", "0e2", "", id, until)
		if err != nil || rep.Order.ID != id {
			t.Errorf("a resend of the first order with the next admission: %+v %v", rep, err)
		}
		if got := room.state("u1"); got != st2 {
			t.Errorf("a resend changed the next admission: %q, want %q", got, st2)
		}
		if got := r.remaining("s1")["A"]; got != 9 {
			t.Errorf("%d remaining, want 9", got)
		}
		room.counts("after the repeats")
		// another user resending u1's order id with u1's... own admission:
		// code 7 takes a new id, which u2 (no admission) cannot buy with
		room.admit("u2", "0e3", until)
		if _, err := gatedBuy(r, "u2", "0e9", "", id, until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("u2 with u1's order id and a wrong nonce: %v", err)
		}
		rc3, err := gatedBuy(r, "u2", "0e3", "", id, until)
		if err != nil || rc3.Order.ID == id || rc3.Order.UserID != "u2" {
			t.Errorf("u2 with u1's order id and its own admission: %+v %v", rc3, err)
		}
		if got := room.state("u1"); got != st2 {
			t.Errorf("u2's buy changed u1's admission: %q", got)
		}
		room.counts("at the end")
	})
}

// TestAdv5RacingAdmissionsCountsHold: many buyers, each with one
// admission, each buy sent by several clients at once (coalesced into
// shared calls, the same admission several times in one call), while
// other buyers' admissions lapse under them (the clock reaches their
// until): every admission buys at most once, the room's counts hold
// (admitted = used + lapsed + live), each used state names its order, and
// the units sold are the orders. On every backend.
func TestAdv5RacingAdmissionsCountsHold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 1000}}})
		room := newAdv5Room(r, 8)
		until := r.clock.Now().Add(time.Minute).Truncate(time.Millisecond)
		const n = 40
		for i := range n {
			room.admit(fmt.Sprint("u", i), fmt.Sprintf("%x", 0xa0+i), until)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		orders := map[string][]string{}
		for i := range n {
			u, nonce := fmt.Sprint("u", i), fmt.Sprintf("%x", 0xa0+i)
			for range 4 {
				wg.Go(func() {
					rc, err := gatedBuy(r, u, nonce, "", "", until)
					switch {
					case err == nil:
						mu.Lock()
						orders[u] = append(orders[u], rc.Order.ID)
						mu.Unlock()
					case errors.Is(err, inventory.ErrTokenSpent):
					default:
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		sold := 0
		for i := range n {
			u := fmt.Sprint("u", i)
			if len(orders[u]) != 1 {
				t.Errorf("%s's admission bought %d orders", u, len(orders[u]))
				continue
			}
			sold++
			if got, want := room.state(u), "u1:"+fmt.Sprintf("%x", 0xa0+i)+":0:"+orders[u][0]; got != want {
				t.Errorf("%s's state %q, want %q", u, got, want)
			}
		}
		if got := r.remaining("s1")["A"]; got != int64(1000-sold) {
			t.Errorf("%d remaining after %d orders", got, sold)
		}
		if u := r.rdb.HGet(r.ctx, room.cfg, "used").Val(); u != strconv.Itoa(sold) {
			t.Errorf("used %s after %d orders", u, sold)
		}
		room.counts("after the race")
	})
}
