package seckill_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

// redisLog is go-redis's logger for a test: it keeps every line, and
// writes it to stderr as go-redis's own would. go-redis has one logger per
// process, and no way to read it back: it stays installed.
type redisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	fmt.Fprintln(os.Stderr, "redis:", line)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

func (l *redisLog) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestOpenWithCallersClient: a System given the caller's *redis.Client
// makes clients of its own from the client's options without go-redis
// complaining (the options of a client carry its push-notification
// processor, where its own handlers are registered: a client made from
// them would register its handlers there again, and fail to), sells, and
// leaves the caller's client working after Shutdown.
func TestOpenWithCallersClient(t *testing.T) {
	logs := &redisLog{}
	redis.SetLogger(logs)
	ctx := context.Background()
	shared := redistest.Standalone(t)
	// A client as a program makes it, not yet connected: its options still
	// have maintenance notifications in go-redis's "auto" mode (a
	// connection to a Redis without them turns them off in its options).
	rdb := redis.NewClient(&redis.Options{Addr: shared.Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	sys, err := seckill.Open(ctx, seckill.Config{Redis: rdb, KeyPrefix: redistest.Prefix(t, shared), DatabaseURL: dbtest.SQLiteURL(t),
		ReconcileEvery: -1, DegradedGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	sale := seckill.Sale{ID: "s", PerUserLimit: 1, Items: []seckill.Item{{SKU: "A", Stock: 1}}}
	if _, err := sys.CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Buy(ctx, seckill.BuyRequest{SaleID: "s", UserID: "u", Lines: []seckill.Line{{SKU: "A", Qty: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := sys.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the caller's client after Shutdown: %v", err)
	}
	for _, s := range []string{"maintnotifications", "handler"} {
		if got := logs.matching(s); len(got) > 0 {
			t.Errorf("go-redis logged %q", got)
		}
	}
}
