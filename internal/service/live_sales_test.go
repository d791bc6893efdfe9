package service_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
)

// keyWatch counts the commands that name a key containing one of its
// strings.
type keyWatch struct {
	mu     sync.Mutex
	counts map[string]int
}

func (w *keyWatch) see(cmds ...redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cmds {
		for _, a := range c.Args() {
			for k := range w.counts {
				if s, ok := a.(string); ok && strings.Contains(s, k) {
					w.counts[k]++
				}
			}
		}
	}
}

// window resets the counts, waits d and returns them.
func (w *keyWatch) window(d time.Duration, keys ...string) map[string]int {
	w.mu.Lock()
	w.counts = map[string]int{}
	for _, k := range keys {
		w.counts[k] = 0
	}
	w.mu.Unlock()
	time.Sleep(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.counts
	w.counts = map[string]int{}
	return out
}

func (w *keyWatch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *keyWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { w.see(cmd); return next(ctx, cmd) }
}
func (w *keyWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { w.see(cmds...); return next(ctx, cmds) }
}

// TestLoopsVisitOnlyLiveSales: the live sampler and the reconcile loop
// read the sales that can still change; sales that have ended and whose
// orders are all stored cost them nothing, and still show in the live view
// (until they are archived: the archiver is off here).
func TestLoopsVisitOnlyLiveSales(t *testing.T) {
	rdb := redistest.Standalone(t)
	a := startApp(t, service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t), SampleEvery: 50 * time.Millisecond, ReconcileEvery: 100 * time.Millisecond, ArchiveEvery: -1})
	// The sales end a few seconds from now; e00 is bought first, right
	// after it is made, so a loaded machine's slow set-up (the twenty
	// creations have taken over 2 s under the race detector) never meets
	// an ended sale.
	end := time.Now().Add(5 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range 20 {
		mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": fmt.Sprintf("e%02d", i), "per_user_limit": 1,
			"ends_at": end.UTC().Format(time.RFC3339), "items": []map[string]any{{"sku": "A", "stock": 5}}}), http.StatusCreated)
		if i == 0 {
			mustStatus(t, a.call("POST", "/v1/sales/e00/orders", a.token("u1"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}), http.StatusCreated)
		}
	}
	a.createSale("live", 1, "A", 5)
	time.Sleep(time.Until(end))
	w := &keyWatch{counts: map[string]int{}}
	a.svc.Redis().AddHook(w)
	k := a.svc.Engine().EventsKey("e00")
	ended, live := k[:strings.Index(k, ":e00")+2], a.svc.Engine().Key("live", "") // "{prefix:e": the ended sales' keys
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := w.window(500*time.Millisecond, ended, live) // ten samples, five passes
		if got[ended] == 0 && got[live] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commands naming the ended sales' keys in the last window: %d (and the live sale's: %d)", got[ended], got[live])
		}
	}
	body := string(a.call("GET", "/v1/live", "", nil).body)
	if !strings.Contains(body, `"id":"e00"`) || !strings.Contains(body, `"id":"live"`) {
		t.Errorf("the live view does not show every sale: %.500s", body)
	}
}
