package inventory_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// TestAdv4GatedBuyCorruptRoomState: the room's settings or the buyer's
// state hash holding what the room never writes (an "nb" that is no bucket
// count, a bucket that is not a hash, a state that is no admission) never
// lets a gated buy through, and never half-runs it: refused (ErrTokenSpent
// or ErrCorrupt), stock, state and counts unchanged. On every backend.
func TestAdv4GatedBuyCorruptRoomState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		cases := []struct {
			name, nb string
			bucket   func(r *rig, until time.Time) error
		}{
			{"nb inf", "inf", nil},
			{"nb nan", "nan", nil},
			{"nb -1", "-1", nil},
			{"nb 0", "0", nil},
			{"nb 1.5", "1.5", nil},
			{"nb 0x1", "0x1", nil},
			{"nb 1e0", "1e0", nil},
			{"bucket a string", "1", func(r *rig, until time.Time) error {
				return r.rdb.Set(r.ctx, r.key("s1", "room:b:0"), "a1:0e1:"+strconv.FormatInt(until.UnixMilli(), 10)+":0", 0).Err()
			}},
			{"state with spaces", "1", func(r *rig, until time.Time) error {
				return r.rdb.HSet(r.ctx, r.key("s1", "room:b:0"), "u1", " a1:0e1:"+strconv.FormatInt(until.UnixMilli(), 10)+":0").Err()
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := newRig(t, b, inventory.Options{})
				r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
				until := r.clock.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
				if err := r.rdb.HSet(r.ctx, r.key("s1", "room:cfg"), "nb", tc.nb).Err(); err != nil {
					t.Fatal(err)
				}
				var err error
				if tc.bucket != nil {
					err = tc.bucket(r, until)
				} else {
					// the state where nb 1 would put it
					err = r.rdb.HSet(r.ctx, r.key("s1", "room:b:0"), "u1", "a1:0e1:"+strconv.FormatInt(until.UnixMilli(), 10)+":0").Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				events := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val()
				_, err = gatedBuy(r, "u1", "0e1", "", "", until)
				ok := err == nil
				if tc.nb == "1e0" || tc.nb == "0x1" || tc.nb == "1.5" {
					// a number Lua reads (the room's script too): the state
					// read is where the room's script could have put it,
					// either answer is right, but never half run
					if err != nil && !errors.Is(err, inventory.ErrTokenSpent) && !errors.Is(err, inventory.ErrCorrupt) {
						t.Fatalf("%v", err)
					}
					return
				}
				if ok || !(errors.Is(err, inventory.ErrTokenSpent) || errors.Is(err, inventory.ErrCorrupt)) {
					t.Fatalf("a gated buy, %s: %v, want refused", tc.name, err)
				}
				if got := r.remaining("s1")["A"]; got != 10 {
					t.Errorf("%d remaining, want 10", got)
				}
				if n := r.rdb.Exists(r.ctx, r.key("s1", "ptoken:0e1"), r.key("s1", "room:live")).Val(); n != 0 {
					t.Errorf("a refused buy left a spent mark or a live admission")
				}
				if u := r.rdb.HGet(r.ctx, r.key("s1", "room:cfg"), "used").Val(); u != "" {
					t.Errorf("a refused buy counted a used admission: %q", u)
				}
				if n := r.rdb.XLen(r.ctx, r.key("s1", "events")).Val(); n != events {
					t.Errorf("a refused buy appended %d events", n-events)
				}
			})
		}
	})
}
