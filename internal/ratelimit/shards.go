package ratelimit

import (
	"context"
	"hash/maphash"
)

// Shards is an in-process limiter like Local whose keys are spread over
// shards, each a Local with a lock of its own, so that the requests of a
// crowd do not all wait on one lock: for limits that are checked often,
// per key, and need not be shared across processes (a client polling too
// fast). Like Local it forgets the least recently used keys first (per
// shard), so its memory stays bounded.
type Shards struct {
	seed   maphash.Seed
	shards []*Local
}

// NewShards returns an empty limiter of n shards (at least 1) that
// remembers about opts.MaxKeys keys in all (default 100,000, at least one
// a shard); each shard is NewLocal(opts) of its share of them.
func NewShards(n int, opts LocalOptions) *Shards {
	n = max(n, 1)
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 100_000
	}
	opts.MaxKeys = max(opts.MaxKeys/n, 1)
	s := &Shards{seed: maphash.MakeSeed(), shards: make([]*Local, n)}
	for i := range s.shards {
		s.shards[i] = NewLocal(opts)
	}
	return s
}

// Allow is Local.Allow of key's shard.
func (s *Shards) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))].Allow(ctx, key, limit)
}

// Len returns how many (key, limit) pairs are remembered in all.
func (s *Shards) Len() int {
	n := 0
	for _, l := range s.shards {
		n += l.Len()
	}
	return n
}
