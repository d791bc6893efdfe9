package pipeline

import (
	"math"
	"strconv"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// FuzzStreamIDs: the consumer orders stream entry ids "<ms>-<seq>" as Redis
// does (by ms, then seq, as numbers), and nextID is the smallest id after
// its argument: larger than it, with nothing in between. Redis hands these
// ids out (XINFO GROUPS, XPENDING), and trimming relies on both.
func FuzzStreamIDs(f *testing.F) {
	f.Add(uint64(1700000000000), uint64(0), uint64(1700000000000), uint64(1))
	f.Add(uint64(5), uint64(9), uint64(6), uint64(0))
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(math.MaxUint64), uint64(7), uint64(3), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, am, as, bm, bs uint64) {
		a := strconv.FormatUint(am, 10) + "-" + strconv.FormatUint(as, 10)
		b := strconv.FormatUint(bm, 10) + "-" + strconv.FormatUint(bs, 10)
		want := 0
		switch {
		case am < bm || am == bm && as < bs:
			want = -1
		case am > bm || am == bm && as > bs:
			want = 1
		}
		if got := inventory.CompareEventIDs(a, b); got != want || inventory.CompareEventIDs(b, a) != -want {
			t.Fatalf("inventory.CompareEventIDs(%s, %s) = %d, reversed %d; want %d", a, b, got, inventory.CompareEventIDs(b, a), want)
		}
		if inventory.CompareEventIDs("", a) > 0 {
			t.Fatalf(`"" sorts after %s`, a)
		}
		if am == math.MaxUint64 && as == math.MaxUint64 {
			return // the largest id has no successor
		}
		next := nextID(a)
		if inventory.CompareEventIDs(a, next) >= 0 {
			t.Fatalf("nextID(%s) = %s, not after it", a, next)
		}
		if inventory.CompareEventIDs(a, b) < 0 && inventory.CompareEventIDs(b, next) < 0 {
			t.Fatalf("%s lies between %s and nextID = %s", b, a, next)
		}
	})
}
