package pipeline

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// claimAll looks, for every sale, for entries of dead consumers and takes
// them over; they are read with this consumer's own pending list.
func (c *Consumer) claimAll(ctx context.Context, sales []*sale) {
	var ready []*sale
	for _, sl := range sales {
		if sl.ready {
			ready = append(ready, sl)
		}
	}
	if len(ready) == 0 {
		return
	}
	if c.o.Alive != nil {
		summaries := make([]*redis.XPendingCmd, len(ready))
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sl := range ready {
				summaries[i] = p.XPending(ctx, sl.key, Group)
			}
			return nil
		})
		// A sale whose summary says no other consumer holds an entry has
		// none to take over: its XAUTOCLAIM is skipped (most sales, most
		// of the time).
		held := ready[:0:0]
		for i, sl := range ready {
			sum, err := summaries[i].Result()
			switch {
			case err != nil:
				held = append(held, sl)
			case othersHold(sum, c.o.Name):
				c.claimDead(ctx, sl.key, sl.id, sum)
				held = append(held, sl)
			}
		}
		ready = held
		if len(ready) == 0 {
			return
		}
	}
	cmds := make([]*redis.XAutoClaimCmd, len(ready))
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sl := range ready {
			cmds[i] = p.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: sl.key, Group: Group, Consumer: c.o.Name, MinIdle: c.o.ClaimIdle, Start: "0-0", Count: c.o.BatchSize})
		}
		return nil
	})
	for i, sl := range ready {
		msgs, next, err := cmds[i].Result()
		if err != nil {
			if ctx.Err() == nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
				c.o.Logger.Warn("order pipeline: reclaim", "sale", sl.id, "err", err)
			}
			continue
		}
		n := len(msgs)
		if next != "0-0" && next != "" {
			n += c.claim(ctx, sl.key, sl.id, next)
		}
		if n > 0 {
			c.o.Logger.Info("order pipeline: reclaimed entries of a dead consumer", "sale", sl.id, "entries", n)
		}
	}
}

// othersHold reports whether consumers other than name hold entries.
func othersHold(sum *redis.XPending, name string) bool {
	for consumer, n := range sum.Consumers {
		if consumer != name && n > 0 {
			return true
		}
	}
	return false
}

// claim moves entries idle in other (dead) consumers to this one, from
// start on.
func (c *Consumer) claim(ctx context.Context, key, saleID, start string) int {
	total := 0
	for ctx.Err() == nil {
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: key, Group: Group, Consumer: c.o.Name, MinIdle: c.o.ClaimIdle, Start: start, Count: c.o.BatchSize,
		}).Result()
		if err != nil {
			if ctx.Err() == nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
				c.o.Logger.Warn("order pipeline: reclaim", "sale", saleID, "err", err)
			}
			return total
		}
		total += len(msgs)
		if next == "0-0" || next == "" {
			return total
		}
		start = next
	}
	return total
}

// claimDead moves every entry pending in a consumer that Options.Alive
// says has stopped to this one, however briefly it has been idle.
func (c *Consumer) claimDead(ctx context.Context, key, saleID string, summary *redis.XPending) int {
	total := 0
	for name, n := range summary.Consumers {
		if name == c.o.Name || n == 0 || c.o.Alive(ctx, name) {
			continue
		}
		for ctx.Err() == nil {
			pending, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: Group, Start: "-", End: "+",
				Count: c.o.BatchSize, Consumer: name}).Result()
			if err != nil || len(pending) == 0 {
				break
			}
			ids := make([]string, len(pending))
			for i, p := range pending {
				ids[i] = p.ID
			}
			claimed, err := c.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: key, Group: Group, Consumer: c.o.Name, Messages: ids}).Result()
			if err != nil {
				c.o.Logger.Warn("order pipeline: take over a stopped consumer's entries", "sale", saleID, "consumer", name, "err", err)
				break
			}
			total += len(claimed)
			if len(claimed) < len(ids) {
				break // the rest went elsewhere meanwhile
			}
		}
		if total > 0 {
			c.o.Logger.Info("order pipeline: took over a stopped consumer's entries", "sale", saleID, "consumer", name, "entries", total)
		}
	}
	return total
}

func (c *Consumer) deadLetter(ctx context.Context, saleID string, m redis.XMessage, reason string) {
	c.o.Logger.Error("order pipeline: entry can never be stored; dead-lettered", "sale", saleID, "entry", m.ID, "reason", reason)
	backoff := c.backoff()
	for {
		err := c.db.DeadLetter(ctx, saleID, m.ID, reason, m.Values)
		if err == nil {
			break
		}
		c.o.Logger.Warn("order pipeline: dead letter", "sale", saleID, "err", err)
		backoff.wait(ctx)
	}
	if c.o.OnDeadLetter != nil {
		c.o.OnDeadLetter(saleID, reason)
	}
}
