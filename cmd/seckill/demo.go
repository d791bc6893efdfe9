package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/demo"
)

// runDemo runs `seckill demo`: a flash sale on the configured Redis, or on
// an embedded in-process one when none is configured.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", getenv("SECKILL_REDIS_URL"), "Redis URL `redis://[user:pass@]host:port/db` (env SECKILL_REDIS_URL); unset: embedded in-process server")
	prefix := fs.String("key-prefix", envOr(getenv, "SECKILL_KEY_PREFIX", "seckill"), "prefix of every Redis key (env SECKILL_KEY_PREFIX)")
	var cfg demo.Config
	fs.IntVar(&cfg.Buyers, "buyers", 3000, "simulated buyers")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "buyers buying at once")
	fs.Int64Var(&cfg.HotStock, "stock", 100, "units of the hot item")
	fs.Int64Var(&cfg.PerUserLimit, "limit", 2, "per-user limit of each item")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	var rdb *redis.Client
	if *redisURL == "" {
		srv, err := miniredis.Run()
		if err != nil {
			fmt.Fprintln(stderr, "seckill: start embedded redis:", err)
			return 1
		}
		defer srv.Close()
		fmt.Fprintln(stderr, "seckill: using the embedded in-process Redis-compatible server (miniredis): not for production")
		rdb = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	} else {
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			fmt.Fprintln(stderr, "seckill: bad --redis:", err)
			return 2
		}
		rdb = redis.NewClient(opts)
		if err := rdb.Ping(ctx).Err(); err != nil {
			fmt.Fprintf(stderr, "seckill: cannot reach redis at %s: %v\n", opts.Addr, err)
			return 1
		}
	}
	defer rdb.Close()

	saleID := "demo-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	fmt.Fprintf(stdout, "flash sale %s: %d buyers, %d at a time, %d units of the hot item, limit %d per buyer\n\n",
		saleID, cfg.Buyers, cfg.Concurrency, cfg.HotStock, cfg.PerUserLimit)
	res, err := demo.Run(ctx, rdb, *prefix, saleID, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "seckill: demo:", err)
		return 1
	}
	demo.Print(stdout, res)
	if !res.OK() {
		return 1
	}
	return 0
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
