package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// cutScripts makes every script call on one key fail unsent, through a
// go-redis hook: the process that sends them is as good as dead for them.
type cutScripts struct{ key string }

func (c cutScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c cutScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == c.key {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return next(ctx, cmd)
	}
}

func (c cutScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// homedAt returns n user ids whose home segment of segs is segs[i].
func homedAt(segs []string, i, n int, prefix string) []string {
	var out []string
	for u := 0; len(out) < n; u++ {
		if user := fmt.Sprintf("%s%d", prefix, u); segment.Home(segs, user) == segs[i] {
			out = append(out, user)
		}
	}
	return out
}

// reconciled reads the sale's reconcile report: stocked, remaining, sold
// and moving of item A, and whether it is consistent.
func reconciled(t testing.TB, a *app, sale string) (stocked, remaining, sold, moving int64, consistent bool) {
	t.Helper()
	r := a.admin("GET", "/v1/admin/sales/"+sale+"/reconcile", nil)
	mustStatus(t, r, http.StatusOK)
	m := r.json(t)
	for _, it := range m["items"].([]any) {
		item := it.(map[string]any)
		if item["sku"] == "A" {
			num := func(k string) int64 { f, _ := item[k].(float64); return int64(f) }
			stocked, remaining, sold, moving = num("stocked"), num("remaining"), num("sold"), num("moving")
		}
	}
	return stocked, remaining, sold, moving, m["consistent"] == true
}

// TestMoveStrandedBetweenItsHalvesIsFinished: a sale of 4 units on 2
// segments; 2 are sold from segment 0, then an instance moving the other 2
// from segment 1 to segment 0 dies between the move's halves: they left
// segment 1 and never reached segment 0. Another instance finishes the
// move by itself, so later buyers get those 2 units (before, 0 of them
// did, for good); meanwhile the sale reads stocked 4 everywhere, and
// reconcile never calls it consistent while the units are in no segment.
func TestMoveStrandedBetweenItsHalvesIsFinished(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off", ReconcileEvery: 200 * time.Millisecond}
	a := startApp(t, cfg)
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(4), 2), http.StatusCreated)
	segs, err := a.svc.Store().Segments(a.ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	for _, user := range homedAt(segs, 0, 2, "early") {
		mustStatus(t, a.buyOne("hot", user), http.StatusCreated)
	}

	// The instance that dies: its move's out half runs, its in half never
	// reaches Redis.
	dying := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = dying.Close() })
	eng := inventory.New(dying, inventory.Options{Prefix: cfg.KeyPrefix})
	dying.AddHook(cutScripts{key: eng.Key(segs[0], "sale")})
	var pending *inventory.MoveError
	if _, err := eng.Move(a.ctx, segs[1], segs[0], "A", 2); !errors.As(err, &pending) || pending.Units != 2 {
		t.Fatalf("the dying instance's move: %v", err)
	}

	// Whenever it is read: 4 stocked, and consistent only with every unit
	// in a segment or sold. (Each problem is reported once.)
	reported := map[string]bool{}
	report := func(what, format string, args ...any) {
		t.Helper()
		if !reported[what] {
			reported[what] = true
			t.Errorf(format, args...)
		}
	}
	check := func() {
		t.Helper()
		if got := saleItems(t, a, "hot")["A"]; got[1] != 4 {
			report("get", "GET /v1/sales/hot reads %d stocked (remaining %d, sold %d), want 4", got[1], got[0], got[2])
		}
		stocked, remaining, sold, moving, consistent := reconciled(t, a, "hot")
		if stocked != 4 || remaining+sold+moving != 4 {
			report("stocked", "reconcile: stocked %d, remaining %d, sold %d, moving %d: want 4 stocked, all accounted for", stocked, remaining, sold, moving)
		}
		if consistent && remaining+sold != 4 {
			report("consistent", "reconcile says consistent with %d units in no segment (stocked %d, remaining %d, sold %d)", 4-remaining-sold, stocked, remaining, sold)
		}
	}
	check()

	bought := 0
	waitfor.Until(t, waitfor.Patience, "later buyers get the 2 units the dead instance was moving", func() error {
		check()
		for _, user := range []string{"late0", "late1", "late2", "late3"} {
			r := a.buyOne("hot", user)
			switch {
			case r.status == http.StatusCreated:
				bought++
			case r.status == http.StatusConflict && (r.code(t) == "sold_out" || r.code(t) == "limit_exceeded"):
			default:
				t.Fatalf("late buy: %d %s", r.status, r.body)
			}
		}
		if bought < 2 {
			return fmt.Errorf("%d of 2 bought", bought)
		}
		return nil
	})
	if bought != 2 {
		t.Fatalf("%d units bought after the move, 2 were left", bought)
	}
	a.settle("hot")
	check()
	if units := confirmedUnits(t, a, "hot"); units != 4 {
		t.Fatalf("%d units confirmed in the database, stock 4", units)
	}
	if stocked, _, sold, moving, consistent := reconciled(t, a, "hot"); !consistent || stocked != 4 || sold != 4 || moving != 0 {
		t.Fatalf("reconcile at the end: consistent %v, stocked %d, sold %d, moving %d", consistent, stocked, sold, moving)
	}
}

// TestMoveCutByDegradedModeIsFinishedOnceRedisSells: a move's in half meets
// its segment fenced as the database takes over (its out half ran). While
// the database sells, the 2 units are in no segment: the sale still reads 4
// stocked and nobody gets them (nothing is sold twice). Once Redis sells
// again, the move is finished and later buyers get exactly those 2 units:
// 4 sold of 4, in Redis and in the database.
func TestMoveCutByDegradedModeIsFinishedOnceRedisSells(t *testing.T) {
	cfg := realStack(t)
	cfg.RateLimitUser, cfg.DegradedTick, cfg.DegradedGrace = "off", 50*time.Millisecond, 200*time.Millisecond
	a := startApp(t, cfg)
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(4), 2), http.StatusCreated)
	segs, err := a.svc.Store().Segments(a.ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	for _, user := range homedAt(segs, 0, 2, "early") {
		mustStatus(t, a.buyOne("hot", user), http.StatusCreated)
	}
	// The fence degraded mode is about to put on every segment is on the
	// destination already: the move's in half meets it.
	epoch := int64(a.sellMode()["epoch"].(float64))
	if _, err := a.svc.Engine().Fence(a.ctx, segs[0], epoch+1); err != nil {
		t.Fatal(err)
	}
	var pending *inventory.MoveError
	if _, err := a.svc.Engine().Move(a.ctx, segs[1], segs[0], "A", 2); !errors.As(err, &pending) || !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("a move into a fenced segment: %v", err)
	}
	a.forceDegraded()
	short := false
	waitfor.Until(t, waitfor.Patience, "the database applies the move out and the orders", func() error {
		got := saleItems(t, a, "hot")["A"]
		if got[1] != 4 && !short {
			short = true
			t.Errorf("while the database sells, the sale reads %v: %d stocked, want 4", got, got[1])
		}
		if moving, err := a.svc.Store().MovingUnits(a.ctx, segs); err != nil || moving["A"] != 2 || got != [3]int64{0, 4, 2} {
			return fmt.Errorf("moving %v (%v), the sale reads %v, want 0 remaining, 4 stocked, 2 sold", moving, err, got)
		}
		return nil
	})
	for _, user := range []string{"db0", "db1", "db2", "db3"} {
		if r := a.buyUntil("hot", user); r.status != http.StatusConflict || r.code(t) != "sold_out" {
			t.Fatalf("a buy while the database sells and the units are moving: %d %s", r.status, r.body)
		}
	}

	mustStatus(t, a.admin("PUT", "/v1/admin/degraded", map[string]any{"setting": "auto"}), http.StatusOK)
	a.waitMode("redis")
	bought := 0
	waitfor.Until(t, waitfor.Patience, "buyers get the 2 units once Redis sells", func() error {
		for _, user := range []string{"late0", "late1", "late2", "late3"} {
			r := a.buyOne("hot", user)
			switch {
			case r.status == http.StatusCreated:
				bought++
			case r.status == http.StatusConflict && (r.code(t) == "sold_out" || r.code(t) == "limit_exceeded"):
			default:
				t.Fatalf("late buy: %d %s", r.status, r.body)
			}
		}
		if bought < 2 {
			return fmt.Errorf("%d of 2 bought", bought)
		}
		return nil
	})
	if bought != 2 {
		t.Fatalf("%d units bought after the recovery, 2 were left", bought)
	}
	a.settle(segs[0])
	a.settle(segs[1])
	if units := confirmedUnits(t, a, "hot"); units != 4 {
		t.Fatalf("%d units confirmed in the database, stock 4", units)
	}
	if stocked, _, sold, moving, consistent := reconciled(t, a, "hot"); !consistent || stocked != 4 || sold != 4 || moving != 0 {
		t.Fatalf("reconcile at the end: consistent %v, stocked %d, sold %d, moving %d", consistent, stocked, sold, moving)
	}
}

// TestSegmentedSaleArchivedWithItsMoveFinished: a segmented sale is closed
// with a move left pending between its segments (the instance moving died
// between the halves). The archiver does not remove a segment while a move
// of its sale is pending (it finishes the move first): the archived sale
// still stocks its 4 units, where its source segment, archived first, took
// the 2 moving units with it.
func TestSegmentedSaleArchivedWithItsMoveFinished(t *testing.T) {
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), RateLimitUser: "off", ArchiveEvery: 20 * time.Millisecond}
	a := startApp(t, cfg)
	mustStatus(t, a.createSegmented("hot", 1, "A", int64(4), 2), http.StatusCreated)
	segs, err := a.svc.Store().Segments(a.ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	for _, user := range homedAt(segs, 0, 2, "early") {
		mustStatus(t, a.buyOne("hot", user), http.StatusCreated)
	}
	mustStatus(t, a.admin("POST", "/v1/admin/sales/hot/close", nil), http.StatusOK)
	dying := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = dying.Close() })
	eng := inventory.New(dying, inventory.Options{Prefix: cfg.KeyPrefix})
	dying.AddHook(cutScripts{key: eng.Key(segs[0], "sale")})
	if _, err := eng.Move(a.ctx, segs[1], segs[0], "A", 2); err == nil {
		t.Fatal("the dying instance's move succeeded")
	}
	waitfor.Until(t, waitfor.Patience, "the sale is archived", func() error {
		if r := a.call("GET", "/v1/sales/hot", "", nil); r.json(t)["archived"] != true {
			return fmt.Errorf("GET reads %s", r.body)
		}
		return nil
	})
	if got := saleItems(t, a, "hot")["A"]; got != [3]int64{2, 4, 2} {
		t.Errorf("the archived sale reads %v, want 2 remaining, 4 stocked, 2 sold", got)
	}
	if stocked, _, sold, _, consistent := reconciled(t, a, "hot"); !consistent || stocked != 4 || sold != 2 {
		t.Errorf("reconcile of the archived sale: consistent %v, stocked %d, sold %d", consistent, stocked, sold)
	}
}
