package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/inventory"
	"github.com/seckill/seckill/service"
)

// runToken prints a buyer's JWT signed with the service's secret, for
// trying the API by hand; in production an identity provider issues them.
func runToken(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secret := fs.String("jwt-secret", getenv("SECKILL_JWT_SECRET"), "HS256 secret of the service (env SECKILL_JWT_SECRET)")
	user := fs.String("user", "", "the buyer's id, the token's sub (required)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *secret == "" || !inventory.ValidID(*user) {
		fmt.Fprintln(stderr, "seckill token: needs --jwt-secret (or SECKILL_JWT_SECRET) and --user with a valid user id")
		return 2
	}
	tok, err := service.SignUser(*secret, *user, jwt.MapClaims{"exp": time.Now().Add(*ttl).Unix()})
	if err != nil {
		fmt.Fprintln(stderr, "seckill token:", err)
		return 1
	}
	fmt.Fprintln(stdout, tok)
	return 0
}
