package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestServiceOnCallersRedisWithoutListener: a service started on the
// options of a caller's Redis client (RedisOptions, RedisClusterOptions)
// and without a listener opens no port and has no URL; its Handler,
// mounted on a server of the caller's, sells, and so does Buy; the orders
// reach the database. Its connections are its own (named, checked, then
// the options' OnConnect), the caller's options are left as they were,
// and the caller's client still works after Shutdown, which closes the
// service's.
func TestServiceOnCallersRedisWithoutListener(t *testing.T) {
	// callers is a caller's client of each kind, made with onConnect: the
	// client, how a service is configured on it, and what its options must
	// still say after the service used them.
	type caller struct {
		rdb       redis.UniversalClient
		use       func(cfg *service.Config)
		unchanged func() error
	}
	sameOptions := func(name string, identityOff bool, pool int, addrs []string, wantAddrs []string) error {
		if name != "" || identityOff || pool == 1 || pool == 2 || !slices.Equal(addrs, wantAddrs) {
			return fmt.Errorf("name %q, CLIENT SETINFO off %v, pool %d, addresses %v", name, identityOff, pool, addrs)
		}
		return nil
	}
	for _, c := range []struct {
		name   string
		client func(t *testing.T, onConnect func(context.Context, *redis.Conn) error) caller
	}{
		{"standalone", func(t *testing.T, onConnect func(context.Context, *redis.Conn) error) caller {
			o, err := redis.ParseURL(redistest.URL())
			if err != nil {
				t.Fatal(err)
			}
			o.OnConnect = onConnect
			rdb := redis.NewClient(o)
			t.Cleanup(func() { _ = rdb.Close() })
			addr := o.Addr
			return caller{rdb, func(cfg *service.Config) { cfg.RedisOptions = rdb.Options() }, func() error {
				o := rdb.Options()
				return sameOptions(o.ClientName, o.DisableIdentity, o.PoolSize, []string{o.Addr}, []string{addr})
			}}
		}},
		{"cluster", func(t *testing.T, onConnect func(context.Context, *redis.Conn) error) caller {
			cluster, err := redistest.StartCluster(3, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cluster.Stop() })
			seeds := cluster.Addrs()[:1]
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(seeds), OnConnect: onConnect})
			t.Cleanup(func() { _ = rdb.Close() })
			return caller{rdb, func(cfg *service.Config) { cfg.RedisClusterOptions = rdb.Options() }, func() error {
				o := rdb.Options()
				return sameOptions(o.ClientName, o.DisableIdentity, o.PoolSize, o.Addrs, seeds)
			}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var named []string // the names of the connections the caller's OnConnect saw
			onConnect := func(ctx context.Context, cn *redis.Conn) error {
				name, err := cn.ClientGetName(ctx).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
				mu.Lock()
				named = append(named, name)
				mu.Unlock()
				return nil
			}
			cl := c.client(t, onConnect)
			ctx := context.Background()
			if err := cl.rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			reserved, err := net.Listen("tcp", "127.0.0.1:0") // a free port, to name as Addr
			if err != nil {
				t.Fatal(err)
			}
			addr := reserved.Addr().String()
			_ = reserved.Close()

			cfg := service.Config{Addr: addr, NoListener: true, KeyPrefix: redistest.Prefix(t, cl.rdb), DatabaseURL: dbtest.PostgresURL(t),
				AdminToken: "admin-secret-token", JWTSecret: "jwt-secret-for-tests", ReconcileEvery: -1}
			cfg.Pipeline.Block = 20 * time.Millisecond
			cl.use(&cfg)
			svc, err := service.Start(ctx, cfg)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = svc.Shutdown(context.Background())
				}
			})
			if svc.URL() != "" {
				t.Errorf("URL without a listener: %q", svc.URL())
			}
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				_ = conn.Close()
				t.Errorf("something listens on %s, the Addr of a service without a listener", addr)
			}

			srv := httptest.NewServer(svc.Handler()) // the caller's server
			defer srv.Close()
			a := &app{t: t, svc: svc, ctx: ctx}
			post := func(path, token, body string) reply {
				t.Helper()
				req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				return reply{status: resp.StatusCode, header: resp.Header, body: raw}
			}
			mustStatus(t, post("/v1/admin/sales", svc.AdminToken(), `{"id":"s1","items":[{"sku":"A","stock":5}]}`), http.StatusCreated)
			r := post("/v1/sales/s1/orders", a.token("u1"), `{"items":[{"sku":"A","qty":1}]}`)
			mustStatus(t, r, http.StatusCreated)
			rc, err := svc.Buy(ctx, buyA("s1", "u2"))
			mustVerb(t, "buy from Go", err)
			for _, id := range []string{r.json(t)["order_id"].(string), rc.Order.ID} {
				waitfor.Until(t, waitfor.Patience, "order "+id+" in the database", func() error {
					_, err := svc.Store().Order(ctx, id)
					return err
				})
			}

			mu.Lock()
			seen := slices.Clone(named)
			mu.Unlock()
			for _, want := range []string{"seckill-api", "seckill-consumer", "seckill-probe"} {
				if !slices.Contains(seen, want) {
					t.Errorf("the options' OnConnect saw connections named %v: none %s", seen, want)
				}
			}
			if err := cl.unchanged(); err != nil {
				t.Errorf("the caller's options changed: %v", err)
			}

			stopped = true
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := svc.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if err := svc.Redis().Ping(ctx).Err(); !errors.Is(err, redis.ErrClosed) {
				t.Errorf("the service's own client after Shutdown: %v, want %v", err, redis.ErrClosed)
			}
			if err := cl.rdb.Ping(ctx).Err(); err != nil {
				t.Errorf("the caller's client after Shutdown: %v", err)
			}
		})
	}
}
