//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/cmd/seckill/cost"
	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
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
// accepted buy is an order in the database, the references (the floor and,
// with redis-benchmark, the seeds' script) are measured with the targets'
// ratios, and the round's database and keys are gone afterwards.
func TestBenchCost(t *testing.T) {
	redisURL, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--json", "--serve-bin", bin, "--floor-bin", bin, "--seed-calls", "5000",
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
	if !strings.Contains(stderr.String(), "round 1 build A") || !strings.Contains(stderr.String(), "round 1 floor") {
		t.Errorf("no progress lines on stderr: %q", stderr.String())
	}

	refs := rep.Refs
	if refs == nil || len(refs.Floor) != 1 || refs.FloorMedian == nil {
		t.Fatalf("references %+v, want the floor of one round", refs)
	}
	if f := refs.Floor[0]; !(f.Requests > 0) || !(f.FloorUS > 0) || !(f.PerS > 0) || f.Non2xx != 0 || f.Errors != 0 || len(f.Problems) != 0 {
		t.Errorf("floor %+v, want 2xx replies only and its µs per request", f)
	}
	_, noBenchmark := exec.LookPath("redis-benchmark")
	if noBenchmark == nil {
		if len(refs.Seed) != 1 || !(refs.Seed[0].Pipelined.RedisUS > 0) || !(refs.Seed[0].Unpipelined.RedisUS > 0) || len(refs.Problems) != 0 {
			t.Fatalf("seeds' script %+v, problems %q; want one round measured", refs.Seed, refs.Problems)
		}
		expectNoKeys(t, redisURL, "{"+refs.Seed[0].KeyPrefix+"}:*")
	} else if len(refs.Seed) != 0 || len(refs.Problems) != 1 || !strings.Contains(refs.Problems[0], "redis-benchmark is not on PATH") {
		t.Errorf("no redis-benchmark: seed %+v, problems %q; want none and the problem", refs.Seed, refs.Problems)
	}
	if len(refs.Ratios) != 3 {
		t.Fatalf("ratios %+v, want three of build A", refs.Ratios)
	}
	for _, ratio := range refs.Ratios {
		measured := ratio.Name == cost.RatioServiceFloor || noBenchmark == nil
		if (ratio.Value > 0) != measured || (ratio.Met != nil) != (measured && ratio.Target != "") {
			t.Errorf("ratio %+v: want a value (and, with a target, a verdict) when its reference was measured", ratio)
		}
	}
}

// TestBenchCostFloorServe runs the floor's mode in this process, as bench
// --cost starts it: it refuses a request without a valid buyer's token
// (401) and answers one with a token signed with SECKILL_JWT_SECRET 201 and
// its fixed body, and ends at SIGTERM (its context) with 0. Without a
// secret it does not start.
func TestBenchCostFloorServe(t *testing.T) {
	const secret = "floor-serve-secret"
	addr := freeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	getenv := func(k string) string {
		if k == "SECKILL_JWT_SECRET" {
			return secret
		}
		return os.Getenv(k)
	}
	go func() { done <- run(ctx, []string{"bench", "--floor-serve", addr}, getenv, &stdout, &stderr) }()

	buy := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/sales/cost/orders", strings.NewReader(`{"items":[{"sku":"A","qty":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, string(body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the floor does not answer: %v; stderr %q", err, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	good, err := service.SignUser(secret, "b1", jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	other, err := service.SignUser("another-secret", "b1", jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"", other, "not-a-jwt"} {
		if status, body := buy(token); status != http.StatusUnauthorized {
			t.Errorf("token %.20q: %d %s, want 401", token, status, body)
		}
	}
	if status, body := buy(good); status != http.StatusCreated || !strings.HasPrefix(body, `{"order_id":"floor.`) {
		t.Errorf("a buyer's token: %d %s, want 201 and the floor's order", status, body)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 || stdout.Len() != 0 || stderr.Len() != 0 {
			t.Errorf("exit %d, stdout %q, stderr %q; want 0 and nothing printed", code, stdout.String(), stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the floor did not stop at its context's end")
	}

	stderr.Reset()
	if code := run(context.Background(), []string{"bench", "--floor-serve", addr}, func(string) string { return "" }, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "SECKILL_JWT_SECRET") {
		t.Errorf("without a secret: exit %d, %q; want 2 and why", code, stderr.String())
	}
}

// TestBenchCostOwnRedisByDefault: without --redis, --cost measures on a
// redis-server of its own, not on a Redis nobody named; --redis and
// --own-redis together are refused.
func TestBenchCostOwnRedisByDefault(t *testing.T) {
	_, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--json", "--serve-bin", bin, "--no-refs",
		"--duration", "1s", "--conns", "4", "--max-rate", "20000", "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	var rep cost.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %v; stderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	if rep.Refs != nil || strings.Contains(stderr.String(), "floor") {
		t.Errorf("--no-refs: references %+v measured; stderr %q", rep.Refs, stderr.String())
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

// TestBenchCostSoak runs `seckill bench --cost --soak` for two short
// windows against the real servers: both are measured with their figures,
// every accepted buy is an order, the sale reconciles, the last window is
// compared with the first, and the run's database and keys are gone
// afterwards. Whether two-second windows on a shared machine are flat is
// not asserted (the exit status says it); misused flags are refused.
func TestBenchCostSoak(t *testing.T) {
	redisURL, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--soak", "4s", "--soak-window", "2s", "--soak-buyers", "500",
		"--soak-early", "1", "--json", "--serve-bin", bin, "--duration", "1s", "--conns", "4", "--open-fraction", "0.3",
		"--redis", redisURL, "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	var rep struct {
		cost.SoakReport
		Passed bool `json:"passed"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code > 1 || (code == 0) != rep.Passed {
		t.Fatalf("exit %d, report %v (passed %v); stderr:\n%s\nstdout:\n%s", code, err, rep.Passed, stderr.String(), stdout.String())
	}
	if len(rep.Windows) != 2 || rep.Flat == nil || rep.Flat.Early != 1 || rep.Flat.Last != 2 {
		t.Fatalf("%d windows, flat %+v; want 2, window 2 against 1", len(rep.Windows), rep.Flat)
	}
	orders := 0
	for _, w := range rep.Windows {
		orders += w.Buys
		for name, v := range map[string]float64{"buys": float64(w.Buys), "p99": w.P99MS, "service µs": w.ServiceUS,
			"Redis µs": w.RedisUS, "RSS": float64(w.ServiceRSS), "B/order": w.BytesPerOrder} {
			if !(v > 0) {
				t.Errorf("window %d: %s = %v, want > 0", w.N, name, v)
			}
		}
		if w.LiveOrders <= orders || w.DistinctBuyers > 500 {
			t.Errorf("window %d: %d live orders (the windows' %d and the closed loop's), %d buyers of 500", w.N, w.LiveOrders, orders, w.DistinctBuyers)
		}
	}
	if rep.Accepted != rep.Windows[1].LiveOrders || rep.OrdersInDB != rep.Accepted || !rep.Consistent || len(rep.Problems) != 0 {
		t.Errorf("accepted %d, in the database %d, consistent %v, problems %q; want all in, consistent, none",
			rep.Accepted, rep.OrdersInDB, rep.Consistent, rep.Problems)
	}
	expectCleanedUp(t, redisURL, pgURL, rep.Database, rep.KeyPrefix)
	for _, args := range [][]string{{"--soak", "1m", "--room"}, {"--soak", "1m", "--soak-window", "2m"}, {"--soak", "1m", "--soak-buyers", "0"}} {
		stderr.Reset()
		if code := run(context.Background(), append([]string{"bench", "--cost"}, args...), os.Getenv, io.Discard, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), "--soak") {
			t.Errorf("%q: exit %d, %q; want 2 and why", args, code, stderr.String())
		}
	}
}

// expectNoKeys fails t if a key matching pattern is left.
func expectNoKeys(t *testing.T, redisURL, pattern string) {
	t.Helper()
	opt, _ := redis.ParseURL(redisURL)
	c := redis.NewClient(opt)
	defer c.Close()
	var keys []string
	iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) != 0 {
		t.Errorf("keys %s: %q left, %v; want none", pattern, keys, err)
	}
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

// TestBenchCostOpenFraction: with --open-fraction each round's closed loop,
// which sets the open loop's rate, is measured as well (its own window,
// CPU per buy of its own), and the open loop's total is given over it.
func TestBenchCostOpenFraction(t *testing.T) {
	_, pgURL := realServers(t)
	bin := seckillBinary(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench", "--cost", "--json", "--serve-bin", bin, "--no-refs",
		"--duration", "1s", "--conns", "4", "--max-rate", "20000", "--open-fraction", "0.5", "--pg", pgURL}, os.Getenv, &stdout, &stderr)
	var rep cost.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, report %v; stderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d rounds, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	c := r.Closed
	if r.Load != "open" || c == nil || c.Load != "closed" || c.Buys <= 0 || c.ServiceUS <= 0 || c.RedisUS <= 0 || c.TotalUS <= 0 {
		t.Fatalf("open loop %s, its closed loop %+v: want one measured, with buys and CPU per buy", r.Load, c)
	}
	if r.RateAsked < 0.45*c.BuysPerS || r.RateAsked > 0.55*c.BuysPerS {
		t.Errorf("open loop asked %.0f/s, its closed loop sold %.0f/s: want half", r.RateAsked, c.BuysPerS)
	}
	if r.ClosedTotalUS != c.TotalUS || math.Abs(r.OpenOverClosed-r.TotalUS/c.TotalUS) > 1e-9 {
		t.Errorf("closed µs %.2f, open/closed %.3f; want %.2f and %.3f", r.ClosedTotalUS, r.OpenOverClosed, c.TotalUS, r.TotalUS/c.TotalUS)
	}
	if r.OrdersInDB != r.Buys {
		t.Errorf("orders in the database %d, open-loop buys %d", r.OrdersInDB, r.Buys)
	}
}
