package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// rig is a sale with orders in its stream, and the database to move them to.
type rig struct {
	t   *testing.T
	ctx context.Context
	rdb redis.UniversalClient
	eng *inventory.Engine
	db  *store.Store
}

func forEachStack(t *testing.T, f func(t *testing.T, r *rig)) {
	stacks := map[string]func(t *testing.T) (redis.UniversalClient, string){
		"redis+postgres": func(t *testing.T) (redis.UniversalClient, string) {
			return redistest.Standalone(t), dbtest.PostgresURL(t)
		},
		"miniredis+sqlite": func(t *testing.T) (redis.UniversalClient, string) {
			c, _ := redistest.Mini(t)
			return c, dbtest.SQLiteURL(t)
		},
	}
	for name, open := range stacks {
		t.Run(name, func(t *testing.T) {
			rdb, url := open(t)
			db, err := store.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			r := &rig{t: t, ctx: context.Background(), rdb: rdb, db: db,
				eng: inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(t, rdb)})}
			f(t, r)
		})
	}
}

// sale creates sale s1 in both places and buys n orders of one unit each.
func (r *rig) sale(n int) []string {
	r.t.Helper()
	sale := store.Sale{Sale: inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 100_000}}}}
	if err := r.db.CreateSale(r.ctx, sale); err != nil {
		r.t.Fatal(err)
	}
	if err := r.eng.CreateSale(r.ctx, sale.Sale); err != nil {
		r.t.Fatal(err)
	}
	return r.buy(n, 0)
}

func (r *rig) buy(n, from int) []string {
	r.t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		rc, err := r.eng.Buy(r.ctx, "s1", fmt.Sprintf("u%d", i), []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, rc.Order.ID)
	}
	return ids
}

// consumer starts a consumer on db until the test ends or stop is called.
func (r *rig) consumer(name string, db pipeline.Store, o pipeline.Options) (stop func()) {
	o.Name = name
	o.Block = 20 * time.Millisecond
	o.DiscoverAll = 20 * time.Millisecond
	o.ClaimEvery = 50 * time.Millisecond
	o.MaxBackoff = 100 * time.Millisecond
	if o.ClaimIdle == 0 {
		o.ClaimIdle = 300 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = pipeline.New(r.rdb, r.eng, db, o).Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	return stop
}

// settled waits until every order is stored once and the stream has
// nothing in flight, then checks there is no duplicate.
func (r *rig) settled(ids []string) {
	r.t.Helper()
	deadline := time.Now().Add(waitfor.Patience)
	for {
		inflight, err2 := pipeline.InFlight(r.ctx, r.rdb, r.eng, "s1") // before the counts: see TestCancelRacesTheConsumer
		counts, err := r.db.CountOrders(r.ctx, "s1")
		if err == nil && err2 == nil && counts[inventory.OrderConfirmed] == len(ids) && len(inflight) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not settled: %v orders stored (want %d), %d events in flight, errs %v %v", counts, len(ids), len(inflight), err, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range ids {
		if o, err := r.db.Order(r.ctx, id); err != nil || o.Status != inventory.OrderConfirmed {
			r.t.Errorf("order %s: %+v %v", id, o, err)
		}
	}
	journal, err := r.db.Journal(r.ctx, "s1")
	if err != nil {
		r.t.Fatal(err)
	}
	bought := map[string]int{}
	for _, j := range journal {
		if j.Type == inventory.EventBought {
			bought[j.OrderID]++
		}
	}
	for id, n := range bought {
		if n != 1 {
			r.t.Errorf("order %s journaled %d times", id, n)
		}
	}
	if len(bought) != len(ids) {
		r.t.Errorf("%d orders journaled, want %d", len(bought), len(ids))
	}
	if p, err := r.rdb.XPending(r.ctx, r.eng.EventsKey("s1"), pipeline.Group).Result(); err != nil || p.Count != 0 {
		r.t.Errorf("pending entries after settling: %+v, %v", p, err)
	}
	// The consumer trims right after it acknowledges: give it a moment.
	waitfor.Until(r.t, waitfor.Patience, "acknowledged entries are trimmed from the stream", func() error {
		if n, err := r.rdb.XLen(r.ctx, r.eng.EventsKey("s1")).Result(); err != nil || n != 0 {
			return fmt.Errorf("%d entries left (%v)", n, err)
		}
		return nil
	})
}

// dying is a database connection that dies in the middle of a batch, like
// a process killed with kill -9: Apply never returns. With commit set, the
// batch is committed first (killed between commit and XACK).
type dying struct {
	pipeline.Store
	commit  bool
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (d *dying) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	if d.commit {
		if err := d.Store.Apply(ctx, sale, evs); err != nil {
			return err
		}
	}
	d.once.Do(func() { close(d.entered) })
	<-d.release // the "dead" process never comes back; released at test end
	return errors.New("dead")
}

func TestConsumerKilledMidBatch(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("after commit=%v", commit), func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				ids := r.sale(300)
				d := &dying{Store: r.db, commit: commit, entered: make(chan struct{}), release: make(chan struct{})}
				r.consumer("doomed", d, pipeline.Options{BatchSize: 100})
				t.Cleanup(func() { close(d.release) }) // before the doomed consumer's stop (cleanups run last-in first-out)
				<-d.entered                            // it holds a batch of 100 it will never acknowledge
				ids = append(ids, r.buy(100, 300)...)
				r.consumer("survivor", r.db, pipeline.Options{BatchSize: 100})
				r.settled(ids)
			})
		})
	}
}

// TestConsumerRestartResumes: a consumer stopped and started again under
// the same name finishes what it held, then goes on with new entries.
func TestConsumerRestartResumes(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(200)
		stop := r.consumer("c1", r.db, pipeline.Options{BatchSize: 50})
		time.Sleep(30 * time.Millisecond)
		stop()
		ids = append(ids, r.buy(100, 200)...)
		r.consumer("c1", r.db, pipeline.Options{BatchSize: 50, ClaimIdle: time.Hour})
		r.settled(ids)
	})
}

// flaky is a database that is down until up is set: Apply fails like a
// refused connection.
type flaky struct {
	pipeline.Store
	up    atomic.Bool
	tries atomic.Int64
}

func (f *flaky) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	f.tries.Add(1)
	if !f.up.Load() {
		return fmt.Errorf("dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED)
	}
	return f.Store.Apply(ctx, sale, evs)
}

func TestDatabaseDownForAWhile(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(100)
		f := &flaky{Store: r.db}
		var retries atomic.Int64
		r.consumer("c1", f, pipeline.Options{OnRetry: func(string, error) { retries.Add(1) }})
		ids = append(ids, r.buy(100, 100)...) // the sale goes on while the database is down
		waitfor.Until(t, waitfor.Patience, "the consumer retries while the database is down", func() error {
			if n := retries.Load(); n < 2 {
				return fmt.Errorf("%d retries", n)
			}
			return nil
		})
		if counts, _ := r.db.CountOrders(r.ctx, "s1"); counts[inventory.OrderConfirmed] != 0 {
			t.Fatalf("orders stored while the database was down: %v", counts)
		}
		f.up.Store(true)
		r.settled(ids)
	})
}

// TestPoisonEntryIsDeadLettered: an entry no one can parse goes to the
// dead-letter table with its reason; the orders around it are stored.
func TestPoisonEntryIsDeadLettered(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(5)
		poison, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.eng.EventsKey("s1"),
			Values: []any{"type", "bought", "order", "x", "items", "A=lots", "at", "1"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.buy(5, 5)...)
		var dead atomic.Int64
		r.consumer("c1", r.db, pipeline.Options{OnDeadLetter: func(string, string) { dead.Add(1) }})
		r.settled(ids)
		letters, err := r.db.DeadLetters(r.ctx, "s1")
		if err != nil || len(letters) != 1 || letters[0].EventID != poison || letters[0].Reason == "" || dead.Load() != 1 {
			t.Errorf("dead letters = %+v, %v (counted %d)", letters, err, dead.Load())
		}
	})
}

// lostReply loses the reply of the first command named cmd that matches,
// as a connection cut at that moment would. With retried set the client
// then sends it again and returns the second reply (what go-redis does on a
// network error); otherwise the caller sees the error. With unsent set the
// command is lost before it reaches Redis.
type lostReply struct {
	cmd     string
	unsent  bool
	retried bool
	match   func(redis.Cmder) bool
	done    atomic.Bool
}

func (l *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if l.done.Load() || !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == l.cmd }) {
			return next(ctx, cmds)
		}
		if l.unsent && l.done.CompareAndSwap(false, true) {
			return io.ErrUnexpectedEOF
		}
		if err := next(ctx, cmds); err != nil || !slices.ContainsFunc(cmds, l.match) || !l.done.CompareAndSwap(false, true) {
			return err
		}
		if l.retried {
			return next(ctx, cmds)
		}
		return io.ErrUnexpectedEOF
	}
}
func (l *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != l.cmd || l.done.Load() {
			return next(ctx, cmd)
		}
		if l.unsent && l.done.CompareAndSwap(false, true) {
			return io.ErrUnexpectedEOF
		}
		if err := next(ctx, cmd); err != nil || !l.match(cmd) || !l.done.CompareAndSwap(false, true) {
			return err
		}
		if l.retried {
			return next(ctx, cmd)
		}
		return io.ErrUnexpectedEOF
	}
}

// TestLostRepliesAreReadAgain: a consumer whose XREADGROUP ran but whose
// reply was lost (seen as an error, or hidden by the client's retry), or
// whose XACK was lost, holds those entries in its own pending list.
// It reads them again soon rather than leaving them to the reclaim of idle
// entries (an hour here), so a Redis restart mid-sale does not hold orders
// back.
func TestLostRepliesAreReadAgain(t *testing.T) {
	delivers := func(c redis.Cmder) bool {
		s, _ := c.(*redis.XStreamSliceCmd).Result()
		return len(s) > 0 && len(s[0].Messages) > 0 && fmt.Sprint(c.Args()[len(c.Args())-1]) == ">"
	}
	cases := map[string]*lostReply{
		"read reply lost":          {cmd: "xreadgroup", match: delivers},
		"read reply lost, retried": {cmd: "xreadgroup", retried: true, match: delivers},
		"ack reply lost":           {cmd: "xack", match: func(redis.Cmder) bool { return true }},
	}
	for name, fault := range cases {
		t.Run(name, func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				ids := r.sale(50)
				fault.done.Store(false)
				r.rdb.AddHook(fault)
				r.consumer("c1", r.db, pipeline.Options{BatchSize: 20, ClaimIdle: time.Hour})
				r.settled(ids)
				if !fault.done.Load() {
					t.Fatal("the fault was never injected")
				}
			})
		})
	}
}

// TestStoppedConsumerTakenOverAtOnce: with Options.Alive saying a
// consumer has stopped, its pending entries are taken over at the next
// claim tick, long before ClaimIdle (an hour here); consumers said to be
// alive keep theirs.
func TestStoppedConsumerTakenOverAtOnce(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(300)
		d := &dying{Store: r.db, commit: true, entered: make(chan struct{}), release: make(chan struct{})}
		r.consumer("doomed", d, pipeline.Options{BatchSize: 100})
		t.Cleanup(func() { close(d.release) })
		<-d.entered // it holds a batch of 100 (committed) it will never acknowledge
		var asked sync.Map
		alive := func(_ context.Context, name string) bool { asked.Store(name, true); return name != "doomed" }
		r.consumer("survivor", r.db, pipeline.Options{BatchSize: 100, ClaimIdle: time.Hour, Alive: alive})
		r.settled(ids)
		if _, ok := asked.Load("doomed"); !ok {
			t.Error("Alive was never asked about the stopped consumer")
		}
	})
}

// TestLingerSkippedWhileBehind: a round that filled a sale's batch is
// followed by the next read at once, whatever Linger says; only a round
// that read less than a batch of every sale lingers. (Only the orders are
// waited for: acknowledged entries are trimmed in a later round.)
func TestLingerSkippedWhileBehind(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(101) // two full batches and one of one entry
		r.consumer("c1", r.db, pipeline.Options{BatchSize: 50, Linger: time.Hour})
		waitfor.Until(t, waitfor.Patience, "every order stored", func() error {
			counts, err := r.db.CountOrders(r.ctx, "s1")
			if err != nil || counts[inventory.OrderConfirmed] != len(ids) {
				return fmt.Errorf("%v stored, want %d (%v)", counts, len(ids), err)
			}
			return nil
		})
	})
}

// TestLingerEndsWithTheConsumer: a consumer lingering after a round stops
// when its context ends, without waiting out Linger.
func TestLingerEndsWithTheConsumer(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(3)
		stop := r.consumer("c1", r.db, pipeline.Options{Linger: time.Hour})
		r.settled(ids)
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(waitfor.Patience):
			t.Fatal("the consumer did not stop while it lingered")
		}
	})
}

// TestWakeCutsTheLingerShort: a consumer lingering after a round that
// filled no batch reads again as soon as Wake names a sale of its (a cancel
// appended), not when Linger has passed.
func TestWakeCutsTheLingerShort(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		ids := r.sale(3)
		c := pipeline.New(r.rdb, r.eng, r.db, pipeline.Options{Name: "c1", Block: 20 * time.Millisecond,
			DiscoverAll: 20 * time.Millisecond, ClaimEvery: time.Hour, Linger: time.Hour})
		ctx, cancel := context.WithCancel(r.ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		r.settled(ids) // the round that stored them filled no batch: the reader lingers
		if _, err := r.eng.Cancel(r.ctx, ids[0], ""); err != nil {
			t.Fatal(err)
		}
		c.Wake("s1")
		waitfor.Until(t, waitfor.Patience, "the cancel stored", func() error {
			o, err := r.db.Order(r.ctx, ids[0])
			if err != nil || o.Status != inventory.OrderCancelled {
				return fmt.Errorf("order %+v, %v", o, err)
			}
			return nil
		})
	})
}
