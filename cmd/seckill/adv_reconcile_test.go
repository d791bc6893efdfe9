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
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/store"
)

// TestAdvReconcileArchivedSegmentedSale: `seckill reconcile --sale` of a
// segmented sale whose segments are all archived says so (exit 0), as of
// an archived ordinary sale: it never compares the database with the
// nothing Redis holds of it.
func TestAdvReconcileArchivedSegmentedSale(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	redisURL, dbURL := "redis://"+rdb.Options().Addr+"/0", dbtest.PostgresURL(t)
	db, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ids := []string{"hs:0", "hs:1", "hs:2"}
	plans, err := segment.Plan(inventory.Sale{ID: "hs", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 9}}}, ids)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]store.Sale, len(plans))
	for i, p := range plans {
		rows[i] = store.Sale{Sale: p, CreatedAt: time.Now()}
	}
	if err := db.CreateSegmentedSale(ctx, "hs", rows); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := db.BeginArchive(ctx, id, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := db.FinishArchive(ctx, id, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{nil, {"--repair"}} {
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--sale", "hs", "--redis", redisURL, "--db", dbURL, "--key-prefix", prefix}, args...),
			func(string) string { return "" }, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), "is archived") {
			t.Errorf("%v of an archived segmented sale: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
	}
	if n, err := rdb.Keys(ctx, "*"+prefix+"*").Result(); err != nil || len(n) > 0 {
		t.Errorf("keys in Redis after reconcile of an archived sale: %v %v", n, err)
	}
}
