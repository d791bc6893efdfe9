package cost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	httpbench "github.com/seckill/seckill/internal/bench/http"
	"github.com/seckill/seckill/internal/bench/http/loadgen"
)

// The references the performance targets are ratios of, measured in the
// same run as the builds, once per round:
//
//   - the floor: `<FloorBin> bench --floor-serve ADDR`, an HTTP server that
//     checks a buyer's token with the service's verifier and answers a
//     fixed order-shaped body, nothing else (service.NewFloorServer),
//     under the rounds' closed loop; its CPU from /proc/PID/stat, per 2xx
//     reply;
//   - the seeds' script (seed000.lua) under redis-benchmark on the run's
//     Redis, unpipelined (-c 50) and pipelined 16 deep (-c 50 -P 16); Redis's
//     CPU from INFO cpu, per EVALSHA call Redis counted.

// DefaultSeedCalls is the seeds' script's calls unpipelined, unless
// Config.SeedCalls says otherwise: about three seconds on a small machine.
const DefaultSeedCalls = 300_000

// Unpipelined and pipelined redis-benchmark runs of the seeds' script.
const (
	seedClients  = 50
	seedPipeline = 16
	// seedPipelinedShare: the pipelined run makes this many times the
	// unpipelined run's calls (it runs about twice as fast).
	seedPipelinedShare = 2
	// seedKeyspace is redis-benchmark's -r: every call's buyer a random
	// one of 10^8, as the seeds' measurements ran it.
	seedKeyspace = 100_000_000
	// seedStock never runs out.
	seedStock = 1_000_000_000_000
)

// floorRateBound is how many times --max-rate the floor's tokens last
// for: it serves several times the service's rate.
const floorRateBound = 4

// errNoRedisBenchmark: the seeds' script is not measured, the rest is.
var errNoRedisBenchmark = errors.New("redis-benchmark is not on PATH: the seeds' script was not measured (install the Redis tools, or give --no-refs)")

// measureRefs measures the floor and the seeds' script for round n and
// adds them to refs.
func (e *env) measureRefs(ctx context.Context, cfg *Config, n int, refs *References) error {
	f, err := e.measureFloor(ctx, cfg, n)
	if err != nil {
		return fmt.Errorf("the floor: %w", err)
	}
	refs.Floor = append(refs.Floor, f)
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "round %d floor: %.0f requests/s, %.1f µs/request\n", n, f.PerS, f.FloorUS)
	}
	return e.addSeed(ctx, cfg, n, refs)
}

// addSeed measures the seeds' script for round n and adds it to refs; a
// Redis redis-benchmark cannot run on (or no redis-benchmark) is one of
// refs' problems, not an error.
func (e *env) addSeed(ctx context.Context, cfg *Config, n int, refs *References) error {
	s, err := e.measureSeed(ctx, cfg, n)
	switch {
	case errors.Is(err, errNoRedisBenchmark) || errors.Is(err, errSeedOverTLS):
		if !slices.Contains(refs.Problems, err.Error()) {
			refs.Problems = append(refs.Problems, err.Error())
		}
		return nil
	case err != nil:
		return fmt.Errorf("the seeds' script: %w", err)
	}
	refs.Seed = append(refs.Seed, s)
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "round %d seeds' script: %.1f µs of Redis per call unpipelined, %.1f pipelined\n",
			n, s.Unpipelined.RedisUS, s.Pipelined.RedisUS)
	}
	return nil
}

// measureFloor starts the floor, loads it as a round loads a build (the
// closed loop of cfg.Conns for cfg.Duration, a buyer's token a request,
// the buy's path shape and body) and reads its CPU.
func (e *env) measureFloor(ctx context.Context, cfg *Config, n int) (res FloorResult, err error) {
	res.Round = n
	addr, err := freeAddr()
	if err != nil {
		return res, err
	}
	log := &tailBuffer{max: 8 << 10}
	cmd := exec.Command(cfg.FloorBin, "bench", "--floor-serve", addr)
	cmd.Env = append(withoutSeckill(os.Environ()), "SECKILL_JWT_SECRET="+e.secret)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s bench --floor-serve: %w", cfg.FloorBin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if err == nil && !cmd.ProcessState.Success() {
			err = fmt.Errorf("%s bench --floor-serve ended %v:\n%s", cfg.FloorBin, cmd.ProcessState, log.String())
		}
	}()
	base := "http://" + addr
	if err := waitFloor(ctx, base, exited); err != nil {
		return res, fmt.Errorf("%s bench --floor-serve: %w\n%s", cfg.FloorBin, err, log.String())
	}

	quietGenerator()
	before, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		return res, fmt.Errorf("read the floor's CPU: %w", err)
	}
	rep := loadgen.Closed{Method: http.MethodPost, URL: base + "/v1/sales/" + saleID + "/orders", Body: []byte(buyBody),
		Header: http.Header{"Content-Type": {"application/json"}}, Tokens: e.floorTokens(cfg),
		Conns: cfg.Conns, Duration: cfg.Duration, Timeout: 30 * time.Second}.Run(ctx)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	after, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		return res, fmt.Errorf("read the floor's CPU (did it exit?): %w\n%s", err, log.String())
	}
	res.Sent, res.Requests, res.Non2xx, res.Errors = rep.Sent, rep.Status2xx, rep.Non2xx, rep.Errors
	res.DurationS, res.PerS = rep.DurationS, rep.Rate2xx
	res.P50MS, res.P99MS = rep.LatencyMS.P50, rep.LatencyMS.P99
	res.FloorUS = perBuy(ticksToMicros(after.Ticks-before.Ticks), res.Requests)
	if res.Non2xx > 0 || res.Errors > 0 {
		res.Problems = append(res.Problems, outcome(rep))
	}
	if rep.OutOfTokens {
		res.Problems = append(res.Problems, "ran out of pre-signed tokens before --duration: raise --max-rate")
	}
	return res, nil
}

// floorTokens are the floor's requests' tokens: the run's, in order, and
// round again when the floor needs more (up to floorRateBound × --max-rate
// for --duration). The floor keeps nothing of a token it checked, so one
// it saw seconds before costs it what a fresh one would.
func (e *env) floorTokens(cfg *Config) []string {
	if e.floor == nil {
		e.floor = e.tokens
		if n := int(cfg.Duration.Seconds()*cfg.MaxRate*floorRateBound) + cfg.Conns; n > len(e.tokens) && len(e.tokens) > 0 {
			e.floor = cycle(e.tokens, n)
		}
	}
	return e.floor
}

// waitFloor polls the floor until it answers a request without a token
// with 401, or it exits.
func waitFloor(ctx context.Context, base string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-exited:
			return errors.New("exited before it served")
		default:
		}
		if resp, err := client.Get(base + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			return fmt.Errorf("a request without a token answered %d, not 401: is it the floor?", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return errors.New("not serving after 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errSeedOverTLS: redis-benchmark is not run over TLS here.
var errSeedOverTLS = errors.New("the Redis is reached over TLS: the seeds' script was not measured (redis-benchmark runs here without TLS)")

// measureSeed runs the seeds' script under redis-benchmark on the run's
// Redis, with keys of the round's own, removed at its end.
func (e *env) measureSeed(ctx context.Context, cfg *Config, n int) (res SeedResult, err error) {
	res.Round = n
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return res, errNoRedisBenchmark
	}
	opt := e.redis.Options()
	if opt.TLSConfig != nil {
		return res, errSeedOverTLS
	}
	res.KeyPrefix = fmt.Sprintf("costbench-%sr%dseed", e.runID, n)
	stock, bought := "{"+res.KeyPrefix+"}:stock", "{"+res.KeyPrefix+"}:bought"
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if uerr := e.redis.Unlink(cctx, stock, bought).Err(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("remove keys %s, %s: %w", stock, bought, uerr))
			return
		}
		waitLazyFree(cctx, e.redis)
	}()
	sha, err := e.redis.ScriptLoad(ctx, httpbench.SeedScript).Result()
	if err != nil {
		return res, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	if err := e.redis.Set(ctx, stock, seedStock, 0).Err(); err != nil {
		return res, err
	}
	// One call through the client first: a script that does not answer as
	// the seeds' does is an error, not figures.
	if left, err := e.redis.EvalSha(ctx, sha, []string{stock, bought}, 1, "probe").Int64(); err != nil || left != seedStock-1 {
		return res, fmt.Errorf("the script answered %d, %v; want %d", left, err, int64(seedStock-1))
	}
	args := redisBenchmarkTarget(opt)
	calls := cfg.SeedCalls
	if calls <= 0 {
		calls = DefaultSeedCalls
	}
	if res.Unpipelined, err = e.runSeed(ctx, bin, args, calls, 1, sha, stock, bought); err != nil {
		return res, err
	}
	if res.Pipelined, err = e.runSeed(ctx, bin, args, calls*seedPipelinedShare, seedPipeline, sha, stock, bought); err != nil {
		return res, err
	}
	return res, nil
}

// waitLazyFree waits, for up to 10 s, until Redis has freed what UNLINK
// left to its background thread (INFO memory's lazyfree_pending_objects),
// so that freeing the set of a million buyers does not count in the next
// measurement's CPU. A Redis that does not say returns at once.
func waitLazyFree(ctx context.Context, c *redis.Client) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return
		}
		_, rest, ok := strings.Cut(info, "lazyfree_pending_objects:")
		if !ok {
			return
		}
		if n, _, _ := strings.Cut(rest, "\r\n"); strings.TrimSpace(n) == "0" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runSeed runs redis-benchmark once: calls EVALSHA calls of the seeds'
// script from seedClients connections, pipeline deep, each by a random
// buyer, inside a window of Redis's counters.
func (e *env) runSeed(ctx context.Context, bin string, target []string, calls, pipeline int, sha, stock, bought string) (SeedRun, error) {
	run := SeedRun{Clients: seedClients, Pipeline: pipeline}
	args := append(append([]string{}, target...), "-c", strconv.Itoa(seedClients), "-P", strconv.Itoa(pipeline),
		"-n", strconv.Itoa(calls), "-r", strconv.Itoa(seedKeyspace), "-q",
		"EVALSHA", sha, "2", stock, bought, "1", "__rand_int__")
	log := &tailBuffer{max: 4 << 10}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	before, err := readRedisStats(ctx, e.redis)
	if err != nil {
		return run, err
	}
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		return run, ctx.Err()
	}
	if err != nil {
		return run, fmt.Errorf("redis-benchmark -P %d: %w\n%s", pipeline, err, log.String())
	}
	after, err := readRedisStats(ctx, e.redis)
	if err != nil {
		return run, err
	}
	d := after.sub(before)
	run.Calls = d.EvalshaCalls
	if run.Calls < int64(calls) {
		return run, fmt.Errorf("redis-benchmark -P %d: Redis counted %d EVALSHA calls of %d sent:\n%s", pipeline, run.Calls, calls, log.String())
	}
	run.DurationS = took.Seconds()
	run.CallsPerS = float64(run.Calls) / run.DurationS
	run.RedisUS = d.CPUMicros / float64(run.Calls)
	run.EvalshaUS = float64(d.EvalshaMicros) / float64(run.Calls)
	return run, nil
}

// redisBenchmarkTarget is redis-benchmark's options naming the Redis of
// opt: its address (or socket), user, password and database. (A password
// is an argument: redis-benchmark reads it from nowhere else.)
func redisBenchmarkTarget(opt *redis.Options) []string {
	var args []string
	if opt.Network == "unix" {
		args = append(args, "-s", opt.Addr)
	} else {
		host, port, err := net.SplitHostPort(opt.Addr)
		if err != nil {
			host, port = opt.Addr, "6379"
		}
		args = append(args, "-h", host, "-p", port)
	}
	if opt.Password != "" {
		args = append(args, "-a", opt.Password)
		if opt.Username != "" {
			args = append(args, "--user", opt.Username)
		}
	}
	if opt.DB != 0 {
		args = append(args, "--dbnum", strconv.Itoa(opt.DB))
	}
	return args
}
