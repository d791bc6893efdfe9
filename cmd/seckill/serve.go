package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/seckill/seckill/service"
)

// runServe runs `seckill serve` until SIGTERM/SIGINT.
func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := configFlags(fs, getenv)
	logger := logFlags(fs, getenv)
	reconcileEvery := reconcileFlag(fs, getenv)
	degradedGrace := degradedFlag(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config()
	if err == nil {
		cfg.Logger, err = logger(stderr)
	}
	if err == nil {
		cfg.ReconcileEvery, err = reconcileEvery()
	}
	if err == nil {
		cfg.DegradedGrace, err = degradedGrace()
		if cfg.DegradedGrace < 0 {
			cfg.DegradedTick = -1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "seckill serve:", err)
		return 2
	}
	if err := service.Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "seckill:", err)
		return 1
	}
	return 0
}
