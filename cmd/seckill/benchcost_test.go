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

	expectCleanedUp(t, redisURL, pgURL, r.Database, r.KeyPrefix)
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

// TestBenchCostRoom runs `seckill bench --cost --room` for a second per
// phase of light load against the real servers: every phase is measured
// with its figures, every accepted buy is an order, the ratios are there,
// and the run's database and keys are gone afterwards. It skips while the
// service has no waiting rooms (ErrNoRooms), and runs once it has.
func TestBenchCostRoom(t *testing.T) {
	redisURL, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--room", "--json", "--serve-bin", bin,
		"--duration", "1s", "--conns", "4", "--max-rate", "20000", "--room-waiting", "2000", "--room-admitted", "300",
		"--room-read-rate", "200", "--room-buy-rate", "300", "--redis", redisURL, "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	if code != 0 && strings.Contains(stderr.String(), cost.ErrNoRooms.Error()) {
		t.Skipf("the service has no waiting rooms yet: %s", strings.TrimSpace(stderr.String()))
	}
	var rep cost.RoomReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %v; stderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	want := []string{cost.PhasePlainBuys, cost.PhaseJoins, cost.PhasePlaceReads, cost.PhaseAdmittedBuys,
		cost.PhaseAdmittedBuysLoaded, cost.PhasePlainBuysLoaded, cost.PhaseAdmittedBuysOpen, cost.PhasePlainBuysOpen}
	if len(rep.Phases) != len(want) {
		t.Fatalf("%d phases, want %d: %+v", len(rep.Phases), len(want), rep.Phases)
	}
	for i, p := range rep.Phases {
		if p.Phase != want[i] {
			t.Errorf("phase %d is %s, want %s", i+1, p.Phase, want[i])
		}
		for name, v := range map[string]float64{"2xx": float64(p.Buys), "req/s": p.BuysPerS, "service µs": p.ServiceUS,
			"Redis µs": p.RedisUS, "p50": p.P50MS, "p99": p.P99MS} {
			if !(v > 0) {
				t.Errorf("%s: %s = %v, want > 0", p.Phase, name, v)
			}
		}
		if p.Non2xx != 0 || p.Errors != 0 || len(p.Problems) != 0 {
			t.Errorf("%s: %d non-2xx, %d errors, problems %q; want none", p.Phase, p.Non2xx, p.Errors, p.Problems)
		}
		orders := 0 // joins and reads make none
		if p.Sells() {
			orders = p.Buys
		}
		if p.OrdersInDB != orders {
			t.Errorf("%s: %d orders for %d 2xx, want %d", p.Phase, p.OrdersInDB, p.Buys, orders)
		}
		if (p.Phase == cost.PhaseAdmittedBuys || p.Phase == cost.PhaseAdmittedBuysLoaded) && p.Buys > 300 {
			t.Errorf("%s: %d buys by 300 admitted buyers", p.Phase, p.Buys)
		}
		loaded := p.Phase == cost.PhaseAdmittedBuysLoaded || p.Phase == cost.PhasePlainBuysLoaded ||
			p.Phase == cost.PhaseAdmittedBuysOpen || p.Phase == cost.PhasePlainBuysOpen
		if b := p.Background; loaded != (b != nil) || (b != nil && (b.Status2xx == 0 || b.Non2xx != 0 || b.RoomWaiting < 2000)) {
			t.Errorf("%s: background %+v; want reads of a room of 2000 waiting or more, all 2xx, beside the loaded phases only", p.Phase, b)
		}
	}
	if len(rep.Ratios) < 4 {
		t.Fatalf("ratios %+v, want the four targets' first", rep.Ratios)
	}
	for _, r := range rep.Ratios[:4] {
		if !(r.Value > 0) || r.Met == nil {
			t.Errorf("ratio %s = %v, met %v; want a value, judged", r.Name, r.Value, r.Met)
		}
	}
	expectCleanedUp(t, redisURL, pgURL, rep.Database, rep.KeyPrefix)
}

// expectCleanedUp fails t if database db or a key of prefix is left.
func expectCleanedUp(t *testing.T, redisURL, pgURL, db, prefix string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dbs int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&dbs); err != nil || dbs != 0 || db == "" {
		t.Errorf("database %q: %d left, %v; want it dropped", db, dbs, err)
	}
	opt, _ := redis.ParseURL(redisURL)
	c := redis.NewClient(opt)
	defer c.Close()
	for _, pattern := range []string{"{" + prefix + ":*", prefix + ":*"} {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) != 0 || prefix == "" {
			t.Errorf("keys %s: %d left (%q), %v; want none", pattern, len(keys), keys[:min(len(keys), 3)], err)
		}
	}
}
