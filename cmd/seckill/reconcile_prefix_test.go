package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
)

// TestReconcileRefusesAnotherPrefix: `seckill reconcile` with a key prefix
// other than the one the database belongs to exits 1 with the refusal,
// and writes no key of that prefix (a --repair would rebuild the sale
// under it); with the database's own prefix it runs.
func TestReconcileRefusesAnotherPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	prefix, other := redistest.Prefix(t, rdb), redistest.Prefix(t, rdb)
	redisURL, dbURL := "redis://"+rdb.Options().Addr+"/0", dbtest.PostgresURL(t)
	svc, err := service.Start(ctx, service.Config{Addr: "127.0.0.1:0", RedisURL: redisURL, KeyPrefix: prefix, DatabaseURL: dbURL, ReconcileEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(sctx)
	})
	sale := inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
	if err := svc.Store().CreateSale(ctx, store.Sale{Sale: sale}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Engine().CreateSale(ctx, sale); err != nil {
		t.Fatal(err)
	}

	reconcileCmd := func(prefix string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--sale", "s1", "--redis", redisURL, "--db", dbURL, "--key-prefix", prefix}, args...),
			func(string) string { return "" }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	for _, args := range [][]string{nil, {"--repair"}} {
		code, out, errOut := reconcileCmd(other, args...)
		if code != 1 || !strings.Contains(errOut, `belongs to key prefix "`+prefix+`"; this instance's is "`+other+`"`) {
			t.Errorf("reconcile %v with another prefix: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	for _, pattern := range []string{"{" + other + ":*", other + ":*"} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			t.Errorf("a key of the refused prefix: %s", iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := reconcileCmd(prefix); code != 0 || !strings.HasPrefix(out, "sale s1: consistent\n") {
		t.Errorf("reconcile with the database's prefix: exit %d\n%s%s", code, out, errOut)
	}
}
