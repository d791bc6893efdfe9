package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
)

// TestSubcommandFlags: each subcommand's -h lists exactly the flags it
// uses, no other command's.
func TestSubcommandFlags(t *testing.T) {
	stores := []string{"redis", "redis-cluster", "db"}
	logs := []string{"log-format", "log-level"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve"}, concat(stores, logs, []string{"db-schema", "addr", "admin-token", "jwt-secret", "key-prefix",
			"rate-limit-user", "rate-limit-ip", "rate-limit-sale", "trusted-proxies", "instances",
			"live-streams-per-client", "live-streams", "reconcile-every", "degraded-grace", "archive-every", "http-server"})},
		{[]string{"demo"}, concat(stores, logs, []string{"buyers", "concurrency", "stock", "limit", "pay-timeout", "room-ttl", "v"})},
		{[]string{"reconcile"}, concat(stores, []string{"db-schema", "key-prefix", "sale", "repair"})},
		{[]string{"token"}, []string{"jwt-secret", "user", "ttl", "count"}},
		{[]string{"draw"}, nil},
		{[]string{"draw", "verify"}, []string{"file"}},
		{[]string{"bench"}, []string{"cost", "quick", "json", "redis", "db", "concurrency", "stock", "duration", "only",
			"chart", "segments", "batch", "rounds"}},
		{[]string{"bench", "--cost"}, []string{"cost", "serve-bin", "against", "rounds", "conns", "duration", "open-rate",
			"open-fraction", "max-rate", "redis", "own-redis", "pg", "catch-up-timeout", "timeline", "json", "room", "room-waiting", "room-admitted", "room-read-rate", "room-buy-rate",
			"no-refs", "floor-bin", "seed-calls", "soak", "soak-window", "soak-buyers", "soak-early"}},
		{[]string{"bench", "--floor-serve=127.0.0.1:0"}, []string{"floor-serve"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			run(context.Background(), append(c.args, "-h"), func(string) string { return "" }, &out, &errOut)
			var got []string
			for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String()+errOut.String(), -1) {
				got = append(got, m[1])
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("-h lists %v\nwant %v\n%s", got, want, errOut.String())
			}
		})
	}
}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// TestDBSchemaFlag: --db-schema, or SECKILL_DB_SCHEMA, is the service's
// DatabaseSchema; the flag wins.
func TestDBSchemaFlag(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", nil, ""},
		{"from_env", nil, "from_env"},
		{"from_env", []string{"--db-schema", "from_flag"}, "from_flag"},
	} {
		fs := flag.NewFlagSet("seckill serve", flag.ContinueOnError)
		config := configFlags(fs, func(k string) string { return map[string]string{"SECKILL_DB_SCHEMA": c.env}[k] })
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if cfg, err := config(); err != nil || cfg.DatabaseSchema != c.want {
			t.Errorf("env %q, args %q: DatabaseSchema %q, %v; want %q", c.env, c.args, cfg.DatabaseSchema, err, c.want)
		}
	}
}

// TestDemoRefusesSQLiteFile: the demo does not leave its sale in an SQLite
// file it was given; it refuses, and creates no file.
func TestDemoRefusesSQLiteFile(t *testing.T) {
	url := dbtest.SQLiteURL(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--db", url}, func(string) string { return "" }, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "SQLite") {
		t.Errorf("demo --db %s: exit %d, stderr %q; want 2 and why", url, code, errOut.String())
	}
	if _, err := os.Stat(strings.TrimPrefix(url, "sqlite://")); !os.IsNotExist(err) {
		t.Errorf("the file was created: %v", err)
	}
}

// TestReconcileNeedsDatabase: reconcile does not open (and so create and
// migrate) ./seckill.db when no database is named; it refuses.
func TestReconcileNeedsDatabase(t *testing.T) {
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"reconcile", "--sale", "s", "--redis", "redis://127.0.0.1:1/0"},
		func(string) string { return "" }, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--db") {
		t.Errorf("reconcile without --db: exit %d, stderr %q; want 2 and why", code, errOut.String())
	}
	if _, err := os.Stat("seckill.db"); !os.IsNotExist(err) {
		t.Errorf("seckill.db: %v; want it not created", err)
	}
}
