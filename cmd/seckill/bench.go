package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/bench"
)

// runBench runs `seckill bench`: every way of deducting a hot item's stock,
// side by side on the same workload, with what each sold counted from the
// store. Exit status: 0 measured, 1 a failure or a broken invariant (an
// atomic approach oversold), 2 usage.
//
// With --cost it is another measurement: the CPU cost per buy of the HTTP
// buy path (runBenchCost); with --floor-serve, that measurement's floor
// (runBenchFloor).
func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if floorMode(args) {
		return runBenchFloor(ctx, args, getenv, stderr)
	}
	if costMode(args) {
		return runBenchCost(ctx, args, stdout, stderr)
	}
	fs := flag.NewFlagSet("seckill bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool("cost", false, "instead: measure the CPU µs per buy of the HTTP buy path (service, Redis, PostgreSQL) of seckill serve on real Redis and PostgreSQL, optionally against another build; \"seckill bench --cost -h\" lists its flags")
	quick := fs.Bool("quick", false, "2s per approach instead of 5s (about half a minute in all)")
	asJSON := fs.Bool("json", false, "print the results as one JSON document instead of a table")
	redisURL := fs.String("redis", getenv("SECKILL_REDIS_URL"),
		`Redis URL to measure on (env SECKILL_REDIS_URL): the run's keys there carry its id and are removed at its end; unset: a redis-server of this run's own on a free loopback port, stopped at its end (the embedded server if redis-server is not on PATH); "embedded" for the in-process server`)
	dbURL := fs.String("db", getenv("SECKILL_DATABASE_URL"),
		`database URL postgres://... or sqlite://PATH to measure on (env SECKILL_DATABASE_URL): the run's tables there are in a schema of its own, dropped at its end; unset or "embedded": SQLite in a temp dir`)
	concurrency := fs.Int("concurrency", 64, "clients buying at once")
	stock := fs.Int64("stock", 0, "units of the hot item, the same for every approach, each running until sold out or for --duration; 0: sized per approach by a calibration run to sell out in about --duration")
	duration := fs.Duration("duration", 5*time.Second, "how long each approach runs")
	only := fs.String("only", "", "comma-separated approaches to run (default all): "+strings.Join(bench.Names(), ", "))
	chart := fs.String("chart", "", "also write a bar chart of ops/s to FILE.svg")
	segments := fs.Int("segments", 8, "segments of redis-segmented")
	batch := fs.Int("batch", 16, "buys per BuyMany call of redis-batched")
	rounds := fs.Int("rounds", 1, "measure every approach this many times, interleaved, and report each one's median round (steadier ratios on a noisy machine)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "seckill bench: "+format+"\n", a...)
		return 2
	}
	names, err := bench.Select(*only)
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case err != nil:
		return usage("--only: %v", err)
	case *concurrency < 1 || *concurrency > 10_000:
		return usage("--concurrency must be 1..10000")
	case *stock < 0 || *stock > 1_000_000_000:
		return usage("--stock must be 0 (sized per approach) or 1..1000000000")
	case *duration <= 0:
		return usage("--duration must be positive")
	case *segments < 1 || *segments > 1024:
		return usage("--segments must be 1..1024")
	case *batch < 1 || *batch > 10_000:
		return usage("--batch must be 1..10000")
	case *rounds < 1 || *rounds > 100:
		return usage("--rounds must be 1..100")
	}
	if *chart != "" {
		switch strings.ToLower(filepath.Ext(*chart)) {
		case ".svg":
		case ".png":
			return usage("--chart writes SVG only, drawn with the standard library; name an .svg file (a browser shows it; rsvg-convert or Inkscape turn it into a PNG)")
		default:
			return usage("--chart needs a file name ending in .svg")
		}
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	cfg := bench.Config{Approaches: names, Concurrency: *concurrency, Stock: *stock, Duration: *duration,
		Segments: *segments, Batch: *batch, Rounds: *rounds}
	if *quick && !explicit["duration"] {
		cfg.Duration = 2 * time.Second
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		cfg.Progress = func(line string, final bool) {
			fmt.Fprintf(stderr, "\r%s\x1b[K", line)
			if final {
				fmt.Fprintln(stderr)
			}
		}
	}

	needRedis, needDB := bench.Needs(names)
	stores, err := bench.Open(ctx, bench.Target{RedisURL: *redisURL, DatabaseURL: *dbURL,
		NeedRedis: needRedis, NeedDB: needDB, Concurrency: cfg.Concurrency})
	if err != nil {
		fmt.Fprintln(stderr, "seckill bench:", err)
		return 1
	}
	if stores.RedisOwn {
		fmt.Fprintf(stderr, "seckill bench: no --redis given: using a redis-server of this run's own at %s\n", stores.RedisAddr)
	}
	if stores.RedisNote != "" {
		fmt.Fprintf(stderr, "seckill bench: %s: using an embedded in-process Redis-compatible server (miniredis)\n", stores.RedisNote)
	}
	if stores.DBNote != "" {
		fmt.Fprintf(stderr, "seckill bench: %s: using SQLite in a temp dir\n", stores.DBNote)
	}
	rep, runErr := bench.Run(ctx, stores, cfg)
	code := 0
	if err := stores.Close(); err != nil {
		fmt.Fprintln(stderr, "seckill bench: clean up:", err)
		code = 1
	}
	if *asJSON {
		if err := bench.PrintJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "seckill bench:", err)
			return 1
		}
	} else {
		bench.PrintText(stdout, rep)
	}
	if *chart != "" && len(rep.Results) > 0 {
		var svg bytes.Buffer
		err := bench.WriteSVG(&svg, rep)
		if err == nil {
			err = os.WriteFile(*chart, svg.Bytes(), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "seckill bench: chart:", err)
			code = 1
		}
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "seckill bench:", runErr)
		return 1
	}
	if broken := rep.Broken(); len(broken) > 0 {
		return 1
	}
	return code
}
