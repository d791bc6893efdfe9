package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// stack is what a service test runs on.
type stack struct {
	name  string
	start func(t testing.TB) service.Config
}

// stacks: the production pair (real Redis + PostgreSQL) and the embedded
// defaults (miniredis + SQLite).
var stacks = []stack{
	{"redis+postgres", func(t testing.TB) service.Config {
		rdb := redistest.Standalone(t)
		return service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
			DatabaseURL: dbtest.PostgresURL(t)}
	}},
	{"embedded", func(t testing.TB) service.Config {
		return service.Config{DatabaseURL: dbtest.SQLiteURL(t)}
	}},
}

func forEachStack(t *testing.T, f func(t *testing.T, a *app)) {
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) { f(t, startApp(t, st.start(t))) })
	}
}

// app is a running service and a client for it.
type app struct {
	t   testing.TB
	svc *service.Service
	ctx context.Context
}

func startApp(t testing.TB, cfg service.Config) *app {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	cfg.AdminToken, cfg.JWTSecret = "admin-secret-token", "jwt-secret-for-tests"
	if cfg.ReconcileEvery == 0 {
		cfg.ReconcileEvery = -1 // off unless the test wants the loop
	}
	cfg.Pipeline.Block = 20 * time.Millisecond
	if cfg.Pipeline.DiscoverAll == 0 {
		cfg.Pipeline.DiscoverAll = 50 * time.Millisecond
	}
	svc, err := service.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
	})
	return &app{t: t, svc: svc, ctx: context.Background()}
}

// token signs a buyer's JWT with the service's secret.
func (a *app) token(user string) string {
	a.t.Helper()
	tok, err := service.SignUser(a.svc.JWTSecret(), user, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		a.t.Fatal(err)
	}
	return tok
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %q", r.body)
	}
	return m
}

// code is the error code of an error answer.
func (r reply) code(t testing.TB) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	c, _ := e["code"].(string)
	if c == "" || e["message"] == "" {
		t.Errorf("error body without code and message: %s", r.body)
	}
	return c
}

// call sends a request; body is JSON-encoded unless it is a string.
func (a *app) call(method, path, token string, body any, headers ...string) reply {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.svc.URL()+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}
}

func (a *app) admin(method, path string, body any) reply {
	return a.call(method, path, a.svc.AdminToken(), body)
}

// mustStatus fails the test unless r has the status.
func mustStatus(t testing.TB, r reply, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
}

// createSale creates a sale through the API.
func (a *app) createSale(id string, limit int64, items ...any) {
	a.t.Helper()
	var list []map[string]any
	for i := 0; i < len(items); i += 2 {
		list = append(list, map[string]any{"sku": items[i], "stock": items[i+1]})
	}
	mustStatus(a.t, a.admin("POST", "/v1/admin/sales", map[string]any{"id": id, "per_user_limit": limit, "items": list}), http.StatusCreated)
}

// state is everything a rejected request must leave unchanged.
type state struct {
	stock   []inventory.ItemState
	bought  map[string]string
	orders  int64
	journal int
	events  int64
}

func (a *app) state(sale string) state {
	a.t.Helper()
	eng, rdb := a.svc.Engine(), a.svc.Redis()
	var s state
	if st, err := eng.Stock(a.ctx, sale); err == nil {
		s.stock = st.Items
	}
	s.bought, _ = rdb.HGetAll(a.ctx, eng.Key(sale, "bought")).Result()
	if recs, err := redisOrders(a.ctx, rdb, eng.Key(sale, "orders")); err == nil {
		s.orders = int64(len(recs))
	}
	s.events, _ = rdb.XLen(a.ctx, eng.EventsKey(sale)).Result()
	j, _ := a.svc.Store().Journal(a.ctx, sale)
	s.journal = len(j)
	return s
}

// redisOrders returns the orders of a sale's orders hash (key), order id ->
// record: the hash holds them by group (inventory.OrderRecords).
func redisOrders(ctx context.Context, rdb redis.UniversalClient, key string) (map[string]string, error) {
	groups, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	return inventory.OrderRecords(groups), nil
}

// dropOrder removes order id's record from a sale's orders hash (key), as a
// Redis that lost the write would (redistest.DropOrder).
func dropOrder(ctx context.Context, t testing.TB, rdb redis.UniversalClient, key, id string) {
	t.Helper()
	redistest.DropOrder(ctx, t, rdb, key, inventory.OrderGroup(id), id)
}

// settle waits until the order pipeline has stored everything of the sale.
func (a *app) settle(sale string) {
	a.t.Helper()
	deadline := time.Now().Add(waitfor.Patience)
	for time.Now().Before(deadline) {
		r := a.admin("GET", "/v1/admin/sales/"+sale+"/reconcile", nil)
		if r.status == http.StatusOK && r.json(a.t)["consistent"] == true {
			allIn := true
			for _, it := range r.json(a.t)["items"].([]any) {
				if it.(map[string]any)["in_flight"].(float64) != 0 {
					allIn = false
				}
			}
			// The consumer trims the stream right after it acknowledges:
			// wait for that too, so that the state read next is still.
			if n, err := a.svc.Redis().XLen(a.ctx, a.svc.Engine().EventsKey(sale)).Result(); allIn && err == nil && n == 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.t.Fatalf("sale %s did not settle: %s", sale, a.admin("GET", "/v1/admin/sales/"+sale+"/reconcile", nil).body)
}
