// Package pipeline moves orders from each sale's Redis Stream into the
// database: a consumer group per sale stream, batches applied in one
// transaction each, XACK only after the commit, entries of dead consumers
// reclaimed, entries that can never be written dead-lettered.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/store"
)

// Group is the consumer group every seckill instance reads a sale's stream in.
const Group = "orders"

// Store is the part of the database the consumer writes to.
type Store interface {
	SaleIDs(ctx context.Context) ([]string, error)
	Apply(ctx context.Context, saleID string, events []inventory.Event) error
	DeadLetter(ctx context.Context, saleID, eventID, reason string, fields map[string]any) error
}

// Options tune a Consumer; zero values take the defaults.
type Options struct {
	Name        string        // consumer name in the group; default host-pid-random
	BatchSize   int64         // entries per read and per transaction; default 500
	Block       time.Duration // how long a read waits for new entries; default 500ms
	ClaimIdle   time.Duration // reclaim entries pending this long in other consumers; default 30s
	ClaimEvery  time.Duration // how often to look for them; default 5s
	DiscoverAll time.Duration // how often to look for new sales; default 1s
	MaxBackoff  time.Duration // the longest wait between retries of a failing database; default 5s
	// Alive, if set, says whether another consumer's process still runs;
	// the entries pending in one it says is not are taken over at the next
	// claim tick, without waiting for ClaimIdle. A wrong "not alive" only
	// costs applying entries twice, which changes nothing.
	Alive  func(ctx context.Context, consumer string) bool
	Logger *slog.Logger
	// Hooks for metrics; nil ones are skipped.
	OnBatch      func(saleID string, n int, took time.Duration)
	OnDeadLetter func(saleID, reason string)
	OnRetry      func(saleID string, err error)
}

// Consumer runs one reader per sale. Several instances (processes) may
// run at once; the group splits the entries between them.
type Consumer struct {
	rdb    redis.UniversalClient
	eng    *inventory.Engine
	db     Store
	o      Options
	mu     sync.Mutex
	active map[string]bool
}

// New returns a consumer of the streams of eng's sales in rdb, writing to db.
func New(rdb redis.UniversalClient, eng *inventory.Engine, db Store, o Options) *Consumer {
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.Block <= 0 {
		o.Block = 500 * time.Millisecond
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = 30 * time.Second
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = 5 * time.Second
	}
	if o.DiscoverAll <= 0 {
		o.DiscoverAll = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{rdb: rdb, eng: eng, db: db, o: o, active: map[string]bool{}}
}

// Run reads every sale's stream until ctx is done, then finishes the batch
// each reader is applying and returns.
func (c *Consumer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(c.o.DiscoverAll)
	defer tick.Stop()
	for {
		ids, err := c.db.SaleIDs(ctx)
		if err != nil && ctx.Err() == nil {
			c.o.Logger.Warn("order pipeline: list sales", "err", err)
		}
		for _, id := range ids {
			c.mu.Lock()
			started := c.active[id]
			c.active[id] = true
			c.mu.Unlock()
			if !started {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.runSale(ctx, id)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// runSale is the reader of one sale's stream.
func (c *Consumer) runSale(ctx context.Context, saleID string) {
	key := c.eng.EventsKey(saleID)
	log := c.o.Logger.With("sale", saleID)
	backoff := c.backoff()
	for ctx.Err() == nil {
		err := c.rdb.XGroupCreateMkStream(ctx, key, Group, "0").Err()
		if err == nil || strings.HasPrefix(err.Error(), "BUSYGROUP") {
			break
		}
		log.Warn("order pipeline: create consumer group", "err", err)
		backoff.wait(ctx)
	}
	own := true // first drain what this consumer already holds (a restart)
	nextClaim := time.Now()
	for ctx.Err() == nil {
		if time.Now().After(nextClaim) {
			nextClaim = time.Now().Add(c.o.ClaimEvery)
			if n := c.claim(ctx, key, saleID); n > 0 {
				log.Info("order pipeline: reclaimed entries of a dead consumer", "entries", n)
			}
			// Also re-read this consumer's own pending list: the client
			// retries a read whose reply a dropped connection lost, and the
			// entries that first read delivered wait there unseen.
			own = true
		}
		start, block := ">", c.o.Block
		if own {
			start, block = "0", -1
		}
		streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: c.o.Name, Streams: []string{key, start},
			Count: c.o.BatchSize, Block: block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				if strings.HasPrefix(err.Error(), "NOGROUP") { // the stream was lost with Redis: start over
					_ = c.rdb.XGroupCreateMkStream(ctx, key, Group, "0").Err()
				} else {
					log.Warn("order pipeline: read", "err", err)
				}
				backoff.wait(ctx)
			}
			// A read whose reply was lost may still have moved entries
			// into this consumer's pending list: read those first.
			own = true
			continue
		}
		backoff.reset()
		var msgs []redis.XMessage
		if len(streams) > 0 {
			msgs = streams[0].Messages
		}
		if own && len(msgs) == 0 {
			own = false
			continue
		}
		// The batch read is finished even when ctx ends meanwhile: it is
		// what graceful shutdown waits for.
		if !c.process(context.WithoutCancel(ctx), ctx, key, saleID, msgs) {
			own = true // not acknowledged: they stay pending here, read them again
		}
	}
}

// claim moves entries idle in other (dead) consumers to this one.
func (c *Consumer) claim(ctx context.Context, key, saleID string) int {
	total, start := c.claimDead(ctx, key, saleID), "0-0"
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
func (c *Consumer) claimDead(ctx context.Context, key, saleID string) int {
	if c.o.Alive == nil {
		return 0
	}
	summary, err := c.rdb.XPending(ctx, key, Group).Result()
	if err != nil || summary.Count == 0 {
		return 0
	}
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

// process applies one batch, retrying a failing database until it
// succeeds or stop ends; then acknowledges it and trims the stream. It
// reports whether the batch was acknowledged.
func (c *Consumer) process(ctx, stop context.Context, key, saleID string, msgs []redis.XMessage) bool {
	began := time.Now()
	events := make([]inventory.Event, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
		if m.Values == nil { // deleted from the stream while pending: nothing to apply
			continue
		}
		ev, err := inventory.ParseEvent(saleID, m)
		if err != nil {
			c.deadLetter(ctx, saleID, m, err.Error())
			continue
		}
		events = append(events, ev)
	}
	backoff := c.backoff()
	for len(events) > 0 {
		err := c.db.Apply(ctx, saleID, events)
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrPermanent) {
			events = c.applyEach(ctx, stop, saleID, events, msgs)
			continue
		}
		if c.o.OnRetry != nil {
			c.o.OnRetry(saleID, err)
		}
		c.o.Logger.Warn("order pipeline: database write failed; retrying", "sale", saleID, "events", len(events), "err", err)
		if stop.Err() != nil {
			return false // not acknowledged: this consumer, or another, applies it later
		}
		backoff.wait(stop)
	}
	if len(ids) == 0 {
		return true
	}
	if err := c.rdb.XAck(ctx, key, Group, ids...).Err(); err != nil {
		c.o.Logger.Warn("order pipeline: ack", "sale", saleID, "err", err) // applied again later: idempotent
		return false
	}
	c.trim(ctx, key)
	if c.o.OnBatch != nil {
		c.o.OnBatch(saleID, len(ids), time.Since(began))
	}
	c.o.Logger.Info("order pipeline: batch stored", "sale", saleID, "entries", len(ids), "took", time.Since(began))
	return true
}

// applyEach applies events one at a time after a batch was refused as
// permanent, dead-lettering the ones the database can never take. It
// returns the events still to apply (after a transient failure).
func (c *Consumer) applyEach(ctx, stop context.Context, saleID string, events []inventory.Event, msgs []redis.XMessage) []inventory.Event {
	for i, ev := range events {
		err := c.db.Apply(ctx, saleID, []inventory.Event{ev})
		switch {
		case err == nil:
		case errors.Is(err, store.ErrPermanent):
			for _, m := range msgs {
				if m.ID == ev.ID {
					c.deadLetter(ctx, saleID, m, err.Error())
				}
			}
		default:
			return events[i:]
		}
	}
	return nil
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

// trim drops the entries every consumer has acknowledged: everything
// older than the oldest pending entry, or than the next undelivered one.
func (c *Consumer) trim(ctx context.Context, key string) {
	b, err := readBacklog(ctx, c.rdb, key)
	if err != nil || b.minNeeded == "" {
		return
	}
	_ = c.rdb.XTrimMinID(ctx, key, b.minNeeded).Err()
}

type backoff struct {
	cur, max time.Duration
}

func (c *Consumer) backoff() *backoff {
	return &backoff{cur: 50 * time.Millisecond, max: c.o.MaxBackoff}
}

func (b *backoff) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(b.cur):
	}
	b.cur = min(2*b.cur, b.max)
}

func (b *backoff) reset() { b.cur = 50 * time.Millisecond }
