package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/lock"
)

// The read-check-write approaches (naive, lock) keep their hot item under
// the hash tag {bench-<run>-<n>}, and count every unit they deduct in a sold
// counter that Redis keeps, written in the same MULTI as the DECRBY.
// Afterwards the counter is what was sold, and the stock key what is left.
// The lock is the project's lock package; the segmented approach is the
// project's segment package over the engine.

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

// counterItem is the hot item of redis-naive and redis-lock: a stock key
// and a sold counter.
type counterItem struct {
	rdb         *redis.Client
	tag         string // the item's name, inside its keys' hash tag
	stock, sold string
}

func newCounterItem(ctx context.Context, s *Stores, stock int64) (*counterItem, error) {
	tag := s.newItemTag()
	it := &counterItem{rdb: s.Redis, tag: tag, stock: "{" + tag + "}:stock", sold: "{" + tag + "}:sold"}
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

// lockItem does the same read-check-write while holding a lock of the
// project's lock package (SET NX PX with an owner token, a fencing counter,
// compare-and-delete release). A buyer that finds the lock taken pauses
// about lockWait and tries again, counting its retries.
type lockItem struct {
	*counterItem
	locker *lock.Locker
	name   string
}

func prepareLock(ctx context.Context, s *Stores, _ Config, stock int64) (hotItem, error) {
	it, err := newCounterItem(ctx, s, stock)
	if err != nil {
		return nil, err
	}
	locker, err := lock.New(s.Redis, lock.Options{Prefix: it.tag})
	if err != nil {
		return nil, err
	}
	return lockItem{counterItem: it, locker: locker, name: "stock"}, nil
}

func (it lockItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i := range buyers {
		out[i] = it.buyLocked(ctx)
	}
}

func (it lockItem) buyLocked(ctx context.Context) outcome {
	var retries int64
	var lease *lock.Lease
	for {
		var err error
		lease, err = it.locker.Acquire(ctx, it.name, lock.WithTTL(lockTTL), lock.WithoutRenewal())
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			return outcome{retries: retries, err: err}
		}
		retries++
		wait := lockWait/2 + rand.N(lockWait)
		select {
		case <-ctx.Done():
			return outcome{retries: retries, err: ctx.Err()}
		case <-time.After(wait):
		}
	}
	o := it.readCheckWrite(lease.Context())
	o.retries = retries
	if err := lease.Release(ctx); err != nil && o.err == nil {
		o.err = fmt.Errorf("release lock: %w", err)
	}
	return o
}

func (it lockItem) drop(ctx context.Context) error {
	keys := []string{it.stock, it.sold}
	iter := it.rdb.Scan(ctx, 0, "{"+it.tag+":"+it.name+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return it.rdb.Unlink(ctx, keys...).Err()
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
	return it.rdb.Unlink(ctx, it.stock, it.sold).Err()
}

// intValue decodes an MGET value; a missing key is 0.
func intValue(v any) (int64, error) {
	if v == nil {
		return 0, nil
	}
	s, _ := v.(string)
	return strconv.ParseInt(s, 10, 64)
}

// segmentedItem sells the hot item through the project's segment package:
// the stock is split over K segment sales of the engine, each buy is a full
// engine buy (per-user limit, order record, order event) in the buyer's home
// segment, falling through by moving units from the segments with the most
// left. What was sold is counted from the segments' order streams (one
// "bought" event per order), what is left from the segments' stock.
type segmentedItem struct {
	rdb    *redis.Client
	tag    string
	eng    *inventory.Engine
	seller *segment.Seller
	line   []inventory.Line
}

func prepareSegmented(ctx context.Context, s *Stores, cfg Config, stock int64) (hotItem, error) {
	tag := s.newItemTag()
	eng := inventory.New(s.Redis, inventory.Options{Prefix: tag})
	it := &segmentedItem{rdb: s.Redis, tag: tag, eng: eng, seller: segment.New(eng, s.Redis, segment.Options{}),
		line: []inventory.Line{{SKU: engineSKU, Qty: 1}}}
	ids, err := it.seller.Place(ctx, engineSale, cfg.Segments)
	if err != nil {
		return nil, err
	}
	sale := inventory.Sale{ID: engineSale, PerUserLimit: 1, Items: []inventory.Item{{SKU: engineSKU, Stock: stock}}}
	if err := it.seller.Create(ctx, sale, ids); err != nil {
		_ = it.drop(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := eng.Preload(ctx); err != nil {
		_ = it.drop(context.WithoutCancel(ctx))
		return nil, err
	}
	return it, nil
}

func (it *segmentedItem) buy(ctx context.Context, buyers []string, out []outcome) {
	for i, b := range buyers {
		_, err := it.seller.Buy(ctx, inventory.BuyRequest{SaleID: engineSale, UserID: b, Lines: it.line})
		out[i] = buyOutcome(err)
	}
}

func (it *segmentedItem) count(ctx context.Context) (tally, error) {
	sum, _, err := it.seller.Stock(ctx, engineSale)
	if err != nil {
		return tally{}, err
	}
	if len(sum.Items) != 1 {
		return tally{}, fmt.Errorf("sale has %d items, want 1", len(sum.Items))
	}
	segs, err := it.seller.Segments(ctx, engineSale)
	if err != nil {
		return tally{}, err
	}
	t := tally{remaining: sum.Items[0].Remaining}
	for _, seg := range segs {
		n, err := boughtEvents(ctx, it.rdb, seg, it.eng.EventsKey(seg))
		if err != nil {
			return t, err
		}
		t.sold += n
	}
	return t, nil
}

// boughtEvents counts the "bought" events of one sale's stream (nothing
// trims it: no order consumer runs here).
func boughtEvents(ctx context.Context, rdb *redis.Client, sale, stream string) (int64, error) {
	var n int64
	from := "-"
	for {
		msgs, err := rdb.XRangeN(ctx, stream, from, "+", 10000).Result()
		if err != nil {
			return n, err
		}
		evs, err := inventory.ParseEntries(sale, msgs) // every order of an entry of several
		if err != nil {
			return n, fmt.Errorf("%s: %w", stream, err)
		}
		for _, ev := range evs {
			if ev.Type == inventory.EventBought {
				n++
			}
		}
		if len(msgs) < 10000 {
			return n, nil
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}

func (it *segmentedItem) drop(ctx context.Context) error {
	var keys []string
	iter := it.rdb.Scan(ctx, 0, "{"+it.tag+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return it.rdb.Unlink(ctx, keys...).Err()
}
