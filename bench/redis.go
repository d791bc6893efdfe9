package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The hand-rolled Redis approaches (naive, lock, segmented) keep their hot
// item under the hash tag {bench-<run>-<n>}, and count every unit they
// deduct in a sold counter that Redis keeps: written in the same MULTI as
// the DECRBY (naive, lock) or in the same script (segmented). Afterwards
// the counter is what was sold, and the stock key what is left.

var (
	//go:embed release.lua
	releaseSrc string
	//go:embed take.lua
	takeSrc string

	releaseScript = redis.NewScript(releaseSrc)
	takeScript    = redis.NewScript(takeSrc)
)

const (
	// lockTTL is how long a redis-lock holder may keep the lock; a buy
	// holds it for three round trips.
	lockTTL = 5 * time.Second
	// lockWait is the mean pause before trying a taken lock again
	// (jittered by +-50%), as lock libraries do instead of spinning. Of
	// 0.25, 1, 4, 5, 10 and 25 ms, 4-10 ms sold the most on a 2-core
	// machine: waiters that retry sooner take CPU from the holder and Redis.
	lockWait = 5 * time.Millisecond
)

// counterItem is the hot item of redis-naive and redis-lock: a stock key,
// a sold counter and (for the lock) a lock key.
type counterItem struct {
	rdb               *redis.Client
	stock, sold, lock string
	owner             string // this item's prefix of lock owner tokens
	tokens            atomic.Int64
}

func newCounterItem(ctx context.Context, s *Stores, stock int64) (*counterItem, error) {
	tag := "{" + s.newItemTag() + "}"
	it := &counterItem{rdb: s.Redis, stock: tag + ":stock", sold: tag + ":sold", lock: tag + ":lock", owner: randomID(12) + "-"}
	if err := s.Redis.MSet(ctx, it.stock, stock, it.sold, 0).Err(); err != nil {
		return nil, err
	}
	return it, nil
}

// naiveItem reads, checks in Go, then decrements: two clients that both
// read the last unit both sell it.
type naiveItem struct{ *counterItem }

func prepareNaive(ctx context.Context, s *Stores, _ Config, stock int64) (hotItem, error) {
	it, err := newCounterItem(ctx, s, stock)
	if err != nil {
		return nil, err
	}
	return naiveItem{it}, nil
}

func (it naiveItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i := range buyers {
		out[i] = it.readCheckWrite(ctx)
	}
}

// readCheckWrite is GET, a check in Go, then DECRBY and the sold counter's
// INCR together in one MULTI. Nothing holds the stock between the GET and
// the DECRBY.
func (it *counterItem) readCheckWrite(ctx context.Context) outcome {
	left, err := it.rdb.Get(ctx, it.stock).Int64()
	if err != nil {
		return outcome{err: err}
	}
	if left < 1 {
		return outcome{soldOut: true}
	}
	_, err = it.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.DecrBy(ctx, it.stock, 1)
		p.Incr(ctx, it.sold)
		return nil
	})
	return outcome{sold: err == nil, err: err}
}

// lockItem does the same read-check-write while holding a lock.
type lockItem struct{ *counterItem }

func prepareLock(ctx context.Context, s *Stores, _ Config, stock int64) (hotItem, error) {
	it, err := newCounterItem(ctx, s, stock)
	if err != nil {
		return nil, err
	}
	return lockItem{it}, nil
}

func (it lockItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i := range buyers {
		out[i] = it.buyLocked(ctx)
	}
}

func (it lockItem) buyLocked(ctx context.Context) outcome {
	token := it.owner + strconv.FormatInt(it.tokens.Add(1), 36)
	var retries int64
	for {
		ok, err := it.rdb.SetNX(ctx, it.lock, token, lockTTL).Result()
		if err != nil {
			return outcome{retries: retries, err: err}
		}
		if ok {
			break
		}
		retries++
		wait := lockWait/2 + rand.N(lockWait)
		select {
		case <-ctx.Done():
			return outcome{retries: retries, err: ctx.Err()}
		case <-time.After(wait):
		}
	}
	o := it.readCheckWrite(ctx)
	o.retries = retries
	released, err := releaseScript.Run(ctx, it.rdb, []string{it.lock}, token).Int64()
	switch {
	case err != nil && o.err == nil:
		o.err = fmt.Errorf("release lock: %w", err)
	case err == nil && released != 1 && o.err == nil:
		o.err = errors.New("the lock expired while held")
	}
	return o
}

func (it *counterItem) count(ctx context.Context) (tally, error) {
	v, err := it.rdb.MGet(ctx, it.stock, it.sold).Result()
	if err != nil {
		return tally{}, err
	}
	var t tally
	if t.remaining, err = intValue(v[0]); err != nil {
		return t, fmt.Errorf("%s: %w", it.stock, err)
	}
	if t.sold, err = intValue(v[1]); err != nil {
		return t, fmt.Errorf("%s: %w", it.sold, err)
	}
	return t, nil
}

func (it *counterItem) drop(ctx context.Context) error {
	return it.rdb.Unlink(ctx, it.stock, it.sold, it.lock).Err()
}

// intValue decodes an MGET value; a missing key is 0.
func intValue(v any) (int64, error) {
	if v == nil {
		return 0, nil
	}
	s, _ := v.(string)
	return strconv.ParseInt(s, 10, 64)
}

// segmentedItem splits the stock over segments, each its own key with its
// own sold counter. A buy starts at the segment its buyer hashes to and
// falls through to the next ones; each take is take.lua, atomic on its
// segment. The item is sold out when a buyer found every segment empty
// (segments only ever shrink).
type segmentedItem struct {
	rdb         *redis.Client
	segs, solds []string
}

func prepareSegmented(ctx context.Context, s *Stores, cfg Config, stock int64) (hotItem, error) {
	tag := "{" + s.newItemTag() + "}"
	k := int64(cfg.Segments)
	it := &segmentedItem{rdb: s.Redis}
	var pairs []any
	for i := range k {
		seg, sold := tag+":seg:"+strconv.FormatInt(i, 10), tag+":sold:"+strconv.FormatInt(i, 10)
		it.segs, it.solds = append(it.segs, seg), append(it.solds, sold)
		units := stock / k
		if i < stock%k {
			units++
		}
		pairs = append(pairs, seg, units, sold, 0)
	}
	if err := s.Redis.MSet(ctx, pairs...).Err(); err != nil {
		return nil, err
	}
	return it, nil
}

func (it *segmentedItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i, b := range buyers {
		out[i] = it.take(ctx, b)
	}
}

func (it *segmentedItem) take(ctx context.Context, buyer string) outcome {
	h := fnv.New32a()
	h.Write([]byte(buyer))
	k := len(it.segs)
	start := int(h.Sum32() % uint32(k))
	for j := range k {
		i := (start + j) % k
		left, err := takeScript.Run(ctx, it.rdb, []string{it.segs[i], it.solds[i]}, 1).Int64()
		if err != nil {
			return outcome{retries: int64(j), err: err}
		}
		if left >= 0 {
			return outcome{sold: true, retries: int64(j)}
		}
	}
	return outcome{soldOut: true, retries: int64(k - 1)}
}

func (it *segmentedItem) count(ctx context.Context) (tally, error) {
	var t tally
	for _, keys := range []struct {
		names []string
		sum   *int64
	}{{it.segs, &t.remaining}, {it.solds, &t.sold}} {
		vs, err := it.rdb.MGet(ctx, keys.names...).Result()
		if err != nil {
			return t, err
		}
		for j, v := range vs {
			n, err := intValue(v)
			if err != nil {
				return t, fmt.Errorf("%s: %w", keys.names[j], err)
			}
			*keys.sum += n
		}
	}
	return t, nil
}

func (it *segmentedItem) drop(ctx context.Context) error {
	return it.rdb.Unlink(ctx, append(append([]string{}, it.segs...), it.solds...)...).Err()
}
