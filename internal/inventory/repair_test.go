package inventory_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/inventory"
)

// consume plays the order consumer: it reads every entry of the sale's
// stream in the consumer group "orders", applies it to the system of record,
// acknowledges it (only after applying it) and trims what is acknowledged,
// as pipeline does.
func (db *recordDB) consume(r *rig, saleID string) {
	r.t.Helper()
	key := r.eng.EventsKey(saleID)
	if err := r.rdb.XGroupCreateMkStream(r.ctx, key, "orders", "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		r.t.Fatalf("XGROUP CREATE: %v", err)
	}
	streams, err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: "c", Streams: []string{key, ">"}, Block: -1}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		r.t.Fatalf("XREADGROUP: %v", err)
	}
	db.catchUp(r, saleID)
	var ids []string
	for _, s := range streams {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	if err := r.rdb.XAck(r.ctx, key, "orders", ids...).Err(); err != nil {
		r.t.Fatalf("XACK: %v", err)
	}
	// Everything is acknowledged: trim it all, as the consumer does.
	last := ids[len(ids)-1]
	ms, seq, _ := strings.Cut(last, "-")
	n, _ := strconv.ParseUint(seq, 10, 64)
	if err := r.rdb.XTrimMinID(r.ctx, key, ms+"-"+strconv.FormatUint(n+1, 10)).Err(); err != nil {
		r.t.Fatalf("XTRIM: %v", err)
	}
}

// liveState is the four hashes of a sale.
type liveState map[string]map[string]string

func (r *rig) liveState(sale string) liveState {
	r.t.Helper()
	out := liveState{}
	for _, name := range []string{"sale", "bought", "orders", "idem"} {
		h, err := r.rdb.HGetAll(r.ctx, r.key(sale, name)).Result()
		if err != nil {
			r.t.Fatal(err)
		}
		out[name] = h
	}
	return out
}

// restore puts a saved state back, as a failover to a replica that was
// behind would.
func (r *rig) restore(sale string, s liveState) {
	r.t.Helper()
	for name, h := range s {
		key := r.key(sale, name)
		if err := r.rdb.Del(r.ctx, key).Err(); err != nil {
			r.t.Fatal(err)
		}
		if len(h) > 0 {
			if err := r.rdb.HSet(r.ctx, key, h).Err(); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// streamPosition is the stream's length and last generated id.
func (r *rig) streamPosition(sale string) string {
	r.t.Helper()
	info, err := r.rdb.XInfoStream(r.ctx, r.eng.EventsKey(sale)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return strconv.FormatInt(info.Length, 10) + "/" + info.LastGeneratedID
}

// busySale creates s1 (A: 10 units, U: unlimited, limit 3) with some
// history, all of it consumed: buys with and without idempotency keys, a
// cancel, a restock, a pause and resume.
func busySale(t *testing.T, b backend) (*rig, *recordDB, map[string]inventory.Receipt) {
	t.Helper()
	db := &recordDB{}
	r := newRig(t, b, inventory.Options{Loader: db})
	r.create(inventory.Sale{ID: "s1", PerUserLimit: 3, Items: []inventory.Item{{SKU: "A", Stock: 10}, {SKU: "U", Stock: -1}}})
	rcs := map[string]inventory.Receipt{}
	buy := func(name, user string, l []inventory.Line, key string) {
		t.Helper()
		rc, err := r.eng.Buy(r.ctx, "s1", user, l, key)
		mustDo(t, err)
		rcs[name] = rc
	}
	buy("u1", "u1", lines("A", 2, "U", 1), "k1")
	buy("u2", "u2", lines("A", 1), "k2")
	buy("u3", "u3", lines("A", 3, "U", 2), "")
	buy("u4", "u4", lines("A", 1), "k4")
	_, err := r.eng.Cancel(r.ctx, rcs["u4"].Order.ID, "")
	mustDo(t, err)
	_, err = r.eng.Restock(r.ctx, "s1", "A", 5)
	mustDo(t, err)
	mustDo(t, r.eng.Pause(r.ctx, "s1"))
	mustDo(t, r.eng.Resume(r.ctx, "s1"))
	db.consume(r, "s1")
	return r, db, rcs
}

// TestRepairLostWrites: writes Redis lost or got wrong behind the engine's
// back — a counter bumped, an order record dropped with its units put
// back, a buyer's count and an idempotency key dropped, a stray count, a
// pause flag — are set back to the system of record's, and Repair says
// exactly what it changed. A second Repair finds nothing to change.
func TestRepairLostWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, rcs := busySale(t, b)
		good := r.liveState("s1")
		if rem := r.remaining("s1"); rem["A"] != 9 {
			t.Fatalf("remaining %v, want A 9", rem)
		}

		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 2).Err())                // a counter bumped
		r.dropOrder("s1", rcs["u2"].Order.ID)                                               // an order lost...
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 1).Err())                // ...its unit back on sale
		mustDo(t, r.rdb.HDel(r.ctx, r.key("s1", "bought"), "u1|A").Err())                   // a buyer's count lost
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u9|U", "5").Err())              // a count nobody holds
		mustDo(t, r.rdb.HDel(r.ctx, r.key("s1", "idem"), "u1|k1").Err())                    // an idempotency key lost
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "sale"), "paused", "1", "s:U", "7").Err())  // a pause and a counter that no event made
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "sale"), "someone-elses-field", "x").Err()) // not the engine's: left alone
		position := r.streamPosition("s1")

		got, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		want := []inventory.RepairChange{
			{Field: inventory.RepairPaused, Before: 1, After: 0, Fixed: 1},
			{Field: inventory.RepairIdempotencyKeys, Before: 2, After: 3, Fixed: 1},
			{SKU: "A", Field: inventory.RepairRemaining, Before: 12, After: 9, Fixed: 1},
			{SKU: "A", Field: inventory.RepairSold, Before: 5, After: 6, Fixed: 1},
			{SKU: "A", Field: inventory.RepairHeld, Before: 4, After: 6, Fixed: 1},
			{SKU: "U", Field: inventory.RepairSoldCounter, Before: 7, After: 3, Fixed: 1},
			{SKU: "U", Field: inventory.RepairHeld, Before: 8, After: 3, Fixed: 1},
		}
		if got.SaleID != "s1" || !reflect.DeepEqual(got.Changes, want) {
			t.Errorf("Repair changes:\n got %+v\nwant %+v", got.Changes, want)
		}
		after := r.liveState("s1")
		if after["sale"]["someone-elses-field"] != "x" {
			t.Error("the repair removed a field of the sale hash that is not the engine's")
		}
		delete(after["sale"], "someone-elses-field")
		if !reflect.DeepEqual(after, good) {
			t.Errorf("after the repair Redis holds\n%v\nwant\n%v", after, good)
		}
		if p := r.streamPosition("s1"); p != position {
			t.Errorf("the repair appended to the stream: %s, was %s", p, position)
		}
		// The limit and the idempotency key work again.
		if _, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2), ""); !errors.Is(err, inventory.ErrLimitExceeded) {
			t.Errorf("u1 over the limit after the repair: %v", err)
		}
		if rc, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2, "U", 1), "k1"); err != nil || !rc.Replayed || rc.Order.ID != rcs["u1"].Order.ID {
			t.Errorf("repeat of k1 after the repair: %+v, %v", rc, err)
		}

		again, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil || again.Changed() {
			t.Errorf("second Repair = %+v, %v; want nothing changed", again, err)
		}
	})
}

// TestRepairRestoresAcknowledgedOrders: Redis falls back to an older state
// (a failover to a replica that was behind) and so forgets orders, a cancel
// and a restock that the database already has. Repair brings them back: the
// buyers' orders, their quotas, the idempotency keys (a repeat is a replay,
// not a second order), the stock.
func TestRepairRestoresAcknowledgedOrders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, rcs := busySale(t, b)
		old := r.liveState("s1")
		later, err := r.eng.Buy(r.ctx, "s1", "u5", lines("A", 3, "U", 1), "k5")
		mustDo(t, err)
		_, err = r.eng.Cancel(r.ctx, rcs["u2"].Order.ID, "u2")
		mustDo(t, err)
		_, err = r.eng.Restock(r.ctx, "s1", "A", 2)
		mustDo(t, err)
		db.consume(r, "s1")
		good := r.liveState("s1")
		r.restore("s1", old)

		got, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		want := []inventory.RepairChange{
			{Field: inventory.RepairOrderRecords, Before: 4, After: 5, Fixed: 1}, // the order records, counted
			{Field: inventory.RepairIdempotencyKeys, Before: 3, After: 4, Fixed: 1},
			// remaining is right by chance (9 - 3 + 1 + 2): no change
			{SKU: "A", Field: inventory.RepairStocked, Before: 15, After: 17, Fixed: 1},
			{SKU: "A", Field: inventory.RepairSold, Before: 6, After: 8, Fixed: 2},
			{SKU: "A", Field: inventory.RepairHeld, Before: 6, After: 8, Fixed: 2},
			{SKU: "U", Field: inventory.RepairSoldCounter, Before: 3, After: 4, Fixed: 1},
			{SKU: "U", Field: inventory.RepairSold, Before: 3, After: 4, Fixed: 1},
			{SKU: "U", Field: inventory.RepairHeld, Before: 3, After: 4, Fixed: 1},
		}
		if !reflect.DeepEqual(got.Changes, want) {
			t.Errorf("Repair changes:\n got %+v\nwant %+v", got.Changes, want)
		}
		if after := r.liveState("s1"); !reflect.DeepEqual(after, good) {
			t.Errorf("after the repair Redis holds\n%v\nwant\n%v", after, good)
		}
		if rc, err := r.eng.Buy(r.ctx, "s1", "u5", lines("A", 3, "U", 1), "k5"); err != nil || !rc.Replayed || rc.Order.ID != later.Order.ID {
			t.Errorf("repeat of k5 after the repair: %+v, %v", rc, err)
		}
		if rc, err := r.eng.Cancel(r.ctx, rcs["u2"].Order.ID, "u2"); err != nil || !rc.Replayed {
			t.Errorf("u2's cancel was lost: %+v, %v", rc, err)
		}
	})
}

// TestRepairRefusesWhileEventsAreInFlight: no repair while the stream holds
// an event the system of record has not applied — not delivered to the
// consumer group, delivered and not acknowledged, or with no group reading
// the stream at all. Nothing is written; once the consumer has caught up,
// the repair goes through.
func TestRepairRefusesWhileEventsAreInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 10}}})
		_, err := r.eng.Buy(r.ctx, "s1", "u1", lines("A", 2), "")
		mustDo(t, err)
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 5).Err()) // drift to repair
		spoiled := r.liveState("s1")

		refused := func(what, group string, pending int64) {
			t.Helper()
			got, err := r.eng.Repair(r.ctx, "s1", db)
			var inflight *inventory.InFlightError
			if !errors.As(err, &inflight) || !errors.Is(err, inventory.ErrInFlight) || inflight.Raced ||
				inflight.Group != group || inflight.Pending != pending || got.Changed() {
				t.Fatalf("%s: Repair = %+v, %v; want in flight (group %q, %d pending)", what, got, err, group, pending)
			}
			if now := r.liveState("s1"); !reflect.DeepEqual(now, spoiled) {
				t.Fatalf("%s: a refused repair wrote:\n%v\nwas\n%v", what, now, spoiled)
			}
		}
		refused("no consumer group", "", 0)
		key := r.eng.EventsKey("s1")
		mustDo(t, r.rdb.XGroupCreateMkStream(r.ctx, key, "orders", "0").Err())
		refused("nothing delivered", "orders", 0)
		read := func() string {
			t.Helper()
			streams, err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: "c", Streams: []string{key, ">"}, Count: 1, Block: -1}).Result()
			mustDo(t, err)
			return streams[0].Messages[0].ID
		}
		created := read()
		refused("created delivered, not acknowledged", "orders", 1)
		mustDo(t, r.rdb.XAck(r.ctx, key, "orders", created).Err())
		refused("bought not delivered", "orders", 0)
		bought := read()
		refused("bought delivered, not acknowledged", "orders", 1)
		db.catchUp(r, "s1") // applied, then acknowledged
		mustDo(t, r.rdb.XAck(r.ctx, key, "orders", bought).Err())
		// A second group that is behind holds the repair up too.
		mustDo(t, r.rdb.XGroupCreateMkStream(r.ctx, key, "audit", "0").Err())
		refused("another group behind", "audit", 0)
		mustDo(t, r.rdb.XGroupDestroy(r.ctx, key, "audit").Err())

		got, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil || len(got.Changes) != 1 || got.Changes[0].After != 8 {
			t.Fatalf("Repair once settled = %+v, %v; want remaining 13 -> 8", got, err)
		}
		if rem := r.remaining("s1")["A"]; rem != 8 {
			t.Errorf("remaining %d, want 8", rem)
		}
	})
}

// TestRepairNeverLosesARacingBuy: a buy lands after Repair found the stream
// settled and read the system of record, so its snapshot lacks the buy. The
// script sees the stream moved and writes nothing: the buy keeps its order,
// its stock and its quota. In the second case the consumer even stores,
// acknowledges and trims the buy before the script runs, so the stream is
// as empty as Repair first saw it; its last generated id still moved.
func TestRepairNeverLosesARacingBuy(t *testing.T) {
	for _, trimmed := range []bool{false, true} {
		t.Run("trimmed="+strconv.FormatBool(trimmed), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				r, db, _ := busySale(t, b)
				mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 2).Err()) // drift, so there is something to write
				var racer inventory.Receipt
				racing := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
					snap, err := db.LoadSale(ctx, id) // before the buy
					var berr error
					racer, berr = r.eng.Buy(ctx, "s1", "racer", lines("A", 1), "")
					mustDo(t, berr)
					if trimmed {
						db.consume(r, "s1")
					}
					return snap, err
				})
				_, err := r.eng.Repair(r.ctx, "s1", racing)
				var inflight *inventory.InFlightError
				if !errors.As(err, &inflight) || !inflight.Raced {
					t.Fatalf("Repair raced by a buy: %v, want ErrInFlight (raced)", err)
				}
				if o, err := r.eng.Order(r.ctx, racer.Order.ID); err != nil || o.UserID != "racer" {
					t.Fatalf("the racing buy's order: %+v, %v", o, err)
				}
				if h := r.held("s1"); h["racer|A"] != 1 {
					t.Errorf("the racing buyer holds %d, want 1", h["racer|A"])
				}
				if rem := r.remaining("s1")["A"]; rem != 9+2-1 {
					t.Errorf("remaining %d, want %d: the buy's deduction is lost", rem, 9+2-1)
				}
				// Once settled, the repair keeps the buy: the database has it.
				db.consume(r, "s1")
				if _, err := r.eng.Repair(r.ctx, "s1", db); err != nil {
					t.Fatal(err)
				}
				if rem := r.remaining("s1")["A"]; rem != 8 {
					t.Errorf("remaining after the repair %d, want 8", rem)
				}
				if o, err := r.eng.Order(r.ctx, racer.Order.ID); err != nil || o.UserID != "racer" {
					t.Errorf("the racing buy's order after the repair: %+v, %v", o, err)
				}
			})
		})
	}
}

// countingHook counts the script calls with ops (writes) a client sends
// for a sale: the probe of repair.lua has 9 arguments.
type countingHook struct {
	key    string
	writes atomic.Int64
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	}
	return 0
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// A script with writes has more ARGV than the look's one "".
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && len(args) > 3 && args[3] == h.key &&
			len(args) > 3+int(toInt(args[2]))+1 {
			h.writes.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRepairWithoutDriftChangesNothing: a sale that agrees with the system of
// record is left as it is — no script with writes is sent, not a field
// changes, the stream does not move.
func TestRepairWithoutDriftChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, _ := busySale(t, b)
		// A zero count left by hand equals no count: not a change either.
		mustDo(t, r.rdb.HSet(r.ctx, r.key("s1", "bought"), "u8|A", "0").Err())
		before, position := r.liveState("s1"), r.streamPosition("s1")
		hook := &countingHook{key: r.key("s1", "sale")}
		r.rdb.AddHook(hook)
		got, err := r.eng.Repair(r.ctx, "s1", db)
		if err != nil || got.Changed() || got.SaleID != "s1" {
			t.Fatalf("Repair = %+v, %v; want nothing changed", got, err)
		}
		if n := hook.writes.Load(); n != 0 {
			t.Errorf("%d repair scripts with writes sent, want none", n)
		}
		if after := r.liveState("s1"); !reflect.DeepEqual(after, before) {
			t.Errorf("Redis changed:\n%v\nwas\n%v", after, before)
		}
		if p := r.streamPosition("s1"); p != position {
			t.Errorf("stream moved: %s, was %s", p, position)
		}
	})
}

// TestRepairRefusals: a sale missing from Redis is the rebuild's job, a sale
// whose items differ from the system of record's is not repairable, a bad
// id is invalid; none of them writes.
func TestRepairRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, _ := busySale(t, b)
		if _, err := r.eng.Repair(r.ctx, "nope", db); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("unknown sale: %v", err)
		}
		if _, err := r.eng.Repair(r.ctx, "bad id", db); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("bad id: %v", err)
		}
		other := inventory.LoaderFunc(func(ctx context.Context, id string) (inventory.Snapshot, error) {
			snap, err := db.LoadSale(ctx, id)
			snap.Sale.Items = append(snap.Sale.Items, inventory.Item{SKU: "B", Stock: 1})
			return snap, err
		})
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 1).Err())
		before := r.liveState("s1")
		if _, err := r.eng.Repair(r.ctx, "s1", other); !errors.Is(err, inventory.ErrCorrupt) {
			t.Errorf("items differ: %v, want ErrCorrupt", err)
		}
		if after := r.liveState("s1"); !reflect.DeepEqual(after, before) {
			t.Error("a refused repair wrote")
		}
		noLoader := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix})
		if _, err := noLoader.Repair(r.ctx, "s1", nil); err == nil {
			t.Error("Repair without a loader succeeded")
		}
	})
}

// TestRepairUnderLoad: buyers buy while a consumer stores their orders,
// Redis keeps losing units of stock behind the engine's back, and repairs
// run over and over. Some repairs go through at quiet moments, others are
// raced by buys and refused; whatever happens, no accepted buy is lost and
// nothing is oversold, and at the end the sale agrees with the system of
// record exactly.
func TestRepairUnderLoad(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		const stock = 300
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 8, Items: []inventory.Item{{SKU: "A", Stock: stock}}})
		db.consume(r, "s1")
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", -5).Err()) // 5 units lost to the sale

		ctx, stop := context.WithCancel(r.ctx)
		var bg sync.WaitGroup
		bg.Add(3)
		go func() { // Redis keeps losing a unit now and then (never below 0: -1 is unlimited)
			defer bg.Done()
			for ctx.Err() == nil {
				_ = r.rdb.Eval(ctx, `if tonumber(redis.call('HGET', KEYS[1], 'r:A')) > 0 then redis.call('HINCRBY', KEYS[1], 'r:A', -1) end`,
					[]string{r.key("s1", "sale")}).Err()
				time.Sleep(3 * time.Millisecond)
			}
		}()
		go func() { // the consumer
			defer bg.Done()
			for ctx.Err() == nil {
				db.consume(r, "s1")
				time.Sleep(time.Millisecond)
			}
		}()
		var repaired, raced atomic.Int64
		go func() { // the reconciliation loop, far too often
			defer bg.Done()
			for ctx.Err() == nil {
				got, err := r.eng.Repair(ctx, "s1", db)
				var inflight *inventory.InFlightError
				switch {
				case err == nil && got.Changed():
					repaired.Add(1)
				case errors.As(err, &inflight):
					if inflight.Raced {
						raced.Add(1)
					}
				case err != nil && ctx.Err() == nil:
					t.Errorf("Repair: %v", err)
				}
			}
		}()
		var mu sync.Mutex
		accepted := map[string]string{} // order id -> user
		var buyers sync.WaitGroup
		for i := range 50 {
			buyers.Add(1)
			go func() {
				defer buyers.Done()
				for j := range 12 {
					user := "u" + strconv.Itoa(i)
					rc, err := r.eng.Buy(r.ctx, "s1", user, lines("A", 1), "k"+strconv.Itoa(j))
					switch {
					case err == nil && !rc.Replayed:
						mu.Lock()
						accepted[rc.Order.ID] = user
						mu.Unlock()
					case err == nil, errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrLimitExceeded):
					default:
						t.Errorf("buy: %v", err)
					}
					time.Sleep(time.Duration((i*7+j*13)%25) * time.Millisecond)
				}
			}()
		}
		buyers.Wait()
		stop()
		bg.Wait()
		db.consume(r, "s1")
		if _, err := r.eng.Repair(r.ctx, "s1", db); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d orders accepted; under load %d repairs made, %d refused because a buy raced them", len(accepted), repaired.Load(), raced.Load())

		if len(accepted) > stock {
			t.Fatalf("%d orders accepted from %d units: oversold", len(accepted), stock)
		}
		orders, err := r.eng.UnitsInOrders(r.ctx, "s1")
		mustDo(t, err)
		if orders["A"] != int64(len(accepted)) {
			t.Errorf("%d units in Redis's orders, %d orders accepted", orders["A"], len(accepted))
		}
		for id, user := range accepted {
			if o, err := r.eng.Order(r.ctx, id); err != nil || o.UserID != user {
				t.Errorf("accepted order %s: %+v, %v", id, o, err)
			}
		}
		if rem := r.remaining("s1")["A"]; rem != stock-int64(len(accepted)) {
			t.Errorf("remaining %d + sold %d != stocked %d", rem, len(accepted), stock)
		}
		snap, _ := db.LoadSale(r.ctx, "s1")
		if len(snap.Orders) != len(accepted) {
			t.Errorf("system of record has %d orders, %d accepted", len(snap.Orders), len(accepted))
		}
		held, err := r.eng.UnitsHeld(r.ctx, "s1")
		mustDo(t, err)
		if !maps.Equal(held, orders) {
			t.Errorf("units held %v, in orders %v", held, orders)
		}
	})
}

// interleave runs f once, just before the first repair.lua call that
// writes (one with ops) is sent: between that repair's reads and its script.
type interleave struct {
	sha  string
	f    func()
	done atomic.Bool
}

func (h *interleave) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *interleave) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "evalsha" && len(args) > 3 && len(args) > 3+int(toInt(args[2]))+1 && args[1] == h.sha &&
			h.done.CompareAndSwap(false, true) {
			h.f()
		}
		return next(ctx, cmd)
	}
}
func (h *interleave) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestConcurrentRepairsRepairOnce: two instances repair the same drift at
// once. The second to write finds the values changed since it read them,
// looks again, and finds nothing left to do: the repair is reported (and so
// journaled) once, and the state is the system of record's.
func TestConcurrentRepairsRepairOnce(t *testing.T) {
	settled, err := os.ReadFile("settled.lua") // prepended (scripts.go), after the clock
	mustDo(t, err)
	src, err := os.ReadFile("repair.lua")
	mustDo(t, err)
	sum := sha1.Sum([]byte(gcra.ClockLua + "\n" + string(settled) + "\n" + string(src)))
	forEachBackend(t, func(t *testing.T, b backend) {
		r, db, _ := busySale(t, b)
		good := r.liveState("s1")
		mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 4).Err())
		mustDo(t, r.rdb.HDel(r.ctx, r.key("s1", "bought"), "u3|A").Err())
		mustDo(t, r.eng.Preload(r.ctx))
		var second inventory.Repaired
		var secondErr error
		other := inventory.New(r.rdb, inventory.Options{Prefix: r.prefix})
		r.rdb.AddHook(&interleave{sha: hex.EncodeToString(sum[:]), f: func() {
			second, secondErr = other.Repair(r.ctx, "s1", db)
		}})
		first, err := r.eng.Repair(r.ctx, "s1", db)
		if secondErr != nil || len(second.Changes) != 2 {
			t.Fatalf("the repair that wrote first: %+v, %v; want 2 changes", second, secondErr)
		}
		if err != nil || first.Changed() {
			t.Errorf("the repair that came second: %+v, %v; want nothing changed", first, err)
		}
		if after := r.liveState("s1"); !reflect.DeepEqual(after, good) {
			t.Errorf("after both repairs Redis holds\n%v\nwant\n%v", after, good)
		}
	})
}

// TestRepairScriptIsPreloaded: Preload loads repair.lua with the others (on
// miniredis, a server of the test's own, so no other test flushes its cache).
func TestRepairScriptIsPreloaded(t *testing.T) {
	b := backends[1]
	r, db, _ := busySale(t, b)
	mustDo(t, b.flushScripts(r.ctx, r.rdb))
	mustDo(t, r.eng.Preload(r.ctx))
	mustDo(t, r.rdb.HIncrBy(r.ctx, r.key("s1", "sale"), "r:A", 1).Err())
	before := r.eng.ScriptReloads()
	if got, err := r.eng.Repair(r.ctx, "s1", db); err != nil || !got.Changed() {
		t.Fatalf("Repair = %+v, %v", got, err)
	}
	if n := r.eng.ScriptReloads() - before; n != 0 {
		t.Errorf("%d NOSCRIPT reloads after Preload, want 0", n)
	}
}
