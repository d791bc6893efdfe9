// Command seckill runs flash sales on Redis: see the README.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: seckill <command> [flags]

commands:
  serve       run the HTTP API, the order consumer and the reconciliation loop
  demo        run a whole flash sale with simulated buyers and print the result
  reconcile   compare Redis, the order stream and the database for one sale (--repair: fix drift)
  token       print a buyer's JWT signed with the service's secret (for trying the API)
  draw verify  check a sale's published draw (its waiting room's order) and print the order
  bench       measure every stock deduction approach side by side (databases, Redis locks, Lua)
  bench --cost  what one HTTP buy costs in CPU: the service, Redis and PostgreSQL, per buy,
                and its ratios to the floor's and the seeds' script's (the targets)

Run "seckill <command> -h" for a command's flags.
`

// run dispatches a command and returns the process exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stderr)
	case "demo":
		return runDemo(ctx, args[1:], getenv, stdout, stderr)
	case "reconcile":
		return runReconcile(ctx, args[1:], getenv, stdout, stderr)
	case "token":
		return runToken(ctx, args[1:], getenv, stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], getenv, stdout, stderr)
	case "draw":
		return runDraw(ctx, args[1:], getenv, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "seckill: unknown command %q\n\n%s", args[0], usage)
	return 2
}
