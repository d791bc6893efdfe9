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
	"time"

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

// A sale with a waiting room: buyers join, wait for their turn, and buy
// with the admission it gives them; without one, a buy is refused.
func ExampleSystem_Join() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "seckill")
	defer os.RemoveAll(dir)
	sys, err := seckill.Open(ctx, seckill.Config{DatabaseURL: "sqlite://" + filepath.Join(dir, "shop.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Shutdown(ctx)

	// No StartsAt and no DrawUntil: first come, first served from now.
	sale := seckill.Sale{ID: "drop", Items: []seckill.Item{{SKU: "sneaker", Stock: 1}}, Admission: &seckill.Admission{}}
	if _, err := sys.CreateSale(ctx, sale); err != nil {
		log.Fatal(err)
	}
	_, err = sys.Place(ctx, "drop", "alice")
	fmt.Println("before joining:", errors.Is(err, seckill.ErrNotJoined))
	for _, user := range []string{"alice", "bob"} {
		if _, err := sys.Join(ctx, "drop", user); err != nil {
			log.Fatal(err)
		}
	}
	_, err = sys.Buy(ctx, seckill.BuyRequest{SaleID: "drop", UserID: "bob", Lines: []seckill.Line{{SKU: "sneaker", Qty: 1}}})
	fmt.Println("bob without an admission:", errors.Is(err, seckill.ErrTokenRequired))

	// One sneaker: one admission at a time, alice's first.
	p, err := sys.Place(ctx, "drop", "alice")
	for err == nil && p.Status != seckill.PlaceAdmitted {
		time.Sleep(p.PollAfter / 20) // a client waits PollAfter; the example is in a hurry
		p, err = sys.Place(ctx, "drop", "alice")
	}
	if err != nil {
		log.Fatal(err)
	}
	rc, err := sys.Buy(ctx, seckill.BuyRequest{SaleID: "drop", UserID: "alice",
		Lines: []seckill.Line{{SKU: "sneaker", Qty: 1}}, PurchaseToken: p.Admission})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice bought; left:", rc.Remaining[0])
	bob, _ := sys.Place(ctx, "drop", "bob")
	fmt.Println("bob is", bob.Status)
	// Output:
	// before joining: true
	// bob without an admission: true
	// alice bought; left: 0
	// bob is sold_out
}
