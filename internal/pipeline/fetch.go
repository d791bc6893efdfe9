package pipeline

// A round's read: every sale of it once, its own pending list or new
// entries (fetch), in one command on a single node (fetchMulti) or one
// read per sale in a pipeline (fetchEach).

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// batch is what one round read from one sale.
type batch struct {
	sale *sale
	msgs []redis.XMessage
}

// fetch reads every sale that is ready once: its own pending list if it
// is flagged own, else new entries. On a single node it is one command,
// which waits up to Block when it reads nothing but new entries; on a
// Cluster a pipeline of one read per sale, and a pause when it found
// nothing.
//
// Without block it never waits for new entries (a round of a reader with
// many sales, see due): it reads what is there.
func (c *Consumer) fetch(ctx context.Context, r int, sales []*sale, block bool) ([]batch, error) {
	now := time.Now()
	var read []*sale
	nowait := !block // a pending list answers at once too
	wait := c.o.Block
	for _, sl := range sales {
		switch {
		case now.Before(sl.retryAt):
			wait = min(wait, sl.retryAt.Sub(now))
		case !sl.ready:
		default:
			read = append(read, sl)
			nowait = nowait || sl.own
		}
	}
	if len(read) == 0 {
		c.pause(ctx, r, max(wait, time.Millisecond))
		return nil, nil
	}
	c.mu.Lock()
	for _, sl := range read {
		if !sl.own && sl.wakes != sl.readWakes {
			sl.readWakes, sl.recheck = sl.wakes, true
		}
	}
	c.mu.Unlock()
	if c.multi {
		got, err := c.fetchMulti(ctx, read, nowait, wait)
		var reply redis.Error
		if !errors.As(err, &reply) {
			return got, err
		}
		// A reply error (no group, a key of another type) names no stream:
		// read them one by one this round, which finds the one at fault.
	}
	got, err := c.fetchEach(ctx, read)
	if err == nil && len(got) == 0 && !nowait {
		c.pause(ctx, r, wait) // a Cluster cannot wait on many streams at once: poll
	}
	return got, err
}

func (c *Consumer) fetchMulti(ctx context.Context, read []*sale, nowait bool, wait time.Duration) ([]batch, error) {
	streams := make([]string, 0, 2*len(read))
	for _, sl := range read {
		streams = append(streams, sl.key)
	}
	for _, sl := range read {
		streams = append(streams, startOf(sl))
	}
	block := max(wait, time.Millisecond) // 0 would wait for ever
	if nowait {
		block = -1
	}
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: c.o.Name, Streams: streams, Count: c.o.BatchSize, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	byKey := make(map[string][]redis.XMessage, len(res))
	for _, st := range res {
		byKey[st.Stream] = st.Messages
	}
	got := make([]batch, 0, len(res))
	for _, sl := range read {
		msgs, ok := byKey[sl.key]
		if sl.own && (!ok || len(msgs) == 0) {
			sl.own = false // nothing of its own left
			continue
		}
		if len(msgs) > 0 {
			got = append(got, batch{sale: sl, msgs: msgs})
		}
	}
	return got, nil
}

func (c *Consumer) fetchEach(ctx context.Context, read []*sale) ([]batch, error) {
	cmds := make([]*redis.XStreamSliceCmd, len(read))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sl := range read {
			cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: Group, Consumer: c.o.Name, Streams: []string{sl.key, startOf(sl)}, Count: c.o.BatchSize, Block: -1,
			})
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &reply) {
		return nil, err // a connection error: every read of it is in doubt
	}
	var got []batch
	for i, sl := range read {
		res, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"): // the stream was lost with Redis: start over
			// Its news, if this read was for them, were not read: kept
			// for the read after the group's (see due; the first read of
			// a group made anew is of the pending list, which ends no news).
			sl.ready = false
			c.keepNews(sl)
			continue
		case err != nil:
			c.o.Logger.Warn("order pipeline: read", "sale", sl.id, "err", err)
			sl.own = true
			c.keepNews(sl)
			continue
		}
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		if sl.own && len(msgs) == 0 {
			sl.own = false
			continue
		}
		if len(msgs) > 0 {
			got = append(got, batch{sale: sl, msgs: msgs})
		}
	}
	return got, nil
}

// startOf is where a read of the sale starts: its own pending list, or new
// entries.
func startOf(sl *sale) string {
	if sl.own {
		return "0"
	}
	return ">"
}
