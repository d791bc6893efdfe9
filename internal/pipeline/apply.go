package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// processAll applies the round's batches, then acknowledges the stored
// ones in one pipeline. With a store that applies several sales at once
// (ManyStore), the batches of two or more sales go in one transaction;
// if that fails (a permanent error in one sale's events, or the database),
// each sale's batch is applied on its own, as without it, so that one
// sale's poisoned event or retries hold up no other. Sales are applied
// Appliers at a time.
func (c *Consumer) processAll(ctx, stop context.Context, got []batch) {
	if len(got) == 0 {
		return
	}
	began := time.Now()
	stored := make([]bool, len(got))
	events := make([][]inventory.Event, len(got))
	for i, b := range got {
		events[i] = c.parse(ctx, b)
	}
	if !c.applyMany(ctx, got, events) {
		sem := make(chan struct{}, c.o.Appliers)
		var wg sync.WaitGroup
		for i, b := range got {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				stored[i] = c.apply(ctx, stop, b, events[i])
			})
		}
		wg.Wait()
	} else {
		for i, b := range got {
			stored[i] = true
			b.sale.backoff.reset()
		}
	}
	acks := make([]*redis.IntCmd, len(got))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range got {
			if stored[i] {
				ids := make([]string, len(b.msgs))
				for j, m := range b.msgs {
					ids[j] = m.ID
				}
				acks[i] = p.XAck(ctx, b.sale.key, Group, ids...)
			}
		}
		return nil
	})
	var reply redis.Error // a reply error is its command's alone; any other leaves every ack in doubt
	inDoubt := err != nil && !errors.As(err, &reply)
	for i, b := range got {
		sl := b.sale
		switch {
		case !stored[i]:
			sl.own = true // not acknowledged: they stay pending here, read them again
		case inDoubt || acks[i].Err() != nil:
			c.o.Logger.Warn("order pipeline: ack", "sale", sl.id, "err", errors.Join(err, acks[i].Err())) // applied again later: idempotent
			sl.own = true
		default:
			sl.trimDue = true
			if c.o.OnBatch != nil {
				c.o.OnBatch(sl.id, len(b.msgs), time.Since(began))
			}
			c.o.Logger.Info("order pipeline: batch stored", "sale", sl.id, "entries", len(b.msgs), "took", time.Since(began))
		}
	}
}

// ManyStore is a Store that also applies the events of several sales in
// one transaction (store.Store.ApplyMany). The consumer uses it when its
// Store has it.
type ManyStore interface {
	ApplyMany(ctx context.Context, sales []store.SaleEvents) error
}

// applyMany applies the batches of two or more sales in one transaction,
// if the store can, and reports whether it did.
func (c *Consumer) applyMany(ctx context.Context, got []batch, events [][]inventory.Event) bool {
	many, ok := c.db.(ManyStore)
	if !ok {
		return false
	}
	sales := make([]store.SaleEvents, 0, len(got))
	for i, b := range got {
		if len(events[i]) > 0 {
			sales = append(sales, store.SaleEvents{SaleID: b.sale.id, Events: events[i]})
		}
	}
	if len(sales) < 2 {
		return false
	}
	if err := many.ApplyMany(ctx, sales); err != nil {
		c.o.Logger.Debug("order pipeline: batches of several sales refused together; applying each on its own", "sales", len(sales), "err", err)
		return false
	}
	return true
}

// parse decodes a batch's entries into events (an entry of several orders
// into one event per order, see inventory.ParseEntry), dead-lettering the
// ones that cannot be: an order of such an entry on its own, under its own
// id. The batch's entries are acknowledged only once every event of them
// is stored or dead-lettered (processAll).
func (c *Consumer) parse(ctx context.Context, b batch) []inventory.Event {
	saleID := b.sale.id
	events := make([]inventory.Event, 0, len(b.msgs))
	for _, m := range b.msgs {
		if m.Values == nil { // deleted from the stream while pending: nothing to apply
			continue
		}
		var bad []inventory.BadEvent
		events, bad = inventory.ParseEntry(events, saleID, m)
		for _, x := range bad {
			c.deadLetter(ctx, saleID, redis.XMessage{ID: x.ID, Values: x.Values}, x.Err.Error())
		}
	}
	return events
}

// apply writes one batch's events to the database and reports whether it
// may be acknowledged. A failing database is tried again after the sale's
// backoff, in a later round: the other sales go on meanwhile.
func (c *Consumer) apply(ctx, stop context.Context, b batch, events []inventory.Event) bool {
	saleID := b.sale.id
	for len(events) > 0 {
		err := c.db.Apply(ctx, saleID, events)
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrPermanent) {
			events = c.applyEach(ctx, stop, saleID, events, b.msgs)
			if len(events) > 0 {
				continue
			}
			break
		}
		if c.o.OnRetry != nil {
			c.o.OnRetry(saleID, err)
		}
		c.o.Logger.Warn("order pipeline: database write failed; retrying", "sale", saleID, "events", len(events), "err", err)
		b.sale.retryAt = time.Now().Add(b.sale.backoff.next())
		return false // not acknowledged: this consumer, or another, applies it later
	}
	b.sale.backoff.reset()
	return true
}

// trimAll trims the streams with acknowledged entries, each at most once a
// second and at most trimsPerRound a round (the ones trimmed longest ago
// first): it reads where the group stands in each (atomically) and drops
// what every consumer has acknowledged: everything older than the oldest
// pending entry, or than the next undelivered one. Without the bound, the
// sales bought from in one round all fell due in one later round, and
// their reads (four commands a sale, in transactions) and trims came in
// one burst that buys queued behind; a sale left for a later round keeps
// its acknowledged entries a little longer.
func (c *Consumer) trimAll(ctx context.Context, sales []*sale) {
	now := time.Now()
	var due []*sale
	for _, sl := range sales {
		if sl.trimDue && now.Sub(sl.lastTrim) >= trimEvery {
			due = append(due, sl)
		}
	}
	if len(due) > trimsPerRound {
		slices.SortFunc(due, func(a, b *sale) int { return a.lastTrim.Compare(b.lastTrim) })
		due = due[:trimsPerRound]
	}
	keys := make([]string, len(due))
	for i, sl := range due {
		sl.trimDue, sl.lastTrim = false, now
		keys[i] = sl.key
	}
	if len(due) == 0 || ctx.Err() != nil {
		return
	}
	bs, err := readBacklogs(ctx, c.rdb, keys)
	if err != nil {
		return
	}
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bs {
			if b.minNeeded != "" {
				p.XTrimMinID(ctx, keys[i], b.minNeeded)
			}
		}
		return nil
	})
}

const trimEvery = time.Second

// trimsPerRound bounds the streams one round trims (see trimAll).
var trimsPerRound = 64

// settleEnded marks sales that have ended and whose streams hold nothing
// unapplied as idle: they are not read again until woken or swept. Each is
// looked at once a claim period at most.
func (c *Consumer) settleEnded(ctx context.Context, sales []*sale, got []batch) {
	now := time.Now()
	busy := make(map[*sale]bool, len(got))
	for _, b := range got {
		busy[b.sale] = true
	}
	for _, sl := range sales {
		c.mu.Lock()
		ended := !sl.endsAt.IsZero() && !now.Before(sl.endsAt)
		wakes := sl.wakes
		c.mu.Unlock()
		// A sale with no group has nothing of its own pending nor to
		// trim: idle if its stream holds nothing (it has none: the sale is
		// not in Redis; see createGroups).
		if !ended || busy[sl] || (sl.ready && (sl.own || sl.trimDue)) || now.Before(sl.checkIdle) || ctx.Err() != nil {
			continue
		}
		sl.checkIdle = now.Add(c.o.ClaimEvery)
		b, err := readBacklog(ctx, c.rdb, sl.key)
		if err != nil || b.inFlight() {
			continue // still in flight somewhere
		}
		c.mu.Lock()
		if sl.wakes == wakes { // not woken meanwhile: the entry that woke it may be newer than the read
			sl.idle = true
		}
		c.mu.Unlock()
	}
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
			c.deadLetter(ctx, saleID, entryOf(ev, msgs), err.Error())
		default:
			return events[i:]
		}
	}
	return nil
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

// next returns the wait before the next try and doubles it.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d
}

func (b *backoff) reset() { b.cur = 50 * time.Millisecond }

// entryOf is what a dead letter of ev keeps: its entry, or for an order of
// an entry of several orders, that order alone as an entry of its own
// (inventory.OrderEntry) under its own id.
func entryOf(ev inventory.Event, msgs []redis.XMessage) redis.XMessage {
	for _, m := range msgs {
		if m.ID == ev.ID && !inventory.HoldsOrders(m) {
			return m
		}
	}
	return redis.XMessage{ID: ev.ID, Values: inventory.OrderEntry(ev)}
}
