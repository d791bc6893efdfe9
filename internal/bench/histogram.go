package bench

import (
	"math/bits"
	"time"
)

// histogram counts latencies in log-linear buckets: every power of two is
// split into subBuckets equal parts, so a percentile read from it is within
// 1/subBuckets (about 1.6%) of the true value, whatever the range. It takes
// a few kilobytes however many latencies it counts; one per client, merged
// at the end, so recording needs no lock.
type histogram struct {
	counts [64 * subBuckets]int64
	n      int64
	max    time.Duration
}

const (
	subBits    = 6
	subBuckets = 1 << subBits
)

// bucket returns the bucket of a latency in nanoseconds. Values below
// subBuckets have a bucket each; above, the bucket is the power of two
// (shifted) and the next subBits bits.
func bucket(ns int64) int {
	if ns < subBuckets {
		return int(max(ns, 0))
	}
	shift := bits.Len64(uint64(ns)) - subBits - 1
	return (shift+1)<<subBits | int(ns>>shift)&(subBuckets-1)
}

// upper returns the largest latency (ns) bucket b holds.
func upper(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	shift := b>>subBits - 1
	low := int64(subBuckets|b&(subBuckets-1)) << shift
	return low + 1<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucket(int64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// percentile returns the latency at or below which a share p (0..1) of the
// recorded latencies fall (the upper edge of its bucket, never more than the
// maximum), or 0 if nothing was recorded.
func (h *histogram) percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(p*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for b, c := range h.counts {
		if seen += c; seen >= rank {
			return min(time.Duration(upper(b)), h.max)
		}
	}
	return h.max
}
