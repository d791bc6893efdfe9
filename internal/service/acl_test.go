package service_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// The service works with exactly the permissions of deploy/redis/seckill.acl
// (the least-privilege Redis user the README documents), on a Redis of its
// own: every path that touches Redis runs, Redis denies nothing (ACL LOG
// stays empty), and the user can do nothing else.
func TestServiceWorksWithTheDocumentedACLUser(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/redis/seckill.acl")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 3 || fields[0] != "user" || fields[1] != "seckill" {
		t.Fatalf("seckill.acl is not one `user seckill <rules>` line: %q", raw)
	}
	rules := make([]any, 0, len(fields))
	rules = append(rules, "ACL", "SETUSER", "seckill")
	for _, r := range fields[2:] {
		if r == ">CHANGE-ME" {
			r = ">acl-test-password"
		}
		rules = append(rules, r)
	}
	srv := redistest.StartServer(t)
	root := srv.Client(t)
	ctx := context.Background()
	if err := root.Do(ctx, rules...).Err(); err != nil {
		t.Fatalf("ACL SETUSER with the documented rules: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(root.Do(ctx, "ACL", "LOG", "RESET").Err())

	a := startApp(t, service.Config{RedisURL: "redis://seckill:acl-test-password@" + srv.Addr() + "/0", DatabaseURL: dbtest.PostgresURL(t),
		SampleEvery: 50 * time.Millisecond, ArchiveEvery: 20 * time.Millisecond})
	// A sale with a purchase token and each rate-limit algorithm.
	mustStatus(t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": "s1", "per_user_limit": 5, "require_purchase_token": true,
		"rate_limits": map[string]any{"per_user": "100/s", "per_ip": "100/m,alg=sliding-window", "per_sale": "1000/m,alg=fixed-window"},
		"items":       []map[string]any{{"sku": "A", "stock": 10}, {"sku": "B", "stock": -1}}}), http.StatusCreated)
	buy := func(user string, idem string) reply {
		tok := a.token(user)
		r := a.call("POST", "/v1/sales/s1/purchase-tokens", tok, nil)
		mustStatus(t, r, http.StatusCreated)
		return a.call("POST", "/v1/sales/s1/orders", tok, map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}}},
			"X-Purchase-Token", r.json(t)["token"].(string), "Idempotency-Key", idem)
	}
	r := buy("alice", "k1")
	mustStatus(t, r, http.StatusCreated)
	order := r.json(t)["order_id"].(string)
	mustStatus(t, buy("alice", "k1"), http.StatusOK) // replay
	mustStatus(t, a.call("POST", "/v1/orders/"+order+"/cancel", a.token("alice"), nil), http.StatusOK)
	mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/items/A/restock", map[string]any{"qty": 5}), http.StatusOK)
	mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/pause", nil), http.StatusOK)
	mustStatus(t, a.admin("POST", "/v1/admin/sales/s1/resume", nil), http.StatusOK)
	// A sale without purchase tokens: the per-user limit is checked inside
	// the buy's own script (its throttle keys), and a sell-out is announced.
	a.createSale("s2", 5, "A", 1)
	mustStatus(t, a.call("POST", "/v1/sales/s2/orders", a.token("carol"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}), http.StatusCreated)
	mustStatus(t, a.call("POST", "/v1/sales/s2/orders", a.token("dave"), map[string]any{"items": []map[string]any{{"sku": "A", "qty": 1}}}), http.StatusConflict)
	// A sale with a payment step: a pay, an expiry (the expiry loop's
	// pipeline and script), the order read back from Redis.
	a.createPaySale("s3", 5, 1)
	paidOrder := a.buyOne("s3", "erin").json(t)["order_id"].(string)
	mustStatus(t, a.pay("erin", paidOrder, "ref-1"), http.StatusOK)
	a.waitExpired("frank", a.buyOne("s3", "frank").json(t)["order_id"].(string))
	// The script cache lost: the scripts are sent again.
	must(root.ScriptFlush(ctx).Err())
	mustStatus(t, buy("bob", "k2"), http.StatusCreated)
	a.settle("s1") // consumer and reconciliation
	mustStatus(t, a.call("GET", "/v1/orders/"+order, a.token("alice"), nil), http.StatusOK)
	// The sale's keys lost (a Redis without persistence restarted): the
	// sale is rebuilt from the database on first use.
	keys, err := root.Keys(ctx, "{seckill:s1}:*").Result()
	must(err)
	must(root.Del(ctx, keys...).Err())
	r = a.call("GET", "/v1/sales/s1", "", nil)
	mustStatus(t, r, http.StatusOK)
	if rem := r.json(t)["items"].([]any)[0].(map[string]any)["remaining"]; rem != float64(14) {
		t.Fatalf("remaining after rebuild %v, want 14", rem)
	}
	mustStatus(t, buy("carol", "k3"), http.StatusCreated)
	a.settle("s1")
	// A repair from the database (its script reads the stream with XINFO).
	must(root.HIncrBy(ctx, "{seckill:s1}:sale", "r:A", 1).Err())
	if res, err := reconcile.Repair(ctx, a.svc.Engine(), a.svc.Redis(), a.svc.Store(), "s1"); err != nil || len(res.Changes) != 1 {
		t.Fatalf("repair as the seckill user: %+v, %v", res, err)
	}
	mustStatus(t, a.call("GET", "/readyz", "", nil), http.StatusOK)
	// A close, and the archiver's removal of the sale's keys (UNLINK, SCAN).
	mustStatus(t, a.admin("POST", "/v1/admin/sales/s2/close", nil), http.StatusOK)
	waitfor.Until(t, waitfor.Patience, "the closed sale to be archived", func() error {
		if n, err := root.Exists(ctx, "{seckill:s2}:sale").Result(); err != nil || n != 0 {
			return fmt.Errorf("sale hash still there (%d, %v)", n, err)
		}
		return nil
	})
	waitfor.Until(t, waitfor.Patience, "the live view samples the sale", func() error {
		if !strings.Contains(string(a.call("GET", "/metrics", "", nil).body), `seckill_orders_confirmed{sale="s1"} 2`) {
			return errors.New(`no seckill_orders_confirmed{sale="s1"} 2 in /metrics`)
		}
		return nil
	})

	denied, err := root.Do(ctx, "ACL", "LOG").Slice()
	must(err)
	if len(denied) > 0 {
		t.Fatalf("Redis denied the service %d times; ACL LOG: %v", len(denied), denied)
	}

	// And nothing more: other keys, admin commands, other data commands.
	user := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "seckill", Password: "acl-test-password"})
	defer user.Close()
	for _, cmd := range [][]any{{"GET", "other:key"}, {"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"KEYS", "*"}, {"SCRIPT", "FLUSH"},
		{"LPUSH", "{seckill:s1}:x", "v"}, {"ACL", "LIST"}, {"CLIENT", "KILL", "ID", "999999"}, {"SHUTDOWN"}} {
		if err := user.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the seckill user: %v, want NOPERM", cmd, err)
		}
	}
	if err := root.Ping(ctx).Err(); err != nil {
		t.Fatal(fmt.Errorf("redis gone after the checks: %w", err))
	}
}
