package inventory_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// TestGatedBuy: a buy with a gate (a waiting room's admission) is accepted
// only while the room's state of the buyer is a live admission whose nonce
// is the token and whose until is the gate's, and the script's clock is
// before it; a refused one is ErrTokenSpent and changes nothing (stock,
// state, live admissions, counts, no spent mark); an accepted one spends
// the admission in the room in the same script (the state used with its
// order, the user out of the live ones, "used" counted), keeps no spent
// mark and sends the token to the system of record as spent until the
// admission's until, and the used state refuses it again, as does a mark
// of the token put back from the system of record; a repeat by its idempotency key is answered
// before the gate; a second buy with the token, even racing the first, is
// refused; the user's next admission (a new nonce) buys. On every backend.
func TestGatedBuy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		live, cfg, bucket := r.key("s1", "room:live"), r.key("s1", "room:cfg"), r.key("s1", "room:b:0")
		until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
		gated := func(user, token, key string, gate time.Time) (inventory.Receipt, error) {
			c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines("A", 1), IdempotencyKey: key})
			if err == nil {
				c, err = c.WithToken(token, time.Hour)
			}
			if err == nil {
				c, err = c.WithGate(gate)
			}
			if err != nil {
				t.Fatal(err)
			}
			return r.eng.BuyChecked(r.ctx, c)
		}
		// admit gives user a live admission nonce as the room does: in
		// the live ones, and as the user's state (one state hash: "nb" 1).
		admit := func(user, nonce string, until time.Time) {
			if err := r.rdb.ZAdd(r.ctx, live, redisZ(until, user)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HSet(r.ctx, cfg, "nb", 1).Err(); err != nil {
				t.Fatal(err)
			}
			st := "a1:" + nonce + ":" + strconv.FormatInt(until.UnixMilli(), 10) + ":0"
			if err := r.rdb.HSet(r.ctx, bucket, user, st).Err(); err != nil {
				t.Fatal(err)
			}
		}
		state := func(user string) string { return r.rdb.HGet(r.ctx, bucket, user).Val() }
		used := func() string { return r.rdb.HGet(r.ctx, cfg, "used").Val() }
		unchanged := func(what, user, token, st string) {
			t.Helper()
			if got := r.remaining("s1")["A"]; got != 10 {
				t.Errorf("%s: %d remaining, want 10", what, got)
			}
			if got := state(user); got != st {
				t.Errorf("%s: state %q, want %q", what, got, st)
			}
			if n := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:"+token)).Val(); n != 0 {
				t.Errorf("%s: a spent mark", what)
			}
			if u := used(); u != "" && u != "0" {
				t.Errorf("%s: used %q", what, u)
			}
		}

		// Refused: no admission, another until, past until.
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy without a live admission: %v", err)
		}
		unchanged("no admission", "u1", "0e1", "")
		admit("u1", "0e1", until)
		st1 := state("u1")
		if _, err := gated("u1", "0e1", "", until.Add(time.Millisecond)); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy whose gate is another until: %v", err)
		}
		unchanged("another until", "u1", "0e1", st1)
		if _, err := gated("u2", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("another user's buy with u1's until: %v", err)
		}
		unchanged("another user", "u1", "0e1", st1)
		if _, err := gated("u1", "0e9", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a token of u1 with the until of u1's live admission, not its nonce: %v", err)
		}
		unchanged("another nonce", "u1", "0e9", st1)
		r.clock.Set(until)
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy at until: %v", err)
		}
		unchanged("at until", "u1", "0e1", st1)
		r.clock.Set(until.Add(-time.Millisecond))

		// Accepted: the admission used in the room, nothing else kept.
		rc, err := gated("u1", "0e1", "k1", until)
		if err != nil {
			t.Fatalf("a gated buy with a live admission: %v", err)
		}
		if got, want := state("u1"), "u1:0e1:0:"+rc.Order.ID; got != want {
			t.Errorf("the state after the buy: %q, want %q", got, want)
		}
		if err := r.rdb.ZScore(r.ctx, live, "u1").Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("u1 is still among the live admissions: %v", err)
		}
		if u := used(); u != "1" {
			t.Errorf("used %q after one buy, want 1", u)
		}
		if n := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:0e1")).Val(); n != 0 {
			t.Error("a gated buy left a spent mark")
		}
		found := false
		for _, ev := range r.events("s1") {
			if ev.Order.ID == rc.Order.ID {
				found = true
				if want := (inventory.SpentToken{Token: "0e1", UserID: "u1", OrderID: rc.Order.ID, Until: until.UTC()}); ev.Spent != want {
					t.Errorf("the order's spent token: %+v, want %+v (the admission, until its until)", ev.Spent, want)
				}
			}
		}
		if !found {
			t.Errorf("no event of order %s", rc.Order.ID)
		}
		// The token again: the used admission refuses it; a repeat by its
		// key is answered with its order, before the gate.
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("the used admission again: %v", err)
		}
		again, err := gated("u1", "0e1", "k1", until)
		if err != nil || !again.Replayed || again.Order.ID != rc.Order.ID {
			t.Fatalf("a repeat of the accepted buy: %+v %v", again, err)
		}
		// A spent mark put back from the database (a rebuild or a repair
		// after Redis lost the spend, the admission still live) refuses it.
		admit("u1", "0e5", until)
		if err := r.rdb.Set(r.ctx, r.key("s1", "ptoken:0e5"), "u1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := gated("u1", "0e5", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a live admission whose nonce the database kept spent: %v", err)
		}
		if got := state("u1"); !strings.HasPrefix(got, "a1:0e5:") {
			t.Errorf("a refused buy changed the state: %q", got)
		}
		// The user's next admission (a new nonce) buys; the old one not.
		admit("u1", "0e2", until)
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("the first admission's nonce on the second admission: %v", err)
		}
		if _, err := gated("u1", "0e2", "", until); err != nil {
			t.Fatalf("the second admission: %v", err)
		}
		if got := r.remaining("s1")["A"]; got != 8 {
			t.Errorf("%d remaining after two accepted buys, want 8", got)
		}

		// Racing buys of one admission (they may share a call): one wins.
		admit("u3", "0e3", until)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, spent := 0, 0
		for range 8 {
			wg.Go(func() {
				_, err := gated("u3", "0e3", "", until)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, inventory.ErrTokenSpent):
					spent++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if won != 1 || spent != 7 {
			t.Errorf("8 racing buys of one admission: %d accepted, %d refused as spent", won, spent)
		}
		if got := r.remaining("s1")["A"]; got != 7 {
			t.Errorf("%d remaining after three accepted buys, want 7", got)
		}
		if u := used(); u != "3" {
			t.Errorf("used %q after three buys, want 3", u)
		}
	})
}

// TestWithGateNeedsAToken: a gate is a token's; without one, or before
// 1970, it is invalid.
func TestWithGateNeedsAToken(t *testing.T) {
	c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WithGate(time.Now()); !errors.Is(err, inventory.ErrInvalid) {
		t.Errorf("a gate without a token: %v", err)
	}
	c, err = c.WithToken("t1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WithGate(time.UnixMilli(0)); !errors.Is(err, inventory.ErrInvalid) {
		t.Errorf("a gate at 1970: %v", err)
	}
}

// redisZ is user's member of a gate: until in unix ms.
func redisZ(until time.Time, user string) redis.Z {
	return redis.Z{Score: float64(until.UnixMilli()), Member: user}
}
