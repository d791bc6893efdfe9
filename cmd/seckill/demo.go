package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckill/seckill/cmd/seckill/demo"
	"github.com/seckill/seckill/internal/service"
)

// runDemo runs `seckill demo`: the whole service in process, on the
// configured Redis and database or on embedded ones, with simulated buyers.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	where := storeFlags(fs, getenv, false)
	fs.Lookup("redis").Usage = "Redis URL redis://[user:pass@]host:port/db (env SECKILL_REDIS_URL): the demo's keys there carry a prefix of its own and are deleted at its end; unset: embedded in-process server"
	fs.Lookup("db").Usage = "PostgreSQL URL postgres://... (env SECKILL_DATABASE_URL): the demo's tables there are in a schema of its own, dropped at its end; unset: a temporary SQLite file"
	logger := logFlags(fs, getenv)
	var cfg demo.Config
	fs.IntVar(&cfg.Buyers, "buyers", 3000, "simulated buyers")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "buyers buying at once")
	fs.Int64Var(&cfg.HotStock, "stock", 100, "units of the hot item")
	fs.Int64Var(&cfg.PerUserLimit, "limit", 2, "per-user limit of each item")
	fs.DurationVar(&cfg.PaymentTimeout, "pay-timeout", 2*time.Second,
		"payment timeout of the payment round (some buyers never pay; their units go to later buyers); 0 leaves it out")
	fs.DurationVar(&cfg.RoomAdmitTTL, "room-ttl", 10*time.Second,
		"how long an admission lasts in the room round (a sale behind a waiting room: the draw, the line after it, a lapse, a unit coming back); whole seconds from 10s, 0 leaves it out")
	verbose := fs.Bool("v", false, "log what the service does")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var svc service.Config
	where.set(&svc)
	if strings.HasPrefix(svc.DatabaseURL, "sqlite://") {
		fmt.Fprintln(stderr, "seckill demo: --db (or SECKILL_DATABASE_URL) names an SQLite file, which the demo would leave its sale in: leave --db unset for a temporary file, or name a PostgreSQL database")
		return 2
	}
	if svc.DatabaseURL == "" { // a fresh embedded database each run, not ./seckill.db
		dir, err := os.MkdirTemp("", "seckill-demo-")
		if err != nil {
			fmt.Fprintln(stderr, "seckill demo:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		svc.DatabaseURL = "sqlite://" + filepath.Join(dir, "demo.db")
	}
	if *verbose {
		l, err := logger(stderr)
		if err != nil {
			fmt.Fprintln(stderr, "seckill demo:", err)
			return 2
		}
		svc.Logger = l
	} else {
		fmt.Fprintln(stderr, "seckill demo: the service runs in this process; embedded Redis and SQLite unless --redis / --db name real ones, where it removes what it made at its end")
	}
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		cfg.Progress = stderr
	}
	fmt.Fprintf(stdout, "flash sale: %d buyers, %d at a time, %d units of the hot item, limit %d per buyer, over HTTP\n\n",
		max(cfg.Buyers, 0), cfg.Concurrency, cfg.HotStock, cfg.PerUserLimit)
	res, err := demo.Run(ctx, svc, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "seckill demo:", err)
		return 1
	}
	demo.Print(stdout, res)
	if !res.OK() {
		return 1
	}
	return 0
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
