package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// lossy loses the replies of some buy script calls (sent alone or in a
// pipeline), before or after they ran, at random.
type lossy struct {
	match func(redis.Cmder) bool
	mu    sync.Mutex
	rng   *rand.Rand
}

func (l *lossy) roll() (fail, after bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.IntN(4) == 0, l.rng.IntN(2) == 0
}

func (l *lossy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lossy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !l.match(cmd) {
			return next(ctx, cmd)
		}
		fail, after := l.roll()
		if !fail {
			return next(ctx, cmd)
		}
		if after {
			_ = next(ctx, cmd)
		}
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

func (l *lossy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hit := false
		for _, c := range cmds {
			hit = hit || l.match(c)
		}
		if !hit {
			return next(ctx, cmds)
		}
		fail, after := l.roll()
		if !fail {
			return next(ctx, cmds)
		}
		if after {
			_ = next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// Many buyers buy at once, coalesced and through BuyMany, in buys of every
// shape (shared ones, more than a call shares, keys, tokens, throttles,
// one line or three, the same user in several shapes), while a quarter
// of the buy calls lose their reply and the buyers resend. Every order in
// Redis is exactly one request's (its order id's user, lines and key),
// made at most once; keys, tokens and a once-an-hour throttle are spent
// at most once; counts, stock and the stream agree with the orders.
func TestAdvShapesUnderLostReplies(t *testing.T) {
	for _, name := range []string{"redis", "miniredis"} {
		for _, perOrder := range []bool{false, true} {
			t.Run(fmt.Sprint(name, "/perOrder=", perOrder), func(t *testing.T) {
				var addr string
				if name == "redis" {
					addr = "127.0.0.1:6379"
				} else {
					addr = miniredis.RunT(t).Addr()
				}
				rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 64})
				t.Cleanup(func() { _ = rdb.Close() })
				prefix := redistest.Prefix(t, rdb)
				eng := inventory.New(rdb, inventory.Options{Prefix: prefix, EntryPerOrder: perOrder})
				advStress(t, rdb, eng, prefix)
			})
		}
	}
}

func advStress(t *testing.T, rdb *redis.Client, eng *inventory.Engine, prefix string) {
	ctx := context.Background()
	skus := []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L"}
	stock := map[string]int64{}
	var items []inventory.Item
	for i, s := range skus {
		n := int64(40 + 10*i)
		if i == 1 {
			n = -1
		}
		stock[s] = n
		items = append(items, inventory.Item{SKU: s, Stock: n})
	}
	const limit = 6
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "s1", PerUserLimit: limit, Items: items}); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&lossy{match: func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == "{"+prefix+":s1}:sale"
	}, rng: rand.New(rand.NewPCG(1, 2))})
	strict := &inventory.Throttle{Rate: 1, Period: time.Hour}
	loose := &inventory.Throttle{Rate: 50, Period: time.Second, Burst: 20}

	var mu sync.Mutex
	byID := map[string]inventory.BuyRequest{} // every order id sent, its request
	type outcome struct {
		r  inventory.BuyRequest
		rc inventory.Receipt
	}
	var ok []outcome
	mkReq := func(rng *rand.Rand) inventory.BuyRequest {
		r := inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("u", rng.IntN(30))}
		nl := 1
		if rng.IntN(4) == 0 {
			nl = 1 + rng.IntN(3)
		}
		pool := skus[:2]
		if rng.IntN(3) == 0 {
			pool = skus
		}
		for _, i := range rng.Perm(len(pool))[:min(nl, len(pool))] {
			r.Lines = append(r.Lines, inventory.Line{SKU: pool[i], Qty: int64(1 + rng.IntN(2))})
		}
		switch rng.IntN(8) {
		case 0:
			r.IdempotencyKey = fmt.Sprint("k", rng.IntN(4))
		case 1:
			r.Token, r.TokenTTL = fmt.Sprint("t", rng.IntN(40)), time.Minute
		case 2:
			r.Throttle = strict
		case 3, 4:
			r.Throttle = loose
		}
		r.OrderID = inventory.NewOrderID("s1")
		mu.Lock()
		byID[r.OrderID] = r
		mu.Unlock()
		return r
	}
	record := func(r inventory.BuyRequest, rc inventory.Receipt, err error) bool {
		if err == nil {
			mu.Lock()
			ok = append(ok, outcome{r, rc})
			mu.Unlock()
			return true
		}
		return !errors.Is(err, io.ErrUnexpectedEOF) // a lost reply: resend
	}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 60 {
				if g%4 == 0 {
					reqs := make([]inventory.BuyRequest, 1+rng.IntN(30))
					for i := range reqs {
						reqs[i] = mkReq(rng)
					}
					for try := 0; try < 5 && len(reqs) > 0; try++ {
						var again []inventory.BuyRequest
						for i, res := range eng.BuyMany(ctx, reqs) {
							if !record(reqs[i], res.Receipt, res.Err) {
								again = append(again, reqs[i])
							}
						}
						reqs = again
					}
					continue
				}
				r := mkReq(rng)
				for try := 0; try < 5; try++ {
					rc, err := eng.BuyWith(ctx, r)
					if record(r, rc, err) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()

	key := func(s string) string { return "{" + prefix + ":s1}:" + s }
	groups, err := rdb.HGetAll(ctx, key("orders")).Result()
	if err != nil {
		t.Fatal(err)
	}
	orders := inventory.OrderRecords(groups)
	held := map[string]int64{}
	sold := map[string]int64{}
	perKey, perToken, perStrict := map[string]int{}, map[string]int{}, map[string]int{}
	for id, rec := range orders {
		r, found := byID[id]
		if !found {
			t.Errorf("order %s (%s): no request sent its id", id, rec)
			continue
		}
		want := "p|" + r.UserID + "|"
		if !strings.HasPrefix(rec, want) {
			t.Errorf("order %s: %q, want user %s", id, rec, r.UserID)
		}
		var ls []string
		for _, l := range r.Lines {
			ls = append(ls, fmt.Sprint(l.SKU, "=", l.Qty))
			held[r.UserID+"|"+l.SKU] += l.Qty
			sold[l.SKU] += l.Qty
		}
		if !strings.HasSuffix(rec, "|"+strings.Join(ls, ",")+"|"+r.IdempotencyKey) {
			t.Errorf("order %s: %q, want lines %s key %q", id, rec, strings.Join(ls, ","), r.IdempotencyKey)
		}
		if r.IdempotencyKey != "" {
			perKey[r.UserID+"|"+r.IdempotencyKey]++
		}
		if r.Token != "" {
			perToken[r.Token]++
		}
		if r.Throttle != nil && r.Throttle.Period == time.Hour {
			perStrict[r.UserID]++
		}
	}
	for k, n := range perKey {
		if n > 1 {
			t.Errorf("key %s: %d orders", k, n)
		}
	}
	for k, n := range perToken {
		if n > 1 {
			t.Errorf("token %s: %d orders", k, n)
		}
	}
	for k, n := range perStrict {
		if n > 1 {
			t.Errorf("once an hour throttle, user %s: %d orders", k, n)
		}
	}
	for _, o := range ok {
		rec, found := orders[o.rc.Order.ID]
		if !found {
			t.Errorf("receipt of %s for %+v: no such order", o.rc.Order.ID, o.r)
			continue
		}
		if o.rc.Order.UserID != o.r.UserID || !slices.Equal(o.rc.Order.Items, o.r.Lines) || o.rc.Order.IdempotencyKey != o.r.IdempotencyKey {
			t.Errorf("receipt %+v for %+v", o.rc.Order, o.r)
		}
		if !o.rc.Replayed && o.rc.Order.ID != o.r.OrderID {
			t.Errorf("receipt %s (%s), not a replay, for order id %s", o.rc.Order.ID, rec, o.r.OrderID)
		}
	}
	got, err := rdb.HGetAll(ctx, key("bought")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(held) {
		t.Errorf("%d bought counts, want %d", len(got), len(held))
	}
	for f, n := range held {
		if got[f] != fmt.Sprint(n) {
			t.Errorf("bought %s = %q, want %d", f, got[f], n)
		}
		if n > limit {
			t.Errorf("bought %s = %d, over the limit", f, n)
		}
	}
	st, err := eng.Stock(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range st.Items {
		if stock[it.SKU] >= 0 && it.Remaining != stock[it.SKU]-sold[it.SKU] {
			t.Errorf("%s remaining %d, want %d", it.SKU, it.Remaining, stock[it.SKU]-sold[it.SKU])
		}
	}
	msgs, err := rdb.XRange(ctx, eng.EventsKey("s1"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	evs, err := inventory.ParseEntries("s1", msgs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.Type != inventory.EventBought {
			continue
		}
		id := ev.Order.ID
		if seen[id] {
			t.Errorf("order %s: two bought events", id)
		}
		seen[id] = true
		rec, found := orders[id]
		if !found {
			t.Errorf("event of order %s: no such order", id)
			continue
		}
		o := ev.Order
		want := fmt.Sprint("p|", o.UserID, "|", o.CreatedAt.UnixMilli(), "|")
		if !strings.HasPrefix(rec, want) || !slices.Equal(o.Items, byID[id].Lines) || o.IdempotencyKey != byID[id].IdempotencyKey {
			t.Errorf("event of order %s: %+v, record %q", id, o, rec)
		}
	}
	if len(seen) != len(orders) {
		t.Errorf("%d bought events, %d orders", len(seen), len(orders))
	}
	t.Logf("%d orders, %d successes", len(orders), len(ok))
}

// A buy that names another user's order id (code 7) in a call where it
// shares its shape with others is sold again alone under a new id: its
// order is its own user's and lines, and the others' are theirs.
func TestAdvTakenOrderIDInASharedShape(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r := newRig(t, b, inventory.Options{})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 50}, {SKU: "B", Stock: 50}}})
		first, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 1), "")
		if err != nil {
			t.Fatal(err)
		}
		var reqs []inventory.BuyRequest
		for i := range 6 {
			reqs = append(reqs, inventory.BuyRequest{SaleID: "s1", UserID: fmt.Sprint("v", i), Lines: lines("A", 1)})
		}
		reqs[2].OrderID = first.Order.ID // taken, by u1
		reqs[4].OrderID = first.Order.ID
		reqs[4].UserID = "u1" // u1's resend of its own order: a retry
		for i, res := range r.eng.BuyMany(r.ctx, reqs) {
			if res.Err != nil {
				t.Fatalf("buy %d: %v", i, res.Err)
			}
			o, err := r.eng.Order(r.ctx, res.Receipt.Order.ID)
			if err != nil {
				t.Fatal(err)
			}
			if o.UserID != reqs[i].UserID || !slices.Equal(o.Items, reqs[i].Lines) {
				t.Errorf("buy %d of %s: order %+v", i, reqs[i].UserID, o)
			}
			if i == 2 && o.ID == first.Order.ID {
				t.Errorf("buy 2 took u1's order id")
			}
			if i == 4 && (o.ID != first.Order.ID || !res.Receipt.Retried) {
				t.Errorf("u1's resend: %+v", res.Receipt)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != 50-6 {
			t.Errorf("remaining %d, want %d", rem, 50-6)
		}
	})
}
