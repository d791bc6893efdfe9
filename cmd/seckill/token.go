package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/service"
)

// runToken prints a buyer's JWT signed with the service's secret, for
// trying the API by hand; in production an identity provider issues them.
// With --count N it prints N tokens, one per line, for the buyers
// <user>-1 ... <user>-N (a load test's crowd).
func runToken(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secret := fs.String("jwt-secret", getenv("SECKILL_JWT_SECRET"), "HS256 secret of the service (env SECKILL_JWT_SECRET)")
	user := fs.String("user", "", "the buyer's id, the token's sub (required)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	count := fs.Int("count", 0, "print tokens for the buyers <user>-1 ... <user>-N instead of one for <user>")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *secret == "" || !inventory.ValidID(*user) || *count < 0 || (*count > 0 && !inventory.ValidID(fmt.Sprintf("%s-%d", *user, *count))) {
		fmt.Fprintln(stderr, "seckill token: needs --jwt-secret (or SECKILL_JWT_SECRET), --user with a valid user id, and --count >= 0")
		return 2
	}
	users := []string{*user}
	if *count > 0 {
		users = make([]string, *count)
		for i := range users {
			users[i] = fmt.Sprintf("%s-%d", *user, i+1)
		}
	}
	w := bufio.NewWriter(stdout)
	exp := jwt.MapClaims{"exp": time.Now().Add(*ttl).Unix()}
	for _, u := range users {
		tok, err := service.SignUser(*secret, u, exp)
		if err != nil {
			fmt.Fprintln(stderr, "seckill token:", err)
			return 1
		}
		fmt.Fprintln(w, tok)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "seckill token:", err)
		return 1
	}
	return 0
}
