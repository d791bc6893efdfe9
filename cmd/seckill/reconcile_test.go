package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

// TestReconcileRepairCommand runs `seckill reconcile` against a service's
// Redis and PostgreSQL: a clean pass exits 0; drift exits 1 without
// --repair and changes nothing; --repair fixes it, journals it and exits 0;
// with an order in flight (the service, and so its consumer, stopped)
// --repair leaves the drift, says why and exits 1.
func TestReconcileRepairCommand(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t, rdb)
	redisURL, dbURL := "redis://"+rdb.Options().Addr+"/0", dbtest.PostgresURL(t)
	svc, err := service.Start(ctx, service.Config{Addr: "127.0.0.1:0", RedisURL: redisURL, KeyPrefix: prefix, DatabaseURL: dbURL,
		ReconcileEvery: -1, Pipeline: pipeline.Options{Block: 10 * time.Millisecond, DiscoverAll: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = svc.Shutdown(sctx)
		}
	}
	t.Cleanup(stop)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	eng, db := svc.Engine(), svc.Store()
	sale := inventory.Sale{ID: "s1", PerUserLimit: 2, Items: []inventory.Item{{SKU: "A", Stock: 10}}}
	must(db.CreateSale(ctx, store.Sale{Sale: sale}))
	must(eng.CreateSale(ctx, sale))
	_, err = eng.Buy(ctx, "s1", "u1", []inventory.Line{{SKU: "A", Qty: 2}}, "")
	must(err)

	reconcileCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--sale", "s1", "--redis", redisURL, "--db", dbURL, "--key-prefix", prefix}, args...),
			func(string) string { return "" }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	for deadline := time.Now().Add(waitfor.Patience); ; time.Sleep(10 * time.Millisecond) { // the consumer stores the orders
		lag, err := pipeline.ReadLag(ctx, svc.Redis(), eng, "s1")
		must(err)
		if lag.Entries == 0 && lag.Oldest.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not catch up")
		}
	}
	code, out, errOut := reconcileCmd()
	if code != 0 || !strings.HasPrefix(out, "sale s1: consistent\n") || errOut != "" {
		t.Fatalf("clean pass: exit %d\n%s%s", code, out, errOut)
	}

	sold := func(key string, by int64) {
		t.Helper()
		must(svc.Redis().HIncrBy(ctx, eng.Key("s1", "sale"), key, by).Err())
	}
	sold("r:A", 3) // drift
	if code, out, _ = reconcileCmd(); code != 1 || !strings.HasPrefix(out, "sale s1: DRIFT\n") {
		t.Fatalf("drift without --repair: exit %d\n%s", code, out)
	}
	if st, _ := eng.Stock(ctx, "s1"); st.Items[0].Remaining != 11 {
		t.Fatalf("a pass without --repair changed remaining to %d", st.Items[0].Remaining)
	}
	code, out, errOut = reconcileCmd("--repair")
	if code != 0 || errOut != "" {
		t.Fatalf("--repair: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"sale s1: DRIFT\n", "repaired from the database: A remaining 11->8\n", "sale s1: consistent\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("--repair output lacks %q:\n%s", want, out)
		}
	}
	if got, _ := db.Repairs(ctx, "s1"); len(got) != 1 || got[0].Field != inventory.RepairRemaining || got[0].Before != 11 || got[0].After != 8 {
		t.Errorf("journal: %+v", got)
	}
	if code, out, _ = reconcileCmd("--repair"); code != 0 || !strings.HasPrefix(out, "sale s1: consistent\n") || strings.Contains(out, "repaired") {
		t.Errorf("--repair without drift: exit %d\n%s", code, out)
	}

	// The consumer stopped, an order waits in the stream: not repaired.
	stop()
	other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer other.Close()
	_, err = inventory.New(other, inventory.Options{Prefix: prefix}).Buy(ctx, "s1", "u2", []inventory.Line{{SKU: "A", Qty: 1}}, "")
	must(err)
	must(other.HIncrBy(ctx, eng.Key("s1", "sale"), "r:A", 2).Err())
	code, out, _ = reconcileCmd("--repair")
	if code != 1 || !strings.Contains(out, "sale s1: DRIFT\n") || !strings.Contains(out, "not repaired: events in flight") {
		t.Errorf("--repair with an order in flight: exit %d\n%s", code, out)
	}
	if rem, _ := other.HGet(ctx, eng.Key("s1", "sale"), "r:A").Int64(); rem != 9 {
		t.Errorf("remaining %d after a refused repair, want 9 (left as it was)", rem)
	}
	if code, _, errOut = reconcileCmd("--repair", "--sale", "bad id"); code != 2 {
		t.Errorf("bad sale id: exit %d %s", code, errOut)
	}

	// An archived sale: the database alone holds it, and the command says so
	// (it never rebuilds the sale in Redis).
	archived := inventory.Sale{ID: "old", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 1}}}
	db, err = store.Open(ctx, dbURL) // the service's is closed
	must(err)
	defer db.Close()
	must(db.CreateSale(ctx, store.Sale{Sale: archived}))
	must(db.BeginArchive(ctx, "old", time.Now()))
	must(db.FinishArchive(ctx, "old", time.Now()))
	for _, args := range [][]string{{"--sale", "old"}, {"--sale", "old", "--repair"}} {
		if code, out, errOut = reconcileCmd(args...); code != 0 || !strings.Contains(out, "sale old is archived") {
			t.Errorf("%v of an archived sale: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

func TestDurationFlags(t *testing.T) {
	for _, f := range []struct {
		name, env string
		def       time.Duration
		define    func(*flag.FlagSet, func(string) string) func() (time.Duration, error)
	}{
		{"reconcile-every", "SECKILL_RECONCILE_EVERY", 30 * time.Second, reconcileFlag},
		{"degraded-grace", "SECKILL_DEGRADED_GRACE", 3 * time.Second, degradedFlag},
		{"archive-every", "SECKILL_ARCHIVE_EVERY", 2 * time.Second, archiveFlag},
	} {
		for _, c := range []struct {
			env  string
			args []string
			want time.Duration
		}{
			{"", nil, f.def},
			{"5m", nil, 5 * time.Minute},
			{"0", nil, -1}, // off
			{"5m", []string{"--" + f.name, "2s"}, 2 * time.Second}, // the flag wins
			{"", []string{"--" + f.name, "0s"}, -1},
		} {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			get := f.define(fs, func(k string) string { return map[string]string{f.env: c.env}[k] })
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if got, err := get(); err != nil || got != c.want {
				t.Errorf("%s: env %q, args %v: %v, %v; want %v", f.name, c.env, c.args, got, err, c.want)
			}
		}
		for _, bad := range []string{"soon", "-1s", "30"} {
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--" + f.name, bad}, func(string) string { return "" }, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), "--"+f.name) || strings.Count(strings.TrimSpace(errOut.String()), "\n") > 0 {
				t.Errorf("--%s %s: exit %d, stderr %q", f.name, bad, code, errOut.String())
			}
		}
	}
}
