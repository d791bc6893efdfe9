package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/service"
)

// floorMode reports whether bench's arguments ask for --floor-serve (before
// any "--"): the floor of `seckill bench --cost`, a process it starts of
// this binary. Not listed in bench's flags: it is the benchmark's internal
// reference (benchcost.go's usage names it as such).
func floorMode(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "floor-serve" {
			return true
		}
	}
	return false
}

// runBenchFloor runs `seckill bench --floor-serve ADDR`: the floor
// (service.NewFloorServer) on ADDR, for buyers' tokens signed with
// SECKILL_JWT_SECRET, printing nothing, until SIGTERM/SIGINT. Exit status:
// 0 stopped, 1 it could not serve, 2 usage.
func runBenchFloor(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill bench --floor-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("floor-serve", "", "address to serve the floor on (the JWT secret in SECKILL_JWT_SECRET)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	secret := getenv("SECKILL_JWT_SECRET")
	if fs.NArg() > 0 || *addr == "" || secret == "" {
		fmt.Fprintln(stderr, "seckill bench --floor-serve: needs an address (--floor-serve ADDR), SECKILL_JWT_SECRET, and nothing else; it is bench --cost's reference, started by it")
		return 2
	}
	// As serve runs (runServe), so the floor's collector costs what the
	// service's would.
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "seckill bench --floor-serve:", err)
		return 1
	}
	srv := service.NewFloorServer(secret)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintln(stderr, "seckill bench --floor-serve:", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.ShutdownWithContext(sctx); err != nil {
		fmt.Fprintln(stderr, "seckill bench --floor-serve: shutdown:", err)
		return 1
	}
	return 0
}
