package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestGatedBuyCorruptRoomKeys: a waiting room's keys that are not of the
// type the room writes (room:used or room:cfg not a hash)
// are corrupt state: a gated buy is refused as ErrCorrupt and changes
// nothing. It must never half-run: buy.lua's first write is its XADD, and
// no write after it may fail (Redis does not roll a script back), so a
// room:used the note's HSET fails on must be found before it. On every
// backend.
func TestGatedBuyCorruptRoomKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, which := range []string{"room:used", "room:cfg"} {
			t.Run(which, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
				until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
				events := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val()
				if err := r.rdb.Set(r.ctx, r.key("s1", which), "x", 0).Err(); err != nil {
					t.Fatal(err)
				}
				c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: "u1", Lines: lines("A", 1)})
				if err == nil {
					c, err = c.WithToken("n1", time.Hour)
				}
				if err == nil {
					c, err = c.WithGate(until)
				}
				if err != nil {
					t.Fatal(err)
				}
				_, err = r.eng.BuyChecked(r.ctx, c)
				if !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("a gated buy with a corrupt %s: %v, want ErrCorrupt", which, err)
				}
				if got := r.remaining("s1")["A"]; got != 10 {
					t.Errorf("a gated buy with a corrupt %s: %d remaining, want 10 (the buy half ran)", which, got)
				}
				if n := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:n1")).Val(); n != 0 {
					t.Errorf("a gated buy with a corrupt %s spent its token", which)
				}
				if n := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val(); n != events {
					t.Errorf("a gated buy with a corrupt %s appended %d events", which, n-events)
				}
			})
		}
	})
}
