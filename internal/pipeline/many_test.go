package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// inFlight counts the commands (and pipelines) a client has under way at
// once, and the ones that name a key containing one of watch's strings.
type inFlight struct {
	now, most atomic.Int64
	mu        sync.Mutex
	watch     []string
	touched   int
}

func (h *inFlight) enter(cmds ...redis.Cmder) func() {
	switch cmds[0].Name() {
	case "hello", "client", "auth", "select", "readonly":
		return func() {} // a new connection's set-up, inside the command that dialled it
	}
	h.mu.Lock()
	h.most.Store(max(h.most.Load(), h.now.Add(1)))
	for _, c := range cmds {
		for _, a := range c.Args() {
			for _, w := range h.watch {
				if s, ok := a.(string); ok && strings.Contains(s, w) {
					h.touched++
				}
			}
		}
	}
	h.mu.Unlock()
	return func() { h.now.Add(-1) }
}

func (h *inFlight) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer h.enter(cmd)()
		return next(ctx, cmd)
	}
}
func (h *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer h.enter(cmds...)()
		return next(ctx, cmds)
	}
}

func (h *inFlight) watching(keys ...string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if keys != nil {
		h.watch, h.touched = keys, 0
	}
	return h.touched
}

// manySales creates n sales of stock 10 in both places, ending at end
// (zero: never), and buys one unit in each.
func (r *rig) manySales(n int, end time.Time) []string {
	r.t.Helper()
	var orders []string
	for i := range n {
		sale := inventory.Sale{ID: fmt.Sprintf("m%03d", i), PerUserLimit: 1, EndsAt: end, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
		if err := r.db.CreateSale(r.ctx, store.Sale{Sale: sale}); err != nil {
			r.t.Fatal(err)
		}
		if err := r.eng.CreateSale(r.ctx, sale); err != nil {
			r.t.Fatal(err)
		}
		rc, err := r.eng.Buy(r.ctx, sale.ID, "u1", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			r.t.Fatal(err)
		}
		orders = append(orders, rc.Order.ID)
	}
	return orders
}

// ownClient is a client of the rig's Redis of the consumer's own, with h
// watching what it does.
func (r *rig) ownClient(h *inFlight) redis.UniversalClient {
	var c redis.UniversalClient
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cc.Options().Addrs})
	} else {
		c = redis.NewClient(&redis.Options{Addr: r.rdb.(*redis.Client).Options().Addr})
	}
	c.AddHook(h)
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// run starts a consumer on rdb until the test ends.
func (r *rig) run(rdb redis.UniversalClient, o pipeline.Options) *pipeline.Consumer {
	o.Name = "c1"
	o.Block = 20 * time.Millisecond
	o.DiscoverAll = 20 * time.Millisecond
	o.ClaimEvery = 50 * time.Millisecond
	o.MaxBackoff = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	c := pipeline.New(rdb, r.eng, r.db, o)
	go func() { defer close(done); _ = c.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
	return c
}

// stored waits until every order is in the database with the status.
func (r *rig) stored(orders []string, status inventory.OrderStatus) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range orders {
		for {
			o, err := r.db.Order(r.ctx, id)
			if err == nil && o.Status == status {
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("order %s: %+v, %v; want it stored %s", id, o, err, status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestConsumerReadsManySalesOnFewConnections: a consumer of 200 sales
// stores every order with never more than two commands under way at once
// (its two readers): a fixed number of connections, whatever the number of
// sales, instead of one blocked read per sale.
func TestConsumerReadsManySalesOnFewConnections(t *testing.T) {
	check := func(t *testing.T, r *rig) {
		orders := r.manySales(200, time.Time{})
		h := &inFlight{}
		r.run(r.ownClient(h), pipeline.Options{})
		r.stored(orders, inventory.OrderConfirmed)
		if h.most.Load() > 2 {
			t.Errorf("%d commands under way at once, want at most 2 (the readers)", h.most.Load())
		}
	}
	forEachStack(t, check)
	t.Run("cluster+postgres", func(t *testing.T) {
		rdb := redistest.SharedCluster(t)
		db, err := store.Open(context.Background(), dbtest.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		check(t, &rig{t: t, ctx: context.Background(), rdb: rdb, db: db,
			eng: inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(t, rdb)})})
	})
}

// TestEndedDrainedSalesCostNothing: once sales have ended and their
// streams are drained, the consumer sends nothing that names their keys.
func TestEndedDrainedSalesCostNothing(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		// The sales end 3 s from now, and are bought on a script clock
		// held at now: however long a loaded machine takes to create
		// and buy them, no buy meets an ended sale.
		start := time.Now()
		end := start.Add(3 * time.Second)
		r.eng = inventory.New(r.rdb, inventory.Options{Prefix: redistest.Prefix(t, r.rdb),
			ScriptClock: inventory.ClockFunc(func() time.Time { return start })})
		orders := r.manySales(30, end)
		h := &inFlight{}
		r.run(r.ownClient(h), pipeline.Options{})
		r.stored(orders, inventory.OrderConfirmed)
		time.Sleep(time.Until(end))
		key := r.eng.EventsKey("m000")
		tag := key[:strings.Index(key, ":m000")+2] // "{prefix:m": every sale's keys
		deadline := time.Now().Add(20 * time.Second)
		for {
			h.watching(tag)
			time.Sleep(300 * time.Millisecond) // a window of 15 reads (Block is 20ms)
			if h.watching() == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ended, drained sales still read: %d commands named them in the last window", h.watching())
			}
		}
	})
}

// TestWakeReadsAnEndedSaleAgain: a sale that ended and was drained leaves
// Live, and a cancel after its end reaches the database as soon as Wake
// names the sale (not at the next sweep, a minute later).
func TestWakeReadsAnEndedSaleAgain(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		end := time.Now().Add(2 * time.Second)
		orders := r.manySales(3, end)
		c := r.run(r.rdb, pipeline.Options{})
		r.stored(orders, inventory.OrderConfirmed)
		deadline := time.Now().Add(20 * time.Second)
		for len(c.Live()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("ended, drained sales still live: %v", c.Live())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := r.eng.Cancel(r.ctx, orders[0], ""); err != nil {
			t.Fatal(err)
		}
		c.Wake("m000")
		if live := c.Live(); len(live) != 1 || live[0] != "m000" {
			t.Errorf("live after Wake(m000): %v", live)
		}
		r.stored(orders[:1], inventory.OrderCancelled)
	})
}

// reads records when each XREADGROUP of a client began, whether it
// returned entries, and how many streams it named.
type reads struct {
	mu      sync.Mutex
	at      []time.Time
	full    []bool // returned entries
	streams []int
}

func (h *reads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *reads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		began := time.Now()
		err := next(ctx, cmd)
		if x, ok := cmd.(*redis.XStreamSliceCmd); ok && cmd.Name() == "xreadgroup" {
			got := false
			for _, st := range x.Val() {
				got = got || len(st.Messages) > 0
			}
			named := 0
			for i, a := range cmd.Args() {
				if s, ok := a.(string); ok && strings.EqualFold(s, "streams") {
					named = (len(cmd.Args()) - i - 1) / 2
				}
			}
			h.mu.Lock()
			h.at, h.full, h.streams = append(h.at, began), append(h.full, got), append(h.streams, named)
			h.mu.Unlock()
		}
		return err
	}
}
func (h *reads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRoundsOverManySalesNameTheirNews: a reader of 200 sales (more than
// it reads in every round) names in a read only the sales with news
// (Heard), and a round that read many of them lasts longer: at least a
// Linger for each 64 sales it named (a read costs Redis for every stream
// it names). Every order reaches the database. (The bound is a least gap
// between reads, which a slow machine only widens.)
func TestRoundsOverManySalesNameTheirNews(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		const sales, linger = 200, 40 * time.Millisecond
		orders := r.manySales(sales, time.Time{})
		h := &reads{}
		c := redis.NewClient(&redis.Options{Addr: r.rdb.(*redis.Client).Options().Addr})
		c.AddHook(h)
		t.Cleanup(func() { _ = c.Close() })
		// One reader, no claims (their ticks would re-read pending lists),
		// no sweeps after the first and no new sales (discovery wakes a
		// reader): only news bring a sale into a read.
		o := pipeline.Options{Name: "c1", Readers: 1, Linger: linger, Block: 20 * time.Millisecond,
			ClaimEvery: time.Hour, DiscoverAll: time.Hour, QuietEvery: time.Hour}
		ctx, cancel := context.WithCancel(r.ctx)
		done := make(chan struct{})
		consumer := pipeline.New(c, r.eng, r.db, o)
		go func() { defer close(done); _ = consumer.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		r.stored(orders, inventory.OrderConfirmed)
		from := time.Now()
		buy := func(sale, user string) {
			rc, err := r.eng.Buy(r.ctx, sale, user, []inventory.Line{{SKU: "A", Qty: 1}}, "")
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, rc.Order.ID)
		}
		// Three waves over every sale, each announced at once: wide rounds.
		for w := range 3 {
			for i := range sales {
				buy(fmt.Sprintf("m%03d", i), fmt.Sprintf("w%d", w))
			}
			for i := range sales {
				consumer.Heard(fmt.Sprintf("m%03d", i))
			}
			r.stored(orders, inventory.OrderConfirmed)
		}
		// Then news of three sales only: narrow rounds.
		narrowFrom := time.Now()
		for _, sale := range []string{"m010", "m020", "m030"} {
			buy(sale, "n")
			consumer.Heard(sale)
		}
		r.stored(orders, inventory.OrderConfirmed)
		cancel()
		<-done
		h.mu.Lock()
		defer h.mu.Unlock()
		wide := 0
		for i := 1; i < len(h.at); i++ {
			if !h.full[i-1] || !h.at[i-1].After(from) {
				continue
			}
			n := h.streams[i-1]
			k := time.Duration(min(max(1, (n+63)/64), 10))
			if n > 64 {
				wide++
			}
			// A round's least length counts from just before its read:
			// allow a little for what comes between.
			if gap, want := h.at[i].Sub(h.at[i-1]), k*linger-10*time.Millisecond; gap < want {
				t.Errorf("a read of %d streams that found entries, the next read %v after it; want %v or more", n, gap, want)
			}
		}
		if wide == 0 {
			t.Errorf("no read of more than 64 streams found entries in the waves over %d sales", sales)
		}
		for i := range h.at {
			if h.at[i].After(narrowFrom) && h.streams[i] > 3 {
				t.Errorf("a read after news of three sales named %d streams, want 3 at most", h.streams[i])
			}
		}
	})
}

// trims counts the XTRIMs of each pipeline a client sends.
type trims struct {
	mu   sync.Mutex
	most int
	all  map[string]bool // streams trimmed
}

func (h *trims) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *trims) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *trims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		h.mu.Lock()
		for _, c := range cmds {
			if c.Name() == "xtrim" {
				n++
				h.all[fmt.Sprint(c.Args()[1])] = true
			}
		}
		h.most = max(h.most, n)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestTrimsSpreadOverRounds: when 200 sales' entries are stored in one
// round, their streams are trimmed at most 64 a round, not all in the
// round after (a burst of four reads and a trim per sale that buys would
// queue behind), and every one of them is trimmed in the end.
func TestTrimsSpreadOverRounds(t *testing.T) {
	r := postgresRig(t)
	const sales = 200
	orders := r.manySales(sales, time.Time{})
	h := &trims{all: map[string]bool{}}
	c := redis.NewClient(&redis.Options{Addr: r.rdb.(*redis.Client).Options().Addr})
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	r.run(c, pipeline.Options{Readers: 1})
	r.stored(orders, inventory.OrderConfirmed)
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.mu.Lock()
		most, trimmed := h.most, len(h.all)
		h.mu.Unlock()
		if most > 64 {
			t.Fatalf("%d streams trimmed in one round, want at most 64", most)
		}
		if trimmed == sales {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams trimmed", trimmed, sales)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRotatedTrimsKeepAnotherConsumersPending: a stream trimmed in a later
// round (more sales due than a round trims) keeps every entry another
// consumer of the group holds and has not acknowledged, however long ago
// it was delivered: a trim stops at the group's oldest pending entry.
// (Fails if the trim point ignores pending entries, e.g. is the entry after
// the group's last delivered one.)
func TestRotatedTrimsKeepAnotherConsumersPending(t *testing.T) {
	r := postgresRig(t)
	const sales = 150 // more than a round trims
	orders := r.manySales(sales, time.Time{})
	// Another consumer of the group takes sale m000's entries so far and
	// never acknowledges them (it is slow, not dead: not reclaimed here).
	key := r.eng.EventsKey("m000")
	if err := r.rdb.XGroupCreateMkStream(r.ctx, key, pipeline.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	held, err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: pipeline.Group, Consumer: "other", Streams: []string{key, ">"}, Block: -1}).Result()
	if err != nil || len(held) != 1 || len(held[0].Messages) == 0 {
		t.Fatalf("the other consumer read %v, %v", held, err)
	}
	for i := range 3 {
		rc, err := r.eng.Buy(r.ctx, "m000", fmt.Sprintf("v%d", i), []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, rc.Order.ID)
	}
	r.run(r.rdb, pipeline.Options{Readers: 1, ClaimIdle: time.Hour})
	r.stored(append(orders[1:sales], orders[sales:]...), inventory.OrderConfirmed)
	// Every other stream is trimmed, over several rounds; m000's after its
	// three new entries were stored.
	waitfor.Until(t, waitfor.Patience, "the streams of the other sales trimmed", func() error {
		for i := 1; i < sales; i++ {
			if n, err := r.rdb.XLen(r.ctx, r.eng.EventsKey(fmt.Sprintf("m%03d", i))).Result(); err != nil || n != 0 {
				return fmt.Errorf("sale m%03d: %d entries (%v)", i, n, err)
			}
		}
		return nil
	})
	left, err := r.rdb.XRange(r.ctx, key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, m := range left {
		have[m.ID] = true
	}
	for _, m := range held[0].Messages {
		if !have[m.ID] {
			t.Errorf("entry %s, pending in another consumer, was trimmed from the stream (left: %d entries)", m.ID, len(left))
		}
	}
}

// TestGroupLostWhileARoundLingers: Redis loses a sale's consumer group, or
// its whole stream, while the reader of 130 sales lingers between rounds
// (three Lingers here): the orders bought after are stored, each once, and
// the entries read again from the start of a stream whose group was made
// anew are not stored twice.
func TestGroupLostWhileARoundLingers(t *testing.T) {
	r := postgresRig(t)
	const sales = 130
	orders := r.manySales(sales, time.Time{})
	r.run(r.rdb, pipeline.Options{Readers: 1, Linger: 50 * time.Millisecond})
	r.stored(orders, inventory.OrderConfirmed)
	if err := r.rdb.XGroupDestroy(r.ctx, r.eng.EventsKey("m005"), pipeline.Group).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.Del(r.ctx, r.eng.EventsKey("m006")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m005", "m006", "m007"} {
		rc, err := r.eng.Buy(r.ctx, id, "u2", []inventory.Line{{SKU: "A", Qty: 1}}, "")
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, rc.Order.ID)
	}
	r.stored(orders, inventory.OrderConfirmed)
	for _, id := range []string{"m005", "m006", "m007"} {
		waitfor.Until(t, waitfor.Patience, "sale "+id+" settled", func() error {
			if ev, err := pipeline.InFlight(r.ctx, r.rdb, r.eng, id); err != nil || len(ev) != 0 {
				return fmt.Errorf("%d events in flight (%v)", len(ev), err)
			}
			return nil
		})
		journal, err := r.db.Journal(r.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		bought := map[string]int{}
		for _, j := range journal {
			if j.Type == inventory.EventBought {
				bought[j.OrderID]++
			}
		}
		if len(bought) != 2 {
			t.Errorf("sale %s: %d orders journaled, want 2", id, len(bought))
		}
		for o, n := range bought {
			if n != 1 {
				t.Errorf("sale %s: order %s journaled %d times", id, o, n)
			}
		}
	}
}

// postgresRig is a rig on a redis-server of the test's own and PostgreSQL.
func postgresRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, ctx: context.Background(), rdb: redistest.Standalone(t)}
	r.eng = inventory.New(r.rdb, inventory.Options{Prefix: redistest.Prefix(t, r.rdb)})
	db, err := store.Open(r.ctx, dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	r.db = db
	return r
}
