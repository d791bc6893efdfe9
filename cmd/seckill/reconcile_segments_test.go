package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestReconcileSegmentedSale: `seckill reconcile --sale` of a segmented
// sale reconciles every segment and prints their sum; drift in one
// segment shows (exit 1) and --repair fixes it there.
func TestReconcileSegmentedSale(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	redisURL, dbURL := "redis://"+rdb.Options().Addr+"/0", dbtest.PostgresURL(t)
	svc, err := service.Start(ctx, service.Config{Addr: "127.0.0.1:0", RedisURL: redisURL, KeyPrefix: prefix, DatabaseURL: dbURL,
		ReconcileEvery: -1, Pipeline: pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(sctx)
	})
	req, _ := http.NewRequest("POST", svc.URL()+"/v1/admin/sales",
		strings.NewReader(`{"id": "hot", "items": [{"sku": "A", "stock": 20, "segments": 4}]}`))
	req.Header.Set("Authorization", "Bearer "+svc.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}
	resp.Body.Close()
	eng := svc.Engine()
	sel := segment.New(eng, svc.Redis(), segment.Options{})
	for u := range 6 {
		if _, err := sel.Buy(ctx, inventory.BuyRequest{SaleID: "hot", UserID: fmt.Sprintf("u%d", u), Lines: []inventory.Line{{SKU: "A", Qty: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := svc.Store().Segments(ctx, "hot")
	if err != nil || len(segs) != 4 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	for _, seg := range segs {
		for deadline := time.Now().Add(waitfor.Patience); ; time.Sleep(10 * time.Millisecond) {
			lag, err := pipeline.ReadLag(ctx, svc.Redis(), eng, seg)
			if err == nil && lag.Entries == 0 && lag.Oldest.IsZero() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the consumer did not catch up on %s: %v", seg, err)
			}
		}
	}
	reconcileCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--sale", "hot", "--redis", redisURL, "--db", dbURL, "--key-prefix", prefix}, args...),
			func(string) string { return "" }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := reconcileCmd()
	if code != 0 || !strings.Contains(out, "sale hot is on 4 segments") || !strings.Contains(out, "sale hot: consistent\n") || errOut != "" {
		t.Fatalf("clean pass: exit %d\n%s%s", code, out, errOut)
	}
	if err := svc.Redis().HIncrBy(ctx, eng.Key(segs[2], "sale"), "r:A", 3).Err(); err != nil {
		t.Fatal(err)
	}
	if code, out, _ = reconcileCmd(); code != 1 || !strings.Contains(out, "sale hot: DRIFT\n") {
		t.Fatalf("drift without --repair: exit %d\n%s", code, out)
	}
	if code, out, errOut = reconcileCmd("--repair"); code != 0 || !strings.Contains(out, "sale hot: consistent\n") {
		t.Fatalf("--repair: exit %d\n%s%s", code, out, errOut)
	}
	if st, err := svc.Redis().HGet(ctx, eng.Key(segs[2], "sale"), "r:A").Int64(); err != nil || st > 5 {
		t.Fatalf("segment %s remaining %d after the repair (%v)", segs[2], st, err)
	}
}

// cutScripts makes every script call on one key fail unsent: the process
// sending them is as good as dead for them.
type cutScripts struct{ key string }

func (c cutScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c cutScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == c.key {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return next(ctx, cmd)
	}
}

func (c cutScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReconcileSegmentedSaleWithAMovePending: no service runs, and a move
// between two segments of a sale was left half done (its process died
// between the halves). `seckill reconcile` says the sale drifts (exit 1),
// with its 20 units stocked, 4 of them moving; --repair finishes the move
// and the sale is consistent again.
func TestReconcileSegmentedSaleWithAMovePending(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	redisURL, dbURL := "redis://"+rdb.Options().Addr+"/0", dbtest.PostgresURL(t)
	svc, err := service.Start(ctx, service.Config{Addr: "127.0.0.1:0", RedisURL: redisURL, KeyPrefix: prefix, DatabaseURL: dbURL,
		ReconcileEvery: -1, Pipeline: pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", svc.URL()+"/v1/admin/sales",
		strings.NewReader(`{"id": "hot", "items": [{"sku": "A", "stock": 20, "segments": 2}]}`))
	req.Header.Set("Authorization", "Bearer "+svc.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}
	resp.Body.Close()
	segs, err := svc.Store().Segments(ctx, "hot")
	if err != nil || len(segs) != 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svc.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	dying := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = dying.Close() })
	eng := inventory.New(dying, inventory.Options{Prefix: prefix})
	dying.AddHook(cutScripts{key: eng.Key(segs[0], "sale")})
	if _, err := eng.Move(ctx, segs[1], segs[0], "A", 4); err == nil {
		t.Fatal("the dying process's move succeeded")
	}
	reconcileCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--sale", "hot", "--redis", redisURL, "--db", dbURL, "--key-prefix", prefix}, args...),
			func(string) string { return "" }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := reconcileCmd()
	if code != 1 || !strings.Contains(out, "sale hot: DRIFT\n") || !strings.Contains(out, "4 units of A are on their way") ||
		!strings.Contains(out, "  20  ") {
		t.Fatalf("a pass with 4 units moving: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = reconcileCmd("--repair"); code != 0 || !strings.Contains(out, "sale hot: consistent\n") ||
		!strings.Contains(out, "finished 1 moves") {
		t.Fatalf("--repair: exit %d\n%s%s", code, out, errOut)
	}
}
