package pipeline_test

// Adversarial tests of a reader of many sales (more than quietAll): the
// rounds read the sales with news (Heard, Wake), their own pending lists
// and sales with no group yet; the rest in sweeps. Most tests set
// QuietEvery to an hour, so that only news (and what a round keeps of
// them) can bring an order to the database: an order this process
// announced must arrive promptly whatever happens around its read.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// promptly bounds how long an announced order may take to reach the
// database here: far more than a few rounds on a loaded machine, far less
// than the sweeps and claims the tests push out to an hour.
const promptly = 10 * time.Second

// advConsumer starts a consumer named name on rdb and db until the test
// ends or stop is called; the rig's short ticks fill only the options left
// zero.
func (r *rig) advConsumer(name string, rdb redis.UniversalClient, db pipeline.Store, o pipeline.Options) (c *pipeline.Consumer, stop func()) {
	o.Name = name
	if o.Block == 0 {
		o.Block = 20 * time.Millisecond
	}
	if o.DiscoverAll == 0 {
		o.DiscoverAll = 20 * time.Millisecond
	}
	if o.ClaimEvery == 0 {
		o.ClaimEvery = 50 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 100 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	c = pipeline.New(rdb, r.eng, db, o)
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	return c, stop
}

// client is a client of the rig's Redis of the test's own, with hooks.
func (r *rig) client(hooks ...redis.Hook) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.rdb.(*redis.Client).Options().Addr})
	for _, h := range hooks {
		c.AddHook(h)
	}
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// bigSale creates sale id with stock units of one SKU and no orders.
func (r *rig) bigSale(id string, stock int64) {
	r.t.Helper()
	sale := inventory.Sale{ID: id, PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: stock}}}
	if err := r.db.CreateSale(r.ctx, store.Sale{Sale: sale}); err != nil {
		r.t.Fatal(err)
	}
	if err := r.eng.CreateSale(r.ctx, sale); err != nil {
		r.t.Fatal(err)
	}
}

// buyOne buys one unit of sale for user and returns the order's id.
func (r *rig) buyOne(sale, user string) string {
	rc, err := r.eng.Buy(r.ctx, sale, user, []inventory.Line{{SKU: "A", Qty: 1}}, "")
	if err != nil {
		r.t.Errorf("buy %s for %s: %v", sale, user, err)
		return ""
	}
	return rc.Order.ID
}

// storedWithin waits up to d until every order is stored with status.
func (r *rig) storedWithin(d time.Duration, what string, orders []string, status inventory.OrderStatus) {
	r.t.Helper()
	waitfor.Until(r.t, d, what, func() error {
		for _, id := range orders {
			o, err := r.db.Order(r.ctx, id)
			if err != nil || o.Status != status {
				return fmt.Errorf("order %s: %+v, %v; want it %s", id, o, err, status)
			}
		}
		return nil
	})
}

// journaledOnce checks that every order of orders is journaled bought
// exactly once, and that each of their sales journals no other order.
func (r *rig) journaledOnce(orders []string) {
	r.t.Helper()
	want := map[string]map[string]bool{}
	for _, id := range orders {
		sale, err := inventory.SaleOfOrder(id)
		if err != nil {
			r.t.Fatal(err)
		}
		if want[sale] == nil {
			want[sale] = map[string]bool{}
		}
		want[sale][id] = true
	}
	for sale, ids := range want {
		journal, err := r.db.Journal(r.ctx, sale)
		if err != nil {
			r.t.Fatal(err)
		}
		bought := map[string]int{}
		for _, j := range journal {
			if j.Type == inventory.EventBought {
				bought[j.OrderID]++
			}
		}
		for id := range ids {
			if bought[id] != 1 {
				r.t.Errorf("sale %s: order %s journaled bought %d times, want 1", sale, id, bought[id])
			}
		}
		for id := range bought {
			if !ids[id] {
				r.t.Errorf("sale %s: order %s journaled, never bought", sale, id)
			}
		}
	}
}

// delivers reports whether an XREADGROUP's reply holds entries of key.
func delivers(cmd redis.Cmder, key string) bool {
	x, ok := cmd.(*redis.XStreamSliceCmd)
	if !ok || cmd.Name() != "xreadgroup" {
		return false
	}
	for _, st := range x.Val() {
		if st.Stream == key && len(st.Messages) > 0 {
			return true
		}
	}
	return false
}

// TestAdvGroupLostKeepsNews: Redis loses a sale's stream (a restart
// without persistence) or its group, and a buy (which makes the stream
// again) is announced. The round that reads the news meets NOGROUP; the
// group is made anew at the next round, whose read of the sale's pending
// list (empty) must not end its news: the order must reach the database
// without a sweep or a claim tick (both an hour away).
func TestAdvGroupLostKeepsNews(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	losses := map[string]func(r *rig, key string) error{
		"stream lost": func(r *rig, key string) error { return r.rdb.Del(r.ctx, key).Err() },
		"group lost": func(r *rig, key string) error {
			return r.rdb.XGroupDestroy(r.ctx, key, pipeline.Group).Err()
		},
	}
	for name, lose := range losses {
		t.Run(name, func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				orders := r.manySales(20, time.Time{})
				c, _ := r.advConsumer("c1", r.rdb, r.db, pipeline.Options{QuietEvery: time.Hour, ClaimEvery: time.Hour, Linger: -1})
				r.stored(orders, inventory.OrderConfirmed)
				if err := lose(r, r.eng.EventsKey("m005")); err != nil {
					t.Fatal(err)
				}
				id := r.buyOne("m005", "u2")
				c.Heard("m005")
				r.storedWithin(promptly, "an announced order after its group was lost", []string{id}, inventory.OrderConfirmed)
				r.journaledOnce(append(orders, id))
			})
		})
	}
}

// TestAdvReadFaultsInManyMode: the read of a round with news fails in
// every way a connection can make it fail: the command never sent, its
// reply lost (an error), its reply lost and the command sent again by the
// client (the retry's reply is empty: the entries wait unseen in this
// consumer's own pending list). Every announced order still reaches the
// database, with no sweep for an hour.
func TestAdvReadFaultsInManyMode(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	faults := map[string]func() *lostReply{
		"unsent":              func() *lostReply { return &lostReply{cmd: "xreadgroup", unsent: true} },
		"reply lost":          func() *lostReply { return &lostReply{cmd: "xreadgroup"} },
		"reply lost, retried": func() *lostReply { return &lostReply{cmd: "xreadgroup", retried: true} },
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				orders := r.manySales(20, time.Time{})
				f := fault()
				var armed atomic.Bool
				key := r.eng.EventsKey("m005")
				f.match = func(cmd redis.Cmder) bool { return armed.Load() && delivers(cmd, key) }
				f.done.Store(true) // nothing is lost before armed
				c, _ := r.advConsumer("c1", r.client(f), r.db, pipeline.Options{QuietEvery: time.Hour, ClaimIdle: time.Hour, Linger: -1})
				r.stored(orders, inventory.OrderConfirmed)
				armed.Store(true)
				f.done.Store(false)
				var news []string
				for _, sale := range []string{"m005", "m006", "m007"} {
					news = append(news, r.buyOne(sale, "u2"))
					c.Heard(sale)
				}
				r.storedWithin(promptly, "announced orders after a faulty read", news, inventory.OrderConfirmed)
				if !f.done.Load() {
					t.Fatal("the fault was never injected")
				}
				r.journaledOnce(append(orders, news...))
			})
		})
	}
}

// TestAdvFullBatchesAfterOneHeard: ten orders of one sale, a batch of two,
// one Heard: every full batch keeps the sale's news, so all ten arrive
// without a sweep.
func TestAdvFullBatchesAfterOneHeard(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		r.bigSale("big", 100)
		c, _ := r.advConsumer("c1", r.rdb, r.db, pipeline.Options{BatchSize: 2, QuietEvery: time.Hour, Linger: 30 * time.Millisecond})
		r.stored(orders, inventory.OrderConfirmed)
		var news []string
		for i := range 10 {
			news = append(news, r.buyOne("big", fmt.Sprintf("b%d", i)))
		}
		c.Heard("big")
		r.storedWithin(promptly, "ten orders after one Heard", news, inventory.OrderConfirmed)
		r.journaledOnce(news)
	})
}

// heardOnApply is the database, and a buyer: while a batch of sale is
// being applied (read, not acknowledged), it buys another order of the
// sale and announces it, up to n times.
type heardOnApply struct {
	pipeline.Store
	r      *rig
	sale   string
	c      atomic.Pointer[pipeline.Consumer]
	n      atomic.Int64
	mu     sync.Mutex
	orders []string
}

func (h *heardOnApply) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	if c := h.c.Load(); c != nil && sale == h.sale && h.n.Add(-1) >= 0 {
		id := h.r.buyOne(sale, fmt.Sprintf("apply%d", h.n.Load()))
		h.mu.Lock()
		h.orders = append(h.orders, id)
		h.mu.Unlock()
		c.Heard(sale)
	}
	return h.Store.Apply(ctx, sale, evs)
}

// heardOnRead buys an order of sale and announces it right after a read
// returned entries of it (before they are applied), up to n times.
type heardOnRead struct {
	r      *rig
	sale   string
	c      atomic.Pointer[pipeline.Consumer]
	n      atomic.Int64
	mu     sync.Mutex
	orders []string
}

func (h *heardOnRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heardOnRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c := h.c.Load(); c != nil && delivers(cmd, h.r.eng.EventsKey(h.sale)) && h.n.Add(-1) >= 0 {
			id := h.r.buyOne(h.sale, fmt.Sprintf("read%d", h.n.Load()))
			h.mu.Lock()
			h.orders = append(h.orders, id)
			h.mu.Unlock()
			c.Heard(h.sale)
		}
		return err
	}
}
func (h *heardOnRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAdvHeardRacesTheRound: news arrive between a round's read and its
// write (after the read of the sale returned, and while its batch is being
// applied), and from many goroutines at once: each order so announced
// reaches the database, with no sweep for an hour.
func TestAdvHeardRacesTheRound(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		for i := range 20 {
			r.bigSale(fmt.Sprintf("b%03d", i), 1000)
		}
		r.bigSale("onread", 100)
		r.bigSale("onapply", 100)
		onRead := &heardOnRead{r: r, sale: "onread"}
		onApply := &heardOnApply{Store: r.db, r: r, sale: "onapply"}
		c, _ := r.advConsumer("c1", r.client(onRead), onApply, pipeline.Options{QuietEvery: time.Hour, Linger: 30 * time.Millisecond})
		onRead.c.Store(c)
		onApply.c.Store(c)
		r.stored(orders, inventory.OrderConfirmed)
		onRead.n.Store(8)
		onApply.n.Store(8)
		first := []string{r.buyOne("onread", "u0"), r.buyOne("onapply", "u0")}
		c.Heard("onread")
		c.Heard("onapply")
		// And many buyers announcing their buys while the rounds go on.
		var mu sync.Mutex
		var wg sync.WaitGroup
		var news []string
		for g := range 4 {
			wg.Go(func() {
				for i := range 20 {
					sale := fmt.Sprintf("b%03d", rand.IntN(20))
					id := r.buyOne(sale, fmt.Sprintf("g%d-%d", g, i))
					c.Heard(sale)
					mu.Lock()
					news = append(news, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		r.storedWithin(promptly, "orders announced by many buyers", news, inventory.OrderConfirmed)
		waitfor.Until(t, promptly, "every chained buy made", func() error {
			if onRead.n.Load() >= 0 || onApply.n.Load() >= 0 {
				return fmt.Errorf("%d and %d buys left", onRead.n.Load()+1, onApply.n.Load()+1)
			}
			return nil
		})
		onRead.mu.Lock()
		onApply.mu.Lock()
		chained := append(slices.Clone(onRead.orders), onApply.orders...)
		onApply.mu.Unlock()
		onRead.mu.Unlock()
		all := append(append(first, chained...), news...)
		r.storedWithin(promptly, "orders announced between a read and its write", all, inventory.OrderConfirmed)
		r.journaledOnce(append(orders, all...))
	})
}

// failingSale is the database failing, like a refused connection, every
// write that holds sale, until fails such writes have failed.
type failingSale struct {
	*store.Store
	sale  string
	fails atomic.Int64
}

func (f *failingSale) fail(sale string) error {
	if sale == f.sale && f.fails.Add(-1) >= 0 {
		return fmt.Errorf("dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED)
	}
	return nil
}

func (f *failingSale) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	if err := f.fail(sale); err != nil {
		return err
	}
	return f.Store.Apply(ctx, sale, evs)
}

func (f *failingSale) ApplyMany(ctx context.Context, sales []store.SaleEvents) error {
	for _, se := range sales {
		if err := f.fail(se.SaleID); err != nil {
			return err
		}
	}
	return f.Store.ApplyMany(ctx, sales)
}

// TestAdvFailingSaleWhileHeard: the database refuses one sale's writes
// for a while (its backoff, retryAt) while buys of it, and of others, go
// on and are announced; batches are small. Every order arrives once, with
// no sweep for an hour.
func TestAdvFailingSaleWhileHeard(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		r.bigSale("sick", 100)
		f := &failingSale{Store: r.db, sale: "sick"}
		c, _ := r.advConsumer("c1", r.rdb, f, pipeline.Options{BatchSize: 3, QuietEvery: time.Hour, Linger: 10 * time.Millisecond})
		r.stored(orders, inventory.OrderConfirmed)
		f.fails.Store(8)
		var news []string
		for i := range 30 {
			news = append(news, r.buyOne("sick", fmt.Sprintf("s%d", i)))
			c.Heard("sick")
			if i%3 == 0 {
				sale := fmt.Sprintf("m%03d", i%20)
				news = append(news, r.buyOne(sale, fmt.Sprintf("s%d", i)))
				c.Heard(sale)
			}
			time.Sleep(15 * time.Millisecond)
		}
		r.storedWithin(promptly, "orders of a sale whose writes failed a while", news, inventory.OrderConfirmed)
		if n := f.fails.Load(); n >= 0 {
			t.Errorf("the database failed %d writes of the sale, want 8", 8-n)
		}
		r.journaledOnce(append(orders, news...))
	})
}

// stuckOn is a process that dies while it applies a batch of one sale:
// its Apply of that sale never returns (until released at the test's end),
// once armed.
type stuckOn struct {
	pipeline.Store
	sale    string
	armed   atomic.Bool
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *stuckOn) Apply(ctx context.Context, sale string, evs []inventory.Event) error {
	if sale != s.sale || !s.armed.Load() {
		return s.Store.Apply(ctx, sale, evs)
	}
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return errors.New("dead")
}

// TestAdvTwoConsumersOneDies: two instances, each told of the buys it
// sold (c1 the even sales, c2 the odd ones). c2 dies in the middle of a
// batch of a sale only it was told of; c1, which only sweeps that sale,
// takes its entries over: after ClaimIdle, or at once when Alive says c2
// has stopped (ClaimIdle an hour). The orders after c2's death, of every
// sale, reach the database too, each once.
func TestAdvTwoConsumersOneDies(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	cases := map[string]pipeline.Options{
		"claim idle": {ClaimIdle: 300 * time.Millisecond},
		"alive says stopped": {ClaimIdle: time.Hour, Alive: func(_ context.Context, name string) bool {
			return name != "c2"
		}},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			forEachStack(t, func(t *testing.T, r *rig) {
				orders := r.manySales(20, time.Time{})
				s := &stuckOn{Store: r.db, sale: "m005", entered: make(chan struct{}), release: make(chan struct{})}
				o.QuietEvery, o.QuietReads, o.Linger = 100*time.Millisecond, 500, 10*time.Millisecond
				c1, _ := r.advConsumer("c1", r.rdb, r.db, o)
				o2 := o
				o2.QuietEvery = time.Hour
				c2, _ := r.advConsumer("c2", r.rdb, s, o2)
				t.Cleanup(func() { close(s.release) }) // before c2's stop: cleanups run last-in first-out
				r.stored(orders, inventory.OrderConfirmed)
				told := func(sale string) *pipeline.Consumer {
					var i int
					_, _ = fmt.Sscanf(sale, "m%03d", &i)
					if i%2 == 0 {
						return c1
					}
					return c2
				}
				// Past c1's first claims of the sales it sweeps: its next
				// ones are its own affair (ClaimIdle, or the claim tick).
				time.Sleep(time.Second)
				s.armed.Store(true)
				var news []string
				for i := range 5 {
					news = append(news, r.buyOne("m005", fmt.Sprintf("d%d", i)))
				}
				c2.Heard("m005")
				select {
				case <-s.entered: // c2 holds a batch of m005 it will never acknowledge
				case <-time.After(waitfor.Patience):
					// The scenario did not arise: c1's sweep read the new
					// entries before c2 did (a loaded machine). Nothing
					// to judge; the assertions below need c2 to hold them.
					t.Skip("c2 never applied a batch of m005: c1 swept it first, so the scenario did not arise")
				}
				for i := range 20 {
					sale := fmt.Sprintf("m%03d", i)
					if sale == "m005" {
						continue // c2's reader of it is stuck: only c1's sweeps and claims remain
					}
					news = append(news, r.buyOne(sale, "after"))
					told(sale).Heard(sale)
				}
				news = append(news, r.buyOne("m005", "after"))
				r.storedWithin(waitfor.Patience, "orders of a dead consumer's sale, and the others", news, inventory.OrderConfirmed)
				r.journaledOnce(append(orders, news...))
			})
		})
	}
}

// TestAdvTwoConsumersSmallBatches: two instances both sell every sale and
// each is told of its own buys; many buyers at once, batches of three.
// Whoever reads an entry first, every order is stored once.
func TestAdvTwoConsumersSmallBatches(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		for i := range 20 {
			r.bigSale(fmt.Sprintf("b%03d", i), 1000)
		}
		o := pipeline.Options{BatchSize: 3, QuietEvery: time.Hour, Linger: 5 * time.Millisecond, ClaimIdle: time.Hour}
		c1, _ := r.advConsumer("c1", r.rdb, r.db, o)
		c2, _ := r.advConsumer("c2", r.rdb, r.db, o)
		r.stored(orders, inventory.OrderConfirmed)
		var mu sync.Mutex
		var wg sync.WaitGroup
		var news []string
		for g := range 6 {
			wg.Go(func() {
				c := []*pipeline.Consumer{c1, c2}[g%2]
				for i := range 40 {
					sale := fmt.Sprintf("b%03d", rand.IntN(20))
					id := r.buyOne(sale, fmt.Sprintf("g%d-%d", g, i))
					c.Heard(sale)
					mu.Lock()
					news = append(news, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		r.storedWithin(promptly, "orders announced to two consumers", news, inventory.OrderConfirmed)
		r.journaledOnce(append(orders, news...))
	})
}

// TestAdvRestartReadsOwnPending: a consumer stopped while it held entries
// of a sale it could not write (its database down for that sale) starts
// again under the same name, with sweeps and the reclaim an hour away and
// no news: it reads its own pending list first and stores them.
func TestAdvRestartReadsOwnPending(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		f := &failingSale{Store: r.db, sale: "m005"}
		o := pipeline.Options{QuietEvery: time.Hour, ClaimIdle: time.Hour, Linger: -1}
		c, stop := r.advConsumer("c1", r.rdb, f, o)
		r.stored(orders, inventory.OrderConfirmed)
		f.fails.Store(1 << 40)
		id := r.buyOne("m005", "u2")
		c.Heard("m005")
		waitfor.Until(t, waitfor.Patience, "the order pending in c1", func() error {
			p, err := r.rdb.XPending(r.ctx, r.eng.EventsKey("m005"), pipeline.Group).Result()
			if err != nil || p.Consumers["c1"] == 0 {
				return fmt.Errorf("pending %+v, %v", p, err)
			}
			return nil
		})
		stop()
		r.advConsumer("c1", r.rdb, r.db, o)
		r.storedWithin(promptly, "an order pending in a consumer restarted", []string{id}, inventory.OrderConfirmed)
		r.journaledOnce(append(orders, id))
	})
}

// TestAdvEndedSaleHeardAfterItsEnd: the consumer's clock is ahead of
// Redis's (the script clock is held at the start here), so it sees the
// sales end and go idle while Redis still sells them. A buy then, and its
// Heard, must bring the sale back and its order to the database at once,
// not at the next discovery or idle sweep (an hour away).
func TestAdvEndedSaleHeardAfterItsEnd(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		start := time.Now()
		end := start.Add(2 * time.Second)
		r.eng = inventory.New(r.rdb, inventory.Options{Prefix: redistest.Prefix(t, r.rdb),
			ScriptClock: inventory.ClockFunc(func() time.Time { return start })})
		orders := r.manySales(20, end)
		c, _ := r.advConsumer("c1", r.rdb, r.db, pipeline.Options{Readers: 1, QuietEvery: 100 * time.Millisecond,
			DiscoverAll: time.Hour, IdleSweep: time.Hour, Linger: -1})
		r.stored(orders, inventory.OrderConfirmed)
		waitfor.Until(t, waitfor.Patience, "every sale idle", func() error {
			if live := c.Live(); len(live) > 0 {
				return fmt.Errorf("live: %v", live)
			}
			return nil
		})
		id := r.buyOne("m005", "late")
		c.Heard("m005")
		if live := c.Live(); !slices.Equal(live, []string{"m005"}) {
			t.Errorf("Live() after Heard(m005) = %v", live)
		}
		r.storedWithin(promptly, "an order announced after its sale went idle", []string{id}, inventory.OrderConfirmed)
	})
}

// TestAdvHeardUnknownSaleThenDiscovered: a sale created after the last
// discovery and bought at once is announced before the consumer knows it
// (Heard does nothing); the discovery that finds it reads it at once.
func TestAdvHeardUnknownSaleThenDiscovered(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		c, _ := r.advConsumer("c1", r.rdb, r.db, pipeline.Options{QuietEvery: time.Hour, DiscoverAll: 200 * time.Millisecond, Linger: -1})
		r.stored(orders, inventory.OrderConfirmed)
		r.bigSale("late", 10)
		id := r.buyOne("late", "u1")
		c.Heard("late")
		r.storedWithin(promptly, "an order of a sale found after its buy", []string{id}, inventory.OrderConfirmed)
		if a := c.Active(); !slices.Contains(a, "late") {
			t.Errorf("Active() = %v, want late among them", a)
		}
	})
}

// TestAdvHeardOnceRecheckedOnce: a sale announced once is looked at again
// at its next claim tick (its pending list, in case the read of its news
// lost its reply), then left alone: not claimed and re-read every claim
// tick for ever, as if it were read in every round.
func TestAdvHeardOnceRecheckedOnce(t *testing.T) {
	defer pipeline.SetQuietAll(4)()
	forEachStack(t, func(t *testing.T, r *rig) {
		orders := r.manySales(20, time.Time{})
		h := &inFlight{}
		c, _ := r.advConsumer("c1", r.ownClient(h), r.db, pipeline.Options{QuietEvery: time.Hour, Linger: -1})
		r.stored(orders, inventory.OrderConfirmed)
		id := r.buyOne("m007", "u2")
		c.Heard("m007")
		r.storedWithin(promptly, "the announced order", []string{id}, inventory.OrderConfirmed)
		time.Sleep(300 * time.Millisecond) // its recheck, at the claim tick 50 ms on
		h.watching(r.eng.EventsKey("m007"))
		time.Sleep(500 * time.Millisecond) // ten claim ticks
		if n := h.watching(); n > 0 {
			t.Errorf("a sale announced once, then quiet: named by %d commands in ten claim ticks, want none", n)
		}
	})
}
