package inventory_test

import (
	"errors"
	"strconv"
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
// token, notes); an accepted one notes "<token>:<order id>" in
// "room:used" (kept until the room applies it) in the same script, and
// the note and its spent mark (ptoken, for older instances) refuse it again; a repeat by its idempotency key is answered
// before the gate, a second buy with the token, even racing the first, is
// refused, and so is a token the database kept spent. On every backend.
func TestGatedBuy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		live, used := r.key("s1", "room:live"), r.key("s1", "room:used")
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
		// admit gives user a live admission as the room does: in the gate,
		// and as the user's state (one state hash: "nb" 1), with its nonce.
		admit := func(user string, until time.Time) {
			nonce := map[string]string{"u1": "0e1", "u3": "0e3"}[user]
			if err := r.rdb.ZAdd(r.ctx, live, redisZ(until, user)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HSet(r.ctx, r.key("s1", "room:cfg"), "nb", 1).Err(); err != nil {
				t.Fatal(err)
			}
			st := "a1:" + nonce + ":" + strconv.FormatInt(until.UnixMilli(), 10) + ":0"
			if err := r.rdb.HSet(r.ctx, r.key("s1", "room:b:0"), user, st).Err(); err != nil {
				t.Fatal(err)
			}
		}
		unchanged := func(what string, token string) {
			t.Helper()
			if got := r.remaining("s1")["A"]; got != 10 {
				t.Errorf("%s: %d remaining, want 10", what, got)
			}
			if n, _ := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:"+token), used).Result(); n != 0 {
				t.Errorf("%s: the token is spent or a note written", what)
			}
		}

		// Refused: no admission, another until, past until.
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy without a live admission: %v", err)
		}
		unchanged("no admission", "0e1")
		admit("u1", until)
		if _, err := gated("u1", "0e1", "", until.Add(time.Millisecond)); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy whose gate is another until: %v", err)
		}
		unchanged("another until", "0e1")
		if _, err := gated("u2", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("another user's buy with u1's until: %v", err)
		}
		unchanged("another user", "0e1")
		if _, err := gated("u1", "0e9", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a token of u1 with the until of u1's live admission, not its nonce: %v", err)
		}
		unchanged("another nonce", "0e9")
		r.clock.Set(until)
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a buy at until: %v", err)
		}
		unchanged("at until", "0e1")
		r.clock.Set(until.Add(-time.Millisecond))

		// Accepted: the token spent, the note written.
		rc, err := gated("u1", "0e1", "k1", until)
		if err != nil {
			t.Fatalf("a gated buy with a live admission: %v", err)
		}
		if note, err := r.rdb.HGet(r.ctx, used, "u1").Result(); err != nil || note != "0e1:"+rc.Order.ID {
			t.Errorf("the note: %q %v, want %q", note, err, "0e1:"+rc.Order.ID)
		}
		if ttl := r.rdb.PTTL(r.ctx, used).Val(); ttl != -1 {
			t.Errorf("the notes expire in %v: they are kept until the room applies them", ttl)
		}
		if n := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:0e1")).Val(); n != 1 {
			t.Error("a gated buy left no spent mark: an older instance's ungated buy reads only it (TestAdv4GatedBuyThenOlderInstanceBuy)")
		}
		// The token again, the note not applied yet: spent.
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("the spent admission again, its note there: %v", err)
		}
		// The room applies the note (the state used, the note gone): the
		// token again is refused, and a repeat by its key is answered
		// with its order, before the gate.
		if err := r.rdb.HSet(r.ctx, r.key("s1", "room:b:0"), "u1", "u1:0e1:0:"+rc.Order.ID).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.HDel(r.ctx, used, "u1").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("the used admission again: %v", err)
		}
		again, err := gated("u1", "0e1", "k1", until)
		if err != nil || !again.Replayed || again.Order.ID != rc.Order.ID {
			t.Fatalf("a repeat of the accepted buy: %+v %v", again, err)
		}
		// A spent mark restored from the database (a rebuild after a
		// Redis loss) refuses the token too, whatever the room says.
		admit("u1", until)
		if err := r.rdb.Set(r.ctx, r.key("s1", "ptoken:0e1"), "u1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := gated("u1", "0e1", "", until); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Fatalf("a token the database kept spent: %v", err)
		}
		if got := r.remaining("s1")["A"]; got != 9 {
			t.Errorf("%d remaining after one accepted buy, want 9", got)
		}

		// Racing buys of one admission (they may share a call): one wins.
		admit("u3", until)
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
		if got := r.remaining("s1")["A"]; got != 8 {
			t.Errorf("%d remaining after two accepted buys, want 8", got)
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
