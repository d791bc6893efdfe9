// Package pipeline moves orders from each sale's Redis Stream into the
// database: a consumer group per sale stream, batches applied in one
// transaction each, XACK only after the commit, entries of dead consumers
// reclaimed, entries that can never be written dead-lettered.
//
// A consumer reads any number of sales over a fixed number of connections:
// Options.Readers readers, each reading its share of the sales with one
// command per round (a multi-stream XREADGROUP that blocks, on a single
// node) or one pipeline of non-blocking reads (a Cluster, whose commands
// cannot span slots), so give it a client of its own with that many
// connections (Options.Readers per node). Sales that have ended and whose streams are
// drained are not read at all until Wake names them, or the sweep every
// Options.IdleSweep looks at them again.
package pipeline

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// Group is the consumer group every seckill instance reads a sale's stream in.
const Group = "orders"

// Store is the part of the database the consumer writes to.
type Store interface {
	// SaleEnds returns every sale's end by id (zero: no end).
	SaleEnds(ctx context.Context) (map[string]time.Time, error)
	Apply(ctx context.Context, saleID string, events []inventory.Event) error
	DeadLetter(ctx context.Context, saleID, eventID, reason string, fields map[string]any) error
}

// Options tune a Consumer; zero values take the defaults.
type Options struct {
	Name        string        // consumer name in the group; default host-pid-random
	BatchSize   int64         // entries per read of a sale and per transaction; default 500
	Block       time.Duration // how long a read waits for new entries; default 500ms
	ClaimIdle   time.Duration // reclaim entries pending this long in other consumers; default 30s
	ClaimEvery  time.Duration // how often to look for them; default 5s
	DiscoverAll time.Duration // how often to look for new sales; default 1s
	MaxBackoff  time.Duration // the longest wait between retries of a failing database; default 5s
	// Readers is how many readers share the sales, each on one connection
	// at a time; default 2. A client of the consumer's own needs no more
	// connections than this (per node, on a Cluster).
	Readers int
	// Appliers is how many batches of one reader's round are written to
	// the database at once; default 1 (each reader writes its batches in
	// turn: with thousands of sales, parallel writes took CPU the buys
	// needed on a small machine).
	Appliers int
	// Linger is how long a round lasts at least, from its read, when it
	// read entries but filled no sale's batch (the consumer keeps up):
	// the next read waits the rest, so that each transaction carries more
	// orders. PostgreSQL spends about half a millisecond of CPU on every
	// transaction whatever it holds (its commit's WAL flush, a few
	// statements): at a thousand buys a second, rounds back to back carry
	// a handful of orders each, and that fixed cost is most of what an
	// order costs. Orders reach the database up to Linger later (reads of
	// an order not stored yet answer from Redis). Default 20ms; negative:
	// read again at once. A round over many sales lasts longer (see
	// lingerOf): one Linger per lingerSales sales it reads, up to
	// lingerMost Lingers.
	Linger time.Duration
	// A reader with more than quietAll sales (64) does not name them all in
	// every read (a read costs Redis about 2 µs per stream it names,
	// entries or not: ten thousand sales named five times a second were a
	// tenth of a core, and as much again of this process). Each round it
	// reads the sales this process appended to since their last read
	// (Wake, Heard: buys, cancels) and the ones with entries of their own
	// to read again, without waiting; the others in sweeps, at most one
	// every QuietEvery, each sale every max(QuietEvery, its reader's sales ÷
	// QuietReads per second). An entry another process appended reaches
	// the database within that (10,000 sales: 10 s; its own consumer
	// usually reads it first). Defaults: QuietEvery 1s, QuietReads 500 a
	// second per reader. QuietAfter (default 10s) is how long a sale
	// counts as active (Active) after a read returned entries of it or
	// Wake or Heard named it.
	QuietAfter time.Duration
	QuietEvery time.Duration
	QuietReads int
	// IdleSweep is how often sales that have ended and were drained are
	// read again, in case an entry reached them that no Wake announced (a
	// cancel on an instance that stopped before reading it); default 1m.
	IdleSweep time.Duration
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

// Consumer reads the streams of every sale. Several instances (processes)
// may run at once; the group splits the entries between them.
type Consumer struct {
	rdb   redis.UniversalClient
	multi bool // one command may read many streams (not a Cluster)
	keys  StreamKeys
	db    Store
	o     Options
	mu    sync.Mutex
	sales map[string]*sale
	wake  []chan struct{} // one per reader: read now
	news  []chan struct{} // one per reader: a sale of its has new entries (Heard)
	round rounds
}

// sale is what the consumer keeps of one sale; its fields past the first
// three belong to the sale's reader.
type sale struct {
	id, key string
	reader  int

	endsAt time.Time // guarded by Consumer.mu
	idle   bool      // guarded by Consumer.mu: ended and drained, not read
	wakes  uint64    // guarded by Consumer.mu: Wake calls and sweeps
	// active: guarded by Consumer.mu: when a read last returned entries of
	// it, or Wake or Heard last named it (see Active).
	active time.Time
	// dirty: guarded by Consumer.mu: Wake or Heard named it since the
	// round that last read it began.
	dirty     bool
	nextQuiet time.Time // when a sweep reads it next (see Options.QuietEvery)
	swept     bool      // the round reads it in a sweep (not for news of it)
	nextClaim time.Time // when to look for entries of dead consumers in it next
	// recheck: a read of its new entries since its last claim came after
	// Wake or Heard named it (readWakes: its wakes as of that read); the
	// round at its next claim tick reads it (see due).
	recheck   bool
	readWakes uint64
	ready     bool      // the consumer group exists
	own       bool      // read this consumer's own pending list first
	retryAt   time.Time // after a failed write or group creation: not tried before
	backoff   *backoff
	trimDue   bool // acknowledged entries not trimmed yet
	lastTrim  time.Time
	checkIdle time.Time // when to look again whether it is drained
}

// StreamKeys names the event stream of a sale; *inventory.Engine is one.
// The pipeline needs nothing else of the engine.
type StreamKeys interface {
	EventsKey(saleID string) string
}

// New returns a consumer of the streams keys names in rdb, writing to db.
func New(rdb redis.UniversalClient, keys StreamKeys, db Store, o Options) *Consumer {
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
	if o.Readers <= 0 {
		o.Readers = 2
	}
	if o.Appliers <= 0 {
		o.Appliers = 1
	}
	if o.IdleSweep <= 0 {
		o.IdleSweep = time.Minute
	}
	if o.QuietAfter <= 0 {
		o.QuietAfter = 10 * time.Second
	}
	if o.QuietEvery <= 0 {
		o.QuietEvery = time.Second
	}
	if o.QuietReads <= 0 {
		o.QuietReads = 500
	}
	if o.Linger == 0 {
		o.Linger = 20 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{rdb: rdb, keys: keys, db: db, o: o, sales: map[string]*sale{},
		wake: make([]chan struct{}, o.Readers), news: make([]chan struct{}, o.Readers)}
	_, cluster := rdb.(*redis.ClusterClient)
	_, ring := rdb.(*redis.Ring)
	c.multi = !cluster && !ring
	for i := range c.wake {
		c.wake[i], c.news[i] = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	c.round.begun, c.round.ended = make([]uint64, o.Readers), make([]uint64, o.Readers)
	c.round.changed = make(chan struct{})
	return c
}

// Run reads every sale's stream until ctx is done, then finishes the batches
// being applied and returns.
func (c *Consumer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for r := range c.o.Readers {
		wg.Go(func() { c.read(ctx, r) })
	}
	tick := time.NewTicker(c.o.DiscoverAll)
	defer tick.Stop()
	for {
		c.discover(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Live returns the sales the consumer reads, sorted: every sale except the
// ones that have ended and whose streams are drained. Nothing about those
// changes until an entry reaches their stream.
func (c *Consumer) Live() []string {
	c.mu.Lock()
	ids := make([]string, 0, len(c.sales))
	for id, sl := range c.sales {
		if !sl.idle {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	slices.Sort(ids)
	return ids
}

func (c *Consumer) signal(reader int) {
	select {
	case c.wake[reader] <- struct{}{}:
	default:
	}
}

// discover follows the database's list of sales.
func (c *Consumer) discover(ctx context.Context) {
	ends, err := c.db.SaleEnds(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.o.Logger.Warn("order pipeline: list sales", "err", err)
		}
		return
	}
	woken := map[int]bool{}
	c.mu.Lock()
	for id, end := range ends {
		sl := c.sales[id]
		if sl == nil {
			h := fnv.New32a()
			_, _ = h.Write([]byte(id))
			sl = &sale{id: id, key: c.keys.EventsKey(id), reader: int(h.Sum32() % uint32(c.o.Readers)), own: true, backoff: c.backoff(),
				dirty: true}
			c.sales[id] = sl
			woken[sl.reader] = true
		}
		if !end.Equal(sl.endsAt) {
			sl.endsAt = end
			if sl.idle {
				sl.idle = false
				sl.wakes++
				woken[sl.reader] = true
			}
		}
	}
	for id := range c.sales {
		if _, ok := ends[id]; !ok {
			delete(c.sales, id) // deleted: a create rolled back, it has no orders
		}
	}
	c.mu.Unlock()
	for r := range woken {
		c.signal(r)
	}
}

// shard returns reader r's sales to read now; with sweep, the idle ones too.
func (c *Consumer) shard(r int, sweep bool) []*sale {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*sale
	for _, sl := range c.sales {
		if sl.reader != r {
			continue
		}
		if sl.idle && sweep {
			sl.idle = false
			sl.wakes++
		}
		if !sl.idle {
			out = append(out, sl)
		}
	}
	return out
}

// read is reader r: rounds of one read over its sales, the batches applied,
// acknowledged and trimmed, until ctx ends.
func (c *Consumer) read(ctx context.Context, r int) {
	log := c.o.Logger.With("reader", r)
	backoff := c.backoff()
	nextSweep := time.Now().Add(c.o.IdleSweep)
	var swept time.Time // when the last round that read quiet sales began
	for ctx.Err() == nil {
		now := time.Now()
		sweep := now.After(nextSweep)
		if sweep {
			nextSweep = now.Add(c.o.IdleSweep)
		}
		sales := c.shard(r, sweep)
		if len(sales) == 0 {
			c.pause(ctx, r, c.o.DiscoverAll)
			continue
		}
		round, next, sweeps := c.due(sales, now, swept)
		if sweeps {
			swept = now
		}
		if len(round) == 0 {
			c.idle(ctx, r, min(max(next.Sub(now), time.Millisecond), c.o.DiscoverAll))
			continue
		}
		c.beginRound(r)
		c.createGroups(ctx, round)
		// Entries of dead consumers: looked for every ClaimEvery in an
		// active sale, every ClaimIdle at most in a quiet one (they are
		// taken over only once idle that long). With Alive, a stopped
		// consumer's entries are taken over however briefly idle, so a
		// quiet sale's are looked for every ClaimEvery too (at its sweeps:
		// an XPENDING summary each, XAUTOCLAIM only where another consumer
		// holds entries); every ClaimIdle, the entries of a consumer that
		// died in the middle of a quiet sale's batch waited ClaimIdle
		// (30 s) more than Alive promises.
		var claim []*sale
		for _, sl := range round {
			if !now.Before(sl.nextClaim) {
				every := c.o.ClaimEvery
				if sl.swept && c.o.Alive == nil {
					every = max(every, c.o.ClaimIdle)
				}
				sl.nextClaim, sl.recheck = now.Add(every), false
				claim = append(claim, sl)
			}
		}
		if len(claim) > 0 {
			c.claimAll(ctx, claim)
			// Also re-read this consumer's own pending lists: the client
			// retries a read whose reply a dropped connection lost, and the
			// entries that first read delivered wait there unseen.
			c.reread(claim)
		}
		began := time.Now()
		got, err := c.fetch(ctx, r, round, next.IsZero())
		if err != nil {
			c.endRound(r)
			if ctx.Err() == nil {
				log.Warn("order pipeline: read", "err", err)
				backoff.wait(ctx)
			}
			// A read whose reply was lost may still have moved entries
			// into this consumer's pending lists: read those first.
			c.reread(round)
			continue
		}
		backoff.reset()
		if len(got) > 0 {
			c.mu.Lock()
			for _, b := range got {
				b.sale.active = began
				if int64(len(b.msgs)) >= c.o.BatchSize {
					b.sale.dirty = true // more to read: in the next round too
				}
			}
			c.mu.Unlock()
		}
		// The batches read are finished even when ctx ends meanwhile: they
		// are what graceful shutdown waits for.
		c.processAll(context.WithoutCancel(ctx), ctx, got)
		c.endRound(r)
		c.trimAll(ctx, sales)
		c.settleEnded(ctx, round, got)
		// Paced by the reader's sales, not the round's: a reader of many
		// sales reads only those with news, and its rounds, as frequent
		// as one of few sales', would each carry a few orders, in a
		// transaction of its own (a database's cost of one is mostly
		// fixed).
		if wait := c.lingerOf(len(sales)) - time.Since(began); wait > 0 && len(got) > 0 && !c.anyFull(got) {
			c.pause(ctx, r, wait)
		}
	}
}

// lingerOf is how long a round of a reader of n sales lasts at least when
// it keeps up (see Options.Linger): Linger for each lingerSales sales, at
// most lingerMost Lingers. A reader of many sales whose buys are spread
// over them gets a few orders of each per round: paced so, a round
// carries more orders per transaction and per XACK (a transaction costs
// the database about half a millisecond whatever it holds), a read of up
// to 64 sales, which names them all, costs Redis about the same per
// second whatever n, and an order's arrival in the database is delayed by
// at most lingerMost Lingers (200 ms by default).
func (c *Consumer) lingerOf(n int) time.Duration {
	if c.o.Linger <= 0 {
		return c.o.Linger
	}
	k := min(max(1, (n+lingerSales-1)/lingerSales), lingerMost)
	return time.Duration(k) * c.o.Linger
}

const lingerSales, lingerMost = 64, 10

// anyFull reports whether a batch of the round is as long as a read
// returns: that sale is behind, read it again at once.
func (c *Consumer) anyFull(got []batch) bool {
	for _, b := range got {
		if int64(len(b.msgs)) >= c.o.BatchSize {
			return true
		}
	}
	return false
}

// idle waits d, or until the reader is signalled, a sale of its has news
// (Heard) or ctx ends.
func (c *Consumer) idle(ctx context.Context, r int, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-c.wake[r]:
	case <-c.news[r]:
	case <-t.C:
	}
}

// pause waits d, or until the reader is signalled or ctx ends.
func (c *Consumer) pause(ctx context.Context, r int, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-c.wake[r]:
	case <-t.C:
	}
}

// createGroups makes the consumer group of every sale that has none yet,
// on the sale's stream as it is: never the stream itself (no MKSTREAM).
// The sale's own scripts make its stream (create.lua writes an event at
// once; a rebuild or a buy writes one again after a loss), and none of
// them runs for a sale that is not in Redis. A sale whose stream is
// missing (archived, lost and not rebuilt yet) has nothing to read, and a
// stream made for it here would outlive it: an archived sale's keys are
// never made again, whatever this consumer still believes of the sale (a
// consumer that cannot reach the database keeps sweeping sales archived
// meanwhile). Such a sale is tried again after its backoff; an ended one
// goes idle (settleEnded) until something wakes it.
func (c *Consumer) createGroups(ctx context.Context, sales []*sale) {
	now := time.Now()
	var todo []*sale
	for _, sl := range sales {
		if !sl.ready && !now.Before(sl.retryAt) {
			todo = append(todo, sl)
		}
	}
	if len(todo) == 0 {
		return
	}
	cmds := make([]*redis.StatusCmd, len(todo))
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sl := range todo {
			cmds[i] = p.XGroupCreate(ctx, sl.key, Group, "0")
		}
		return nil
	})
	for i, sl := range todo {
		err := cmds[i].Err()
		switch {
		case err == nil || strings.HasPrefix(err.Error(), "BUSYGROUP"):
			sl.ready, sl.own = true, true
			sl.backoff.reset()
			continue
		case ctx.Err() != nil:
			return
		case strings.Contains(err.Error(), "requires the key to exist"):
			c.o.Logger.Debug("order pipeline: no stream: the sale is not in Redis", "sale", sl.id)
		default:
			c.o.Logger.Warn("order pipeline: create consumer group", "sale", sl.id, "err", err)
		}
		sl.retryAt = now.Add(sl.backoff.next())
	}
}
