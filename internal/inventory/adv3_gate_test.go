package inventory_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestGatedBuyCorruptRoomKeys: a waiting room's keys that are not what the
// room writes (room:live not a zset, room:cfg not a hash, its "used" not an
// integer) are corrupt state: a gated buy, even with a live admission, is
// refused as ErrCorrupt and changes nothing. It must never half-run:
// buy.lua's first write is its XADD, and no write after it may fail (Redis
// does not roll a script back), so a key the spend's ZREM or HINCRBY
// would fail on must be found before it. On every backend.
func TestGatedBuyCorruptRoomKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, which := range []string{"room:live", "room:cfg", "room:cfg used"} {
			t.Run(which, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
				until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
				live, cfg, bucket := r.key("s1", "room:live"), r.key("s1", "room:cfg"), r.key("s1", "room:b:0")
				// u1's live admission n1, as the room grants it
				st := "a1:0e1:" + strconv.FormatInt(until.UnixMilli(), 10) + ":0"
				if err := r.rdb.HSet(r.ctx, cfg, "nb", 1, "used", 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := r.rdb.HSet(r.ctx, bucket, "u1", st).Err(); err != nil {
					t.Fatal(err)
				}
				if err := r.rdb.ZAdd(r.ctx, live, redisZ(until, "u1")).Err(); err != nil {
					t.Fatal(err)
				}
				var err error
				switch which {
				case "room:cfg used":
					err = r.rdb.HSet(r.ctx, cfg, "used", "x").Err()
				default:
					if err = r.rdb.Del(r.ctx, r.key("s1", which)).Err(); err == nil {
						err = r.rdb.Set(r.ctx, r.key("s1", which), "x", 0).Err()
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				events := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val()
				_, err = gatedBuy(r, "u1", "0e1", "", "", until)
				if !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("a gated buy with a corrupt %s: %v, want ErrCorrupt", which, err)
				}
				if got := r.remaining("s1")["A"]; got != 10 {
					t.Errorf("a gated buy with a corrupt %s: %d remaining, want 10 (the buy half ran)", which, got)
				}
				if got := r.rdb.HGet(r.ctx, bucket, "u1").Val(); got != st {
					t.Errorf("a gated buy with a corrupt %s: u1's state %q, want %q", which, got, st)
				}
				if n := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val(); n != events {
					t.Errorf("a gated buy with a corrupt %s appended %d events", which, n-events)
				}
			})
		}
	})
}
