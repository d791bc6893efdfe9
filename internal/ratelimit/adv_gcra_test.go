package ratelimit_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/internal/ratelimit"
)

// TestGCRAStateOutOfRange: a stored TAT whose numbers gcra_take never
// writes (more than 16 digits, or past 2^53) is ErrCorrupt and left as it
// is: not a refusal with a retry time wrapped past int64, and not a Lua
// error on the embedded server, whose Lua has no number for 20 digits.
func TestGCRAStateOutOfRange(t *testing.T) {
	lim := ratelimit.PerSecond(5, 4)
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, ratelimit.Options{})
		r.allow(0, "k", lim, 1)
		k := r.key("k}")
		for _, bad := range []string{"99999999999999999999:0", "9007199254740993:0", "1:99999999999999999999999", "1:9007199254740993"} {
			if err := r.rdb.Set(r.ctx, k, bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := r.lim.Allow(r.ctx, "k", lim)
			if !errors.Is(err, ratelimit.ErrCorrupt) {
				t.Errorf("TAT %q: %+v, %v; want ErrCorrupt", bad, res, err)
			}
			if v, _ := r.rdb.Get(r.ctx, k).Result(); v != bad {
				t.Errorf("TAT %q changed to %q", bad, v)
			}
		}
	})
}
