package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/seckill/seckill"
)

// The whole system in a Go program, on the embedded defaults (an in-process
// Redis stand-in and an SQLite file): a sale of two phones, three buyers.
// In production, give Open a Redis client and a PostgreSQL URL instead.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "seckill")
	defer os.RemoveAll(dir)

	sys, err := seckill.Open(ctx, seckill.Config{DatabaseURL: "sqlite://" + filepath.Join(dir, "shop.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Shutdown(ctx)

	sale := seckill.Sale{ID: "launch", PerUserLimit: 1, Items: []seckill.Item{{SKU: "phone", Stock: 2}}}
	if _, err := sys.CreateSale(ctx, sale); err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"alice", "bob", "carol"} {
		rc, err := sys.Buy(ctx, seckill.BuyRequest{SaleID: "launch", UserID: user,
			Lines: []seckill.Line{{SKU: "phone", Qty: 1}}})
		switch {
		case errors.Is(err, seckill.ErrSoldOut):
			fmt.Println(user, "sold out")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(user, "bought; phones left:", rc.Remaining[0])
		}
	}
	rep, err := sys.Reconcile(ctx, "launch")
	fmt.Println("consistent:", rep.Consistent, err)
	// Output:
	// alice bought; phones left: 1
	// bob bought; phones left: 0
	// carol sold out
	// consistent: true <nil>
}

// The HTTP API of docs/api.md, mounted in a program's own server.
func ExampleSystem_Handler() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "seckill")
	defer os.RemoveAll(dir)
	sys, err := seckill.Open(ctx, seckill.Config{DatabaseURL: "sqlite://" + filepath.Join(dir, "shop.db"),
		AdminToken: "an-operators-secret", JWTSecret: "a-secret-buyers-tokens-are-signed-with"})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Shutdown(ctx)

	mux := http.NewServeMux()
	mux.Handle("/", sys.Handler()) // or under a prefix, with http.StripPrefix
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Status)
	// Output: 200 OK
}
