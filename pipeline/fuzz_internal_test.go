package pipeline

import (
	"math"
	"strconv"
	"testing"
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
		if got := compareIDs(a, b); got != want || compareIDs(b, a) != -want {
			t.Fatalf("compareIDs(%s, %s) = %d, reversed %d; want %d", a, b, got, compareIDs(b, a), want)
		}
		if compareIDs("", a) > 0 {
			t.Fatalf(`"" sorts after %s`, a)
		}
		if am == math.MaxUint64 && as == math.MaxUint64 {
			return // the largest id has no successor
		}
		next := nextID(a)
		if compareIDs(a, next) >= 0 {
			t.Fatalf("nextID(%s) = %s, not after it", a, next)
		}
		if compareIDs(a, b) < 0 && compareIDs(b, next) < 0 {
			t.Fatalf("%s lies between %s and nextID = %s", b, a, next)
		}
	})
}
