package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/seckill/seckill/cmd/seckill/cost"
)

// costMode reports whether bench's arguments ask for --cost (before any
// "--").
func costMode(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-cost", "--cost", "-cost=true", "--cost=true":
			return true
		}
	}
	return false
}

const costUsage = `usage: seckill bench --cost [flags]

Measures what one buy through the HTTP API costs: CPU µs per accepted buy of
the service process (/proc/PID/stat), of Redis (INFO cpu) and of PostgreSQL
(its processes in /proc), with buys/s, p50/p99 latency, Redis's EVALSHA calls,
every Redis command's calls and usec per buy (INFO commandstats deltas) and
the bytes Redis read and wrote per buy, the order consumer's catch-up, and the
machine's idle and stolen time (/proc/stat) over the same window. Each round
starts "<bin> serve" with a database of its own on the PostgreSQL --pg names
and a key prefix of its own on Redis (both removed at its end, Ctrl-C
included), creates a sale of per-user limit 1 and stock far above what
sells, and loads it from this process with a fresh buyer (own JWT) per
request. The Redis is a redis-server this run starts and stops, unless
--redis names a real one. --against B runs rounds of A and B alternately and
prints their medians and B/A.

In the same run, once per round (before the builds in odd rounds, after
them in even ones), it measures the two references the performance targets
are ratios of, and prints each build's ratios to their medians:
  the floor             an HTTP server that does only what every buy must:
                        check the buyer's token with the service's verifier
                        and answer a fixed JSON body (no Redis, no database),
                        a process of its own ("<floor-bin> bench
                        --floor-serve ADDR", this benchmark's internal
                        reference, not for use by hand), under the same
                        closed loop; CPU µs per request
  the seeds' script     seed000.lua (SISMEMBER, GET, DECRBY, SADD) under
                        redis-benchmark on the same Redis, -c 50 and
                        -c 50 -P 16; Redis's CPU µs per call (skipped, and
                        said so, when redis-benchmark is not on PATH)
and the targets: the service's µs per buy at most 2× the floor's per
request, Redis's µs per buy at most 1× the seeds' script's per pipelined
call (the unpipelined ratio is shown too). --no-refs skips them; they are
not measured under an open loop, nor by --room.

--room measures the waiting room instead (the admission API of 2026-11-28),
in ONE "<bin> serve", side by side, per pass (--rounds passes), each phase a
closed loop of --conns for --duration with CPU µs per 2xx reply (service,
Redis, PostgreSQL), requests/s and p50/p99:
  plain-buys            buys of a sale without a room (the load above)
  joins                 POST /v1/sales/{sale}/queue, a fresh buyer each, on a
                        room already holding --room-waiting buyers
  place-reads           GET /v1/sales/{sale}/queue of the buyers who joined
  admitted-buys         buys, with their X-Purchase-Token, of --room-admitted
                        buyers a room admitted before the load
  admitted-buys-loaded  the same, while place reads run at --room-read-rate
                        per second (an open loop) on the joins' room
  plain-buys-loaded     plain buys while the same background runs
and, with --room-buy-rate, admitted-buys-open and plain-buys-open (open loops
at that rate beside the same background); each phase's sale is closed once
measured. Then the ratios the room's targets name: joins/s ÷ plain buys/s
(>= 1), place-read CPU ÷ plain buy CPU (< 1), admitted-buy p99 ÷ plain buy
p99 with the same reads beside both, closed loops and open (<= 1.2 each),
and the ratios that explain them. Its sales, keys and database are removed
at its end like a round's.

--soak D measures whether a buy's cost stays flat over time instead: one
"<bin> serve", one sale (a per-user limit above what any buyer buys), a
closed loop of --duration to find its rate, then an open loop at
--open-fraction (default 0.8) of that rate for D, cycling through
--soak-buyers distinct buyers, sampled every --soak-window: buys/s,
p50/p99, CPU µs per buy (service, Redis, PostgreSQL), the service's RSS and
Redis's bytes per live order. After the load, every accepted order must be
in the database and the sale's reconciliation consistent; the last window's
RSS, bytes per order and p99 must each be within ±10% of window
--soak-early's. Exit status 0 only when all of that holds.

flags:
`

// runBenchCost runs `seckill bench --cost`. Exit status: 0 measured, 1 a
// failure (a round failed, or an accepted buy is missing from the
// database), 2 usage.
func runBenchCost(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill bench --cost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, costUsage)
		fs.PrintDefaults()
	}
	fs.Bool("cost", true, "this mode")
	serveBin := fs.String("serve-bin", "", "the seckill binary whose serve is measured, build A (default: this one)")
	against := fs.String("against", "", "a second seckill binary, build B, measured in alternate rounds with A")
	rounds := fs.Int("rounds", 1, "rounds per build (alternating A, B, A, B ...)")
	conns := fs.Int("conns", 128, "connections of the closed loop (at most, of the open loop)")
	duration := fs.Duration("duration", 10*time.Second, "how long each round's load runs")
	openRate := fs.Float64("open-rate", 0, "measure an open loop at this many requests/s instead of the closed loop; latencies from each request's scheduled send time")
	openFraction := fs.Float64("open-fraction", 0, "like --open-rate at this fraction (0..1] of the round's own closed-loop buys/s, measured first in the same round (its CPU per buy too: the table's closed µs and open/closed)")
	maxRate := fs.Float64("max-rate", 50000, "buys/s the pre-signed tokens (one per buyer) must last for in the closed loop (a round that runs out says so)")
	redisURL := fs.String("redis", "", "URL of a real Redis to measure on instead of one of this run's own (its CPU is measured; the run's keys carry a prefix of their own and are removed at its end)")
	ownRedis := fs.Bool("own-redis", false, "start a redis-server of this run's own on a free loopback port (needs redis-server on PATH): the default unless --redis is given; its CPU and commandstats then count only this run")
	pgURL := fs.String("pg", "postgres://postgres@127.0.0.1:5432/postgres", "PostgreSQL server URL; each round creates and drops a database there")
	catchUp := fs.Duration("catch-up-timeout", 2*time.Minute, "how long the database may take to hold every accepted order after the load")
	timeline := fs.String("timeline", "", "an existing directory: each open-loop round writes there one CSV line per request (scheduled send as Unix ms, send lag, latency, status), named after the round")
	asJSON := fs.Bool("json", false, "print the results as one JSON document instead of a table")
	noRefs := fs.Bool("no-refs", false, "do not measure the references (the floor and the seeds' script) nor print the targets' ratios")
	floorBin := fs.String("floor-bin", "", "the seckill binary whose \"bench --floor-serve\" is the floor (default: this one)")
	seedCalls := fs.Int("seed-calls", cost.DefaultSeedCalls, "EVALSHA calls of the seeds' script unpipelined (-c 50); pipelined (-P 16), twice as many")
	room := fs.Bool("room", false, "measure the waiting room's phases side by side in one serve (see above) instead of rounds of builds")
	roomWaiting := fs.Int("room-waiting", 100_000, "--room: buyers joined to the joins' room before its joins are measured (the room the place reads meet; 1000000 for a full one)")
	roomAdmitted := fs.Int("room-admitted", 100_000, "--room: admitted buyers of each admitted-buy phase (its load ends when they have all bought)")
	roomReadRate := fs.Float64("room-read-rate", 10_000, "--room: place reads per second of the background during the loaded phases (0: none)")
	soak := fs.Duration("soak", 0, "run one open loop this long instead of rounds (see above)")
	soakWindow := fs.Duration("soak-window", time.Minute, "--soak: one sample's window")
	soakBuyers := fs.Int("soak-buyers", 1_200_000, "--soak: distinct buyers the load cycles through")
	soakEarly := fs.Int("soak-early", 5, "--soak: the window (1-based) the last one is compared with")
	roomBuyRate := fs.Float64("room-buy-rate", 2_000, "--room: buys per second of the open phases (admitted buys and plain buys, each an open loop beside the background reads; 0: none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "seckill bench --cost: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case *redisURL != "" && *ownRedis:
		return usage("--redis names a Redis and --own-redis starts one: give one of them")
	case *rounds < 1 || *rounds > 100:
		return usage("--rounds must be 1..100")
	case *conns < 1 || *conns > 10_000:
		return usage("--conns must be 1..10000")
	case *duration <= 0:
		return usage("--duration must be positive")
	case *openRate < 0 || *openFraction < 0 || *openFraction > 1 || (*openRate > 0 && *openFraction > 0):
		return usage("--open-rate must be > 0 or --open-fraction in (0, 1], not both")
	case *maxRate <= 0 || *maxRate > 1_000_000:
		return usage("--max-rate must be 1..1000000")
	case *catchUp <= 0:
		return usage("--catch-up-timeout must be positive")
	case *seedCalls < 1 || *seedCalls > 100_000_000:
		return usage("--seed-calls must be 1..100000000")
	case *room && (*against != "" || *openRate > 0 || *openFraction > 0 || *timeline != ""):
		return usage("--room measures one build in closed loops: not with --against, --open-rate, --open-fraction or --timeline")
	case *soak < 0 || (*soak > 0 && (*room || *against != "" || *openRate > 0 || *timeline != "")):
		return usage("--soak runs one build in an open loop at --open-fraction of its closed loop: not with --room, --against, --open-rate or --timeline")
	case *soak > 0 && (*soakWindow <= 0 || *soakWindow > *soak):
		return usage("--soak-window must be positive and at most --soak")
	case *soak > 0 && (*soakBuyers < 1 || *soakBuyers > 10_000_000):
		return usage("--soak-buyers must be 1..10000000")
	case *soak > 0 && *soakEarly < 1:
		return usage("--soak-early must be 1 or more")
	case *room && (*roomWaiting < 0 || *roomWaiting > 10_000_000):
		return usage("--room-waiting must be 0..10000000")
	case *room && (*roomAdmitted < 1 || *roomAdmitted > 10_000_000):
		return usage("--room-admitted must be 1..10000000")
	case *room && (*roomBuyRate < 0 || *roomBuyRate > 1_000_000):
		return usage("--room-buy-rate must be 0..1000000")
	case *room && (*roomReadRate < 0 || *roomReadRate > 1_000_000):
		return usage("--room-read-rate must be 0..1000000")
	}
	self := func(flag string) (string, bool) {
		bin, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "seckill bench --cost: cannot find this binary (name one with %s): %v\n", flag, err)
			return "", false
		}
		return bin, true
	}
	a := *serveBin
	if a == "" {
		var ok bool
		if a, ok = self("--serve-bin"); !ok {
			return 1
		}
	}
	builds := []string{a}
	if *against != "" {
		builds = append(builds, *against)
	}
	refs := !*noRefs && !*room && *soak == 0
	floor := *floorBin
	if refs && floor == "" {
		var ok bool
		if floor, ok = self("--floor-bin"); !ok {
			return 1
		}
	}
	bins := builds
	if refs {
		bins = append(slices.Clip(bins), floor)
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			return usage("%s is not an executable: %v", b, err)
		}
	}
	// A Redis of its own unless one is named: never one nobody named.
	cfg := cost.Config{Builds: builds, RedisURL: *redisURL, OwnRedis: *redisURL == "", PostgresURL: *pgURL, Conns: *conns,
		Duration: *duration, Rounds: *rounds, OpenRate: *openRate, OpenFraction: *openFraction,
		MaxRate: *maxRate, CatchUpTimeout: *catchUp, TimelineDir: *timeline, Progress: stderr,
		Refs: refs, FloorBin: floor, SeedCalls: *seedCalls}
	if *room {
		cfg.Room = &cost.RoomConfig{Waiting: *roomWaiting, Admitted: *roomAdmitted, ReadRate: *roomReadRate, BuyRate: *roomBuyRate}
		return runRoomCost(ctx, cfg, *asJSON, stdout, stderr)
	}
	if *soak > 0 {
		if cfg.OpenFraction == 0 {
			cfg.OpenFraction = 0.8
		}
		cfg.Soak = &cost.SoakConfig{Length: *soak, Window: *soakWindow, Buyers: *soakBuyers, Early: *soakEarly}
		return runSoakCost(ctx, cfg, *asJSON, stdout, stderr)
	}
	rep, runErr := cost.Run(ctx, cfg)
	if len(rep.Results) > 0 || runErr == nil {
		if *asJSON {
			if err := cost.PrintJSON(stdout, rep); err != nil {
				fmt.Fprintln(stderr, "seckill bench --cost:", err)
				return 1
			}
		} else {
			cost.PrintText(stdout, rep)
		}
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "seckill bench --cost:", strings.TrimSpace(runErr.Error()))
		return 1
	}
	for _, r := range rep.Results {
		if r.OrdersInDB != r.Buys {
			return 1
		}
	}
	return 0
}

// runRoomCost runs `seckill bench --cost --room` and prints its report.
// Exit status: 0 measured, 1 a failure (a service without rooms included,
// or an accepted buy missing from the database).
func runRoomCost(ctx context.Context, cfg cost.Config, asJSON bool, stdout, stderr io.Writer) int {
	rep, runErr := cost.RunRoom(ctx, cfg)
	if len(rep.Phases) > 0 || runErr == nil {
		if asJSON {
			if err := cost.PrintRoomJSON(stdout, rep); err != nil {
				fmt.Fprintln(stderr, "seckill bench --cost --room:", err)
				return 1
			}
		} else {
			cost.PrintRoomText(stdout, rep)
		}
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "seckill bench --cost --room:", strings.TrimSpace(runErr.Error()))
		return 1
	}
	for _, p := range rep.Phases {
		if p.Sells() && p.OrdersInDB != p.Buys {
			return 1
		}
	}
	return 0
}

// runSoakCost runs `seckill bench --cost --soak` and prints its report.
// Exit status: 0 the soak met its targets, 1 it did not or failed.
func runSoakCost(ctx context.Context, cfg cost.Config, asJSON bool, stdout, stderr io.Writer) int {
	rep, runErr := cost.RunSoak(ctx, cfg)
	if asJSON {
		if err := cost.PrintSoakJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "seckill bench --cost --soak:", err)
			return 1
		}
	} else {
		cost.PrintSoakText(stdout, rep)
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "seckill bench --cost --soak:", strings.TrimSpace(runErr.Error()))
		return 1
	}
	if !rep.Passed() {
		return 1
	}
	return 0
}
