package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdv3GateBindsTheNonce: the gate (buy.lua, KEYS[9]) must accept the
// user's live admission only, not any admission of the user that happens
// to end at the same until. Admissions granted within admit_ttl of the
// room's end all end at that end (admitted_until is never past ends_at),
// so an admission the room lost (Redis lost the room while the sale
// lives: the service makes it again, empty, and the buyer joins again)
// ends at the very until of the buyer's new one. The old nonce, never
// spent, must not buy: else one live admission buys twice (old nonce,
// then new), and the room counts one unit for two orders.
func TestAdv3GateBindsTheNonce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		cfg := config()
		cfg.EndsAt = t0.Add(5 * time.Second) // within admit_ttl (10 s): every until is the end
		r.create("s", cfg)
		r.clock.Set(t0)
		r.join("s", "u1")
		r.step("s")
		old := r.place("s", "u1")
		if old.Status != Admitted || !old.AdmittedUntil.Equal(cfg.EndsAt) {
			t.Fatalf("u1: %+v", old)
		}
		// The room is lost (its keys only: the sale lives) and made again;
		// u1 joins again and is admitted again.
		if err := r.rooms.Remove(r.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		r.create("s", cfg)
		r.clock.Set(t0.Add(time.Second))
		r.join("s", "u1")
		r.step("s")
		cur := r.place("s", "u1")
		if cur.Status != Admitted || cur.Nonce == old.Nonce || !cur.AdmittedUntil.Equal(old.AdmittedUntil) {
			t.Fatalf("u1 again: %+v (old %+v)", cur, old)
		}
		if _, err := r.buyGated("s", "u1", "A", old); !errors.Is(err, inventory.ErrTokenSpent) {
			t.Errorf("the lost room's admission bought beside the live one: %v, want ErrTokenSpent", err)
		}
		if _, err := r.buyGated("s", "u1", "A", cur); err != nil {
			t.Errorf("the live admission: %v", err)
		}
		if got := r.remaining("s"); got != 4 {
			t.Errorf("%d remaining, want 4: one live admission bought %d units", got, 5-got)
		}
	})
}

// TestAdv3UsedOutlivesAStoppedLoop: an admission a buy spent stays used
// however long the room goes unstepped (no instance steps it while the
// database sells, degraded mode, for as long as Redis is out of the
// instances' reach; Redis's keys expire meanwhile). The buy writes the
// used state itself, so nothing that tells the room of the use may expire
// first (a key with a time to live, as a note or a spent mark had): else
// the step would find the admission unspent at its lapse, count it
// lapsed, read it lapsed, and let its buyer join again and buy again.
func TestAdv3UsedOutlivesAStoppedLoop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b redistest.Backend) {
		r := newRig(t, b, true)
		r.sale("s", 0, "A", 5)
		cfg := config()
		r.create("s", cfg)
		r.clock.Set(t0)
		r.join("s", "u1")
		r.step("s")
		p := r.place("s", "u1")
		if p.Status != Admitted {
			t.Fatalf("u1: %+v", p)
		}
		c, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s", UserID: "u1", Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
		if err == nil {
			c, err = c.WithToken(p.Nonce, cfg.AdmitTTL+time.Minute) // as the service keeps it
		}
		if err == nil {
			c, err = c.WithGate(p.AdmittedUntil)
		}
		if err != nil {
			t.Fatal(err)
		}
		rc, err := r.eng.BuyChecked(r.ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		// No step for 15 minutes: the keys whose time to live runs out
		// meanwhile are gone.
		const idle = 15 * time.Minute
		r.clock.Add(idle)
		expired := 0
		age := func(ctx context.Context, c redis.Cmdable) error {
			iter := c.Scan(ctx, 0, r.eng.Key("s", "*"), 1000).Iterator()
			for iter.Next(ctx) {
				if ttl := c.PTTL(ctx, iter.Val()).Val(); ttl > 0 && ttl <= idle {
					if err := c.Del(ctx, iter.Val()).Err(); err != nil {
						return err
					}
					expired++
				}
			}
			return iter.Err()
		}
		if cc, ok := r.rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(r.ctx, func(ctx context.Context, n *redis.Client) error { return age(ctx, n) })
		} else {
			err = age(r.ctx, r.rdb)
		}
		if err != nil {
			t.Fatalf("aging the keys (%d expired): %v", expired, err)
		}
		r.step("s")
		if q := r.place("s", "u1"); q.Status != Used || q.OrderID != rc.Order.ID {
			t.Errorf("u1's spent admission after the room went unstepped: %+v, want used by %s", q, rc.Order.ID)
		}
		if s := r.stats("s"); s.Used != 1 || s.Lapsed != 0 {
			t.Errorf("the room's counts: %+v, want 1 used, 0 lapsed", s)
		}
	})
}
