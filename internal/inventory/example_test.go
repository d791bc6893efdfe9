package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// exampleEngine returns an engine on the local Redis under a fresh prefix,
// and a function that deletes its keys.
func exampleEngine() (*inventory.Engine, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	prefix := "example" + strconv.FormatUint(rand.Uint64(), 36)
	return inventory.New(rdb, inventory.Options{Prefix: prefix}), func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	}
}

func ExampleEngine_Buy() {
	ctx := context.Background()
	eng, cleanup := exampleEngine()
	defer cleanup()

	_ = eng.CreateSale(ctx, inventory.Sale{
		ID:           "launch",
		PerUserLimit: 2,
		Items:        []inventory.Item{{SKU: "phone", Stock: 3}, {SKU: "case", Stock: inventory.Unlimited}},
	})

	rc, err := eng.Buy(ctx, "launch", "alice", []inventory.Line{{SKU: "phone", Qty: 2}, {SKU: "case", Qty: 1}}, "")
	fmt.Println(err, rc.Order.Status, rc.Remaining)

	_, err = eng.Buy(ctx, "launch", "alice", []inventory.Line{{SKU: "phone", Qty: 1}}, "")
	fmt.Println(err)

	_, err = eng.Buy(ctx, "launch", "bob", []inventory.Line{{SKU: "phone", Qty: 2}}, "")
	var soldOut *inventory.SoldOutError
	fmt.Println(errors.Is(err, inventory.ErrSoldOut), errors.As(err, &soldOut) && soldOut.SKUs[0] == "phone")
	// Output:
	// <nil> pending [1 -1]
	// seckill: per-user limit 2 exceeded: phone
	// true true
}

func ExampleEngine_Cancel() {
	ctx := context.Background()
	eng, cleanup := exampleEngine()
	defer cleanup()

	_ = eng.CreateSale(ctx, inventory.Sale{ID: "launch", Items: []inventory.Item{{SKU: "phone", Stock: 1}}})
	rc, _ := eng.Buy(ctx, "launch", "alice", []inventory.Line{{SKU: "phone", Qty: 1}}, "")

	cancelled, err := eng.Cancel(ctx, rc.Order.ID, "alice")
	fmt.Println(err, cancelled.Order.Status, cancelled.Remaining, cancelled.Replayed)

	again, err := eng.Cancel(ctx, rc.Order.ID, "alice") // changes nothing
	fmt.Println(err, again.Order.Status, again.Remaining, again.Replayed)
	// Output:
	// <nil> cancelled [1] false
	// <nil> cancelled [1] true
}

func ExampleEngine_Restock() {
	ctx := context.Background()
	eng, cleanup := exampleEngine()
	defer cleanup()

	_ = eng.CreateSale(ctx, inventory.Sale{ID: "launch", Items: []inventory.Item{{SKU: "phone", Stock: 0}}})
	_, err := eng.Buy(ctx, "launch", "alice", []inventory.Line{{SKU: "phone", Qty: 1}}, "")
	fmt.Println(err)

	remaining, err := eng.Restock(ctx, "launch", "phone", 10)
	fmt.Println(remaining, err)

	rc, err := eng.Buy(ctx, "launch", "alice", []inventory.Line{{SKU: "phone", Qty: 1}}, "")
	fmt.Println(rc.Remaining, err)
	// Output:
	// seckill: sold out: phone
	// 10 <nil>
	// [9] <nil>
}
