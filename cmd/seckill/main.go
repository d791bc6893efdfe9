// Command seckill runs flash sales on Redis: see the README.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv)
	stop()
	os.Exit(code)
}

const usage = `usage: seckill <command> [flags]

commands:
  demo    run a whole flash sale with simulated buyers and print the result
`

// run dispatches a command and returns the process exit status.
func run(ctx context.Context, args []string, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], getenv, os.Stdout, os.Stderr)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "seckill: unknown command %q\n\n%s", args[0], usage)
	return 2
}
