package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/service"
)

// serveGOGC is the garbage collector's target of seckill serve unless the
// GOGC variable sets one: a buy allocates little that outlives it and the
// live heap is small (tens of MB), so collecting at 4x the live heap
// instead of 2x halves the collector's share of CPU per buy for a few tens
// of MB more memory. GOMEMLIMIT still bounds the heap if set.
const serveGOGC = 400

// runServe runs `seckill serve` until SIGTERM/SIGINT.
func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := configFlags(fs, getenv)
	logger := logFlags(fs, getenv)
	reconcileEvery := reconcileFlag(fs, getenv)
	degradedGrace := degradedFlag(fs, getenv)
	archiveEvery := archiveFlag(fs, getenv)
	httpServer := fs.String("http-server", orEnv(getenv, "SECKILL_HTTP_SERVER", service.HTTPServerFast),
		"the HTTP server: fasthttp (the buy natively, the rest through net/http's handler) or net/http (env SECKILL_HTTP_SERVER)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config()
	cfg.HTTPServer = *httpServer
	if err == nil {
		cfg.Logger, err = logger(stderr)
	}
	if err == nil {
		cfg.ReconcileEvery, err = reconcileEvery()
	}
	if err == nil {
		cfg.ArchiveEvery, err = archiveEvery()
	}
	if err == nil {
		cfg.DegradedGrace, err = degradedGrace()
	}
	if err != nil {
		fmt.Fprintln(stderr, "seckill serve:", err)
		return 2
	}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	if err := seckill.Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "seckill:", err)
		return 1
	}
	return 0
}
