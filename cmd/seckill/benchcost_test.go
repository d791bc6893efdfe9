//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/cmd/seckill/cost"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
)

// realServers returns the machine's Redis and PostgreSQL the tests use, or
// skips when either does not answer and $CI is not "true" (in CI their
// absence is a failure).
func realServers(t *testing.T) (redisURL, pgURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	redisURL, pgURL = redistest.URL(), dbtest.ServerURL()
	absent := func(what string, err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s does not answer: %v", what, err)
		}
		t.Skipf("%s does not answer (%v): this test needs a real Redis and PostgreSQL", what, err)
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		absent("Redis "+redisURL, err)
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		absent("PostgreSQL", err)
	}
	conn.Close(ctx)
	return redisURL, pgURL
}

// TestBenchCost runs `seckill bench --cost` for a second of light load
// against the real servers: every figure is there and positive, every
// accepted buy is an order in the database, and the round's database and
// keys are gone afterwards.
func TestBenchCost(t *testing.T) {
	redisURL, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--json", "--serve-bin", bin,
		"--duration", "1s", "--conns", "4", "--max-rate", "20000", "--redis", redisURL, "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	var rep cost.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %v; stderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	if len(rep.Results) != 1 || len(rep.Medians) != 1 {
		t.Fatalf("%d rounds, %d medians; want 1, 1", len(rep.Results), len(rep.Medians))
	}
	r := rep.Results[0]
	for name, v := range map[string]float64{"buys": float64(r.Buys), "buys/s": r.BuysPerS,
		"service µs/buy": r.ServiceUS, "Redis µs/buy": r.RedisUS, "PostgreSQL µs/buy": r.PostgresUS,
		"PostgreSQL (all) µs/buy": r.PostgresAllUS, "EVALSHA calls": float64(r.EvalshaCalls),
		"buys per EVALSHA": r.BuysPerEvalsha, "p50": r.P50MS, "p99": r.P99MS} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if r.TotalUS != r.ServiceUS+r.RedisUS+r.PostgresUS {
		t.Errorf("total %v µs/buy, want service + Redis + PostgreSQL = %v", r.TotalUS, r.ServiceUS+r.RedisUS+r.PostgresUS)
	}
	if r.OrdersInDB != r.Buys || r.Non2xx != 0 || r.Errors != 0 || len(r.Problems) != 0 {
		t.Errorf("%d orders in the database for %d accepted buys, %d non-2xx, %d errors, problems %q; want every buy an order and no failure",
			r.OrdersInDB, r.Buys, r.Non2xx, r.Errors, r.Problems)
	}

	// Nothing left behind.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dbs int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", r.Database).Scan(&dbs); err != nil || dbs != 0 || r.Database == "" {
		t.Errorf("database %q: %d left, %v; want it dropped", r.Database, dbs, err)
	}
	opt, _ := redis.ParseURL(redisURL)
	c := redis.NewClient(opt)
	defer c.Close()
	for _, pattern := range []string{"{" + r.KeyPrefix + ":*", r.KeyPrefix + ":*"} {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) != 0 || r.KeyPrefix == "" {
			t.Errorf("keys %s: %d left (%q), %v; want none", pattern, len(keys), keys[:min(len(keys), 3)], err)
		}
	}
	if !strings.Contains(stderr.String(), "round 1 build A") {
		t.Errorf("no progress line on stderr: %q", stderr.String())
	}
}

// TestBenchCostOwnRedisByDefault: without --redis, --cost measures on a
// redis-server of its own, not on a Redis nobody named; --redis and
// --own-redis together are refused.
func TestBenchCostOwnRedisByDefault(t *testing.T) {
	_, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--json", "--serve-bin", bin,
		"--duration", "1s", "--conns", "4", "--max-rate", "20000", "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	var rep cost.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %v; stderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	if !strings.HasPrefix(rep.Redis, "a redis-server of this run's own at 127.0.0.1:") || strings.HasSuffix(rep.Redis, ":6379") {
		t.Errorf("measured on Redis %q, want one of the run's own", rep.Redis)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"bench", "--cost", "--redis", "redis://127.0.0.1:6379/0", "--own-redis"},
		os.Getenv, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--own-redis") {
		t.Errorf("--redis with --own-redis: exit %d, %q; want 2 and why", code, stderr.String())
	}
}
