package inventory_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestAdv4GatedBuyThenOlderInstanceBuy: an admission spent by a gated buy
// is spent for an older instance too. An older instance (before the gate,
// 10e4d07) buys an admission in two steps: it checks the room's state
// (Rooms.Check: live, no note), then buys with the nonce as a purchase
// token (ungated: refused only if ptoken:<nonce> exists), then notes it
// (MarkUsed). While both run (a rolling upgrade), a new instance's gated
// buy can land between the older one's check and its buy: the older buy
// then finds no ptoken key (the gated buy left only its note) and buys a
// second unit with the one admission. The gated buy must leave the mark
// the older buy reads. On every backend.
func TestAdv4GatedBuyThenOlderInstanceBuy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
		if err := r.rdb.ZAdd(r.ctx, r.key("s1", "room:live"), redisZ(until, "u1")).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.HSet(r.ctx, r.key("s1", "room:cfg"), "nb", 1).Err(); err != nil {
			t.Fatal(err)
		}
		st := "a1:0e1:" + strconv.FormatInt(until.UnixMilli(), 10) + ":0"
		if err := r.rdb.HSet(r.ctx, r.key("s1", "room:b:0"), "u1", st).Err(); err != nil {
			t.Fatal(err)
		}
		buy := func(gate bool) (inventory.Receipt, error) {
			c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)})
			if err == nil {
				c, err = c.WithToken("0e1", 3*time.Minute)
			}
			if err == nil && gate {
				c, err = c.WithGate(until)
			}
			if err != nil {
				t.Fatal(err)
			}
			return r.eng.BuyChecked(r.ctx, c)
		}
		// The older instance's check has passed (the state above: live, no
		// note). Now the new instance's gated buy, then the older one's buy.
		if _, err := buy(true); err != nil {
			t.Fatalf("the gated buy: %v", err)
		}
		if _, err := buy(false); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("an older instance's buy of the admission a gated buy spent: %v, want ErrTokenSpent (two units on one admission)", err)
		}
		if got := r.remaining("s1")["A"]; got != 9 {
			t.Errorf("%d remaining, want 9", got)
		}
	})
}
