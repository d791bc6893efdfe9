package service_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/waitfor"
)

// TestReconcileLoopRepairs: serve's reconciliation loop, on its own clock,
// finds a stock counter changed behind the engine's back and a buyer's count
// lost, repairs both from the database, journals the repair, logs it once,
// counts it in /metrics, and the live view's drift goes back to 0. (That it
// waits for a second pass is TestReconcileLoopRepairsDriftTwoPassesFind's.)
func TestReconcileLoopRepairs(t *testing.T) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			cfg := st.start(t)
			cfg.ReconcileEvery, cfg.SampleEvery = 100*time.Millisecond, 20*time.Millisecond
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			a := startApp(t, cfg)
			a.createSale("s1", 2, "A", 10)
			for _, user := range []string{"u1", "u2"} {
				mustStatus(t, a.call("POST", "/v1/sales/s1/orders", a.token(user), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 2}}}),
					http.StatusCreated)
			}
			a.settle("s1")
			eng, rdb := a.svc.Engine(), a.svc.Redis()
			if err := rdb.HIncrBy(a.ctx, eng.Key("s1", "sale"), "r:A", 5).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.HDel(a.ctx, eng.Key("s1", "bought"), "u2|A").Err(); err != nil {
				t.Fatal(err)
			}

			var repairs int
			for deadline := time.Now().Add(waitfor.Patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				got, err := a.svc.Store().Repairs(a.ctx, "s1")
				if err != nil {
					t.Fatal(err)
				}
				if repairs = len(got); repairs > 0 {
					break
				}
			}
			if repairs != 2 { // remaining and held of A
				t.Fatalf("%d repairs journaled, want 2; logs:\n%s", repairs, logs.String())
			}
			r := a.admin("GET", "/v1/admin/sales/s1/reconcile", nil)
			if item := r.json(t)["items"].([]any)[0].(map[string]any); r.json(t)["consistent"] != true || item["remaining"] != float64(6) ||
				item["held_drift"] != float64(0) {
				t.Errorf("after the repair: %s", r.body)
			}
			if err := a.call("POST", "/v1/sales/s1/orders", a.token("u2"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}); err.status != http.StatusConflict {
				t.Errorf("u2 past the limit after the repair: %d %s", err.status, err.body)
			}
			var metrics string
			for deadline := time.Now().Add(waitfor.Patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				metrics = string(a.call("GET", "/metrics", "", nil).body)
				if strings.Contains(metrics, `seckill_reconcile_stock_drift{sale="s1",sku="A"} 0`) {
					break
				}
			}
			for _, want := range []string{`seckill_reconcile_repairs_total{sale="s1"} 1`, `seckill_reconcile_stock_drift{sale="s1",sku="A"} 0`,
				`seckill_reconcile_drift{sale="s1",sku="A"} 0`} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if n := strings.Count(logs.String(), "reconcile: repaired drift from the database"); n != 1 {
				t.Errorf("%d repair lines logged, want 1:\n%s", n, logs.String())
			}
		})
	}
}
