package segment_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

func ExampleSeller() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	prefix := "example" + strconv.FormatUint(rand.Uint64(), 36)
	defer func() {
		iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	}()
	eng := inventory.New(rdb, inventory.Options{Prefix: prefix})
	sel := segment.New(eng, rdb, segment.Options{})

	sale := inventory.Sale{ID: "launch", PerUserLimit: 1, Items: []inventory.Item{{SKU: "phone", Stock: 4}}}
	ids, _ := sel.Place(ctx, "launch", 2)
	segs, _ := segment.Plan(sale, ids) // record these in the system of record
	fmt.Println(ids, segs[0].Items[0].Stock, segs[1].Items[0].Stock)
	if err := sel.Create(ctx, sale, ids); err != nil {
		fmt.Println(err)
	}

	for _, user := range []string{"ann", "bob", "cat", "dan", "eve"} {
		rc, err := sel.Buy(ctx, inventory.BuyRequest{SaleID: "launch", UserID: user,
			Lines: []inventory.Line{{SKU: "phone", Qty: 1}}})
		fmt.Println(user, rc.Order.SaleID == segment.Home(ids, user), errors.Is(err, inventory.ErrSoldOut))
	}
	sum, _, _ := sel.Stock(ctx, "launch")
	fmt.Println(sum.Items[0].Sold, sum.Items[0].Remaining)
	// Output:
	// [launch:0 launch:1] 2 2
	// ann true false
	// bob true false
	// cat true false
	// dan true false
	// eve false true
	// 4 0
}
