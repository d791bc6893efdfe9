package service_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
)

// startOther starts a service on cfg as startApp does, but returns its
// error instead of failing the test.
func startOther(t *testing.T, cfg service.Config) (*app, error) {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	cfg.AdminToken, cfg.JWTSecret = "admin-secret-token", "jwt-secret-for-tests"
	cfg.ReconcileEvery = -1
	svc, err := service.Start(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
	})
	return &app{t: t, svc: svc, ctx: context.Background()}, nil
}

// TestOneKeyPrefixPerDatabase: a database belongs to the key prefix of the
// first service that starts on it. A service of another prefix on the
// same schema refuses to start, naming both prefixes: were it to start, it
// would rebuild the database's sale under its own keys and sell its unit
// a second time. A service of the same prefix starts, and finds the unit
// sold.
func TestOneKeyPrefixPerDatabase(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t)}
	first := startApp(t, cfg)
	first.createSale("one", 1, "A", 1)
	mustStatus(t, first.buyOne("one", "alice"), http.StatusCreated)

	other := cfg
	other.KeyPrefix = redistest.Prefix(t, rdb)
	b, err := startOther(t, other)
	if err == nil {
		r := b.buyOne("one", "bob")
		t.Fatalf("a service of key prefix %s started on the database of prefix %s; its buy of the sold-out unit: %d %s",
			other.KeyPrefix, cfg.KeyPrefix, r.status, r.body)
	}
	for _, want := range []string{`belongs to key prefix "` + cfg.KeyPrefix + `"`, `this instance's is "` + other.KeyPrefix + `"`, "schema"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start with another prefix: %v; want it to say %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the refusal is not one line: %q", err)
	}

	again := startApp(t, cfg)
	mustStatus(t, again.buyOne("one", "bob"), http.StatusConflict)
	first.settle("one")
	counts, err := first.svc.Store().CountOrders(context.Background(), "one")
	if err != nil {
		t.Fatal(err)
	}
	if n := counts[inventory.OrderPending] + counts[inventory.OrderConfirmed]; n != 1 {
		t.Fatalf("%d orders of the sale's one unit (%v), want 1", n, counts)
	}
}

// TestKeyPrefixAdoptsOlderDatabase: a database a release before the record
// of its key prefix wrote (its tables and a sale there, no prefix)
// belongs to the prefix of the first service that starts on it after the
// upgrade, which sells its sale; a service of another prefix is refused
// from then on.
func TestKeyPrefixAdoptsOlderDatabase(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t)
	cfg := service.Config{RedisURL: "redis://" + rdb.Options().Addr + "/0", KeyPrefix: redistest.Prefix(t, rdb),
		DatabaseURL: dbtest.PostgresURL(t)}
	ctx := context.Background()
	db, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	err = db.CreateSale(ctx, store.Sale{Sale: inventory.Sale{ID: "old", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	a := startApp(t, cfg)
	mustStatus(t, a.buyOne("old", "alice"), http.StatusCreated)
	other := cfg
	other.KeyPrefix = redistest.Prefix(t, rdb)
	if b, err := startOther(t, other); err == nil {
		r := b.buyOne("old", "bob")
		t.Fatalf("a service of another prefix started on the adopted database; its buy: %d %s", r.status, r.body)
	}
}
