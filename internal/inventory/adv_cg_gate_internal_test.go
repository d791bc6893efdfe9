package inventory

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redistest"
)

// TestAdvCgGatedBuysNameWholeIds: gated buys (a waiting room's admissions)
// whose ids go as tails, in a crowd's call (distinct: no key, no token of
// their own, no payment step, so no whole id is made for anything but the
// gate) and in a call of mixed groups (cg a caller's group, the engine's
// ids whole). Each accepted buy's used admission names its whole order id,
// and so does its "tokens" line in the stream; the stream and the orders
// hash hold the same orders. On Redis (entries of several orders and one
// per order) and the embedded server.
func TestAdvCgGatedBuysNameWholeIds(t *testing.T) {
	for _, srv := range redistest.SingleBackends() {
		for _, perOrder := range []bool{false, true} {
			t.Run(fmt.Sprint(srv.Name, "/EntryPerOrder=", perOrder), func(t *testing.T) {
				ctx := context.Background()
				rdb := srv.Client(t)
				e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb), EntryPerOrder: perOrder})
				const sale = "g1"
				if err := e.CreateSale(ctx, Sale{ID: sale, PerUserLimit: 5, Items: []Item{{SKU: "A", Stock: 100}}}); err != nil {
					t.Fatal(err)
				}
				k := e.keys(sale)
				until := time.Now().Add(2 * time.Minute).Truncate(time.Millisecond)
				mustDo := func(err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				mustDo(rdb.HSet(ctx, k.roomCfg, "nb", 1).Err())
				bucket := k.buckets + "0"
				admit := func(user, nonce string) {
					mustDo(rdb.ZAdd(ctx, k.live, redis.Z{Score: float64(until.UnixMilli()), Member: user}).Err())
					mustDo(rdb.HSet(ctx, bucket, user, fmt.Sprintf("a7:%s:%d:1", nonce, until.UnixMilli())).Err())
				}
				gated := func(user, nonce, orderID string) buyCall {
					c, err := checkBuy(BuyRequest{SaleID: sale, UserID: user, Lines: []Line{{SKU: "A", Qty: 1}}, OrderID: orderID})
					if err == nil {
						c, err = c.WithToken(nonce, time.Hour)
					}
					if err == nil {
						c, err = c.WithGate(until)
					}
					mustDo(err)
					bc, err := e.newBuyCall(c)
					mustDo(err)
					return bc
				}
				run := func(step string, bcs []buyCall) {
					t.Helper()
					var g idGroup
					for i := range bcs {
						g.give(&bcs[i])
					}
					replies, err := e.runBuys(ctx, k.buy(), bcs)
					if err != nil {
						t.Fatalf("%s: %v", step, err)
					}
					for i, r := range replies {
						if code(r) != codeOK {
							t.Errorf("%s: buy %d (%s): %v", step, i, bcs[i].placed.ID, r)
							continue
						}
						u, id := bcs[i].placed.UserID, bcs[i].placed.ID
						st := rdb.HGet(ctx, bucket, u).Val()
						if !strings.HasSuffix(st, ":"+id) || strings.Count(st, ":") != 3 {
							t.Errorf("%s: %s's used admission %q does not end in its order id %s", step, u, st, id)
						}
					}
				}

				// a crowd of gated buys, all of the engine's group
				var bcs []buyCall
				for i := range 6 {
					u, n := fmt.Sprint("c", i), fmt.Sprintf("c%x", i)
					admit(u, n)
					bcs = append(bcs, gated(u, n, ""))
				}
				if distinctBuys(bcs) != 1 {
					t.Fatal("the crowd's call is not distinct")
				}
				run("crowd", bcs)

				// a call of mixed groups: a caller's id first (cg), ids of
				// its group (tails) and the engine's (whole)
				x := NewOrderID(sale)
				bcs = nil
				for i := range 6 {
					u, n := fmt.Sprint("m", i), fmt.Sprintf("d%x", i)
					admit(u, n)
					id := ""
					switch i {
					case 0:
						id = x
					case 2, 4:
						id = orderGroup(x) + fmt.Sprintf("ZZZ%d", i)
					}
					bcs = append(bcs, gated(u, n, id))
				}
				run("mixed", bcs)

				// the stream: whole ids, tokens lines of whole ids, the
				// records of the orders hash
				msgs, err := rdb.XRange(ctx, k.events, "-", "+").Result()
				mustDo(err)
				evs, err := ParseEntries(sale, msgs)
				mustDo(err)
				stream := map[string]string{}
				spent := 0
				for _, ev := range evs {
					if ev.Type != EventBought {
						continue
					}
					if len(ev.Order.ID) != len(x) {
						t.Errorf("an event of order %q: not a whole id", ev.Order.ID)
					}
					stream[ev.Order.ID] = formatRecordForAdv(ev.Order)
					if ev.Spent.OrderID != ev.Order.ID || ev.Spent.Token == "" || ev.Spent.Until.UnixMilli() != until.UnixMilli() {
						t.Errorf("order %s's spent token %+v", ev.Order.ID, ev.Spent)
					} else {
						spent++
					}
				}
				h, err := rdb.HGetAll(ctx, k.orders).Result()
				mustDo(err)
				records := OrderRecords(h)
				if len(records) != 12 || spent != 12 {
					t.Errorf("%d records, %d spent tokens; want 12 each", len(records), spent)
				}
				if !maps.Equal(stream, records) {
					t.Errorf("the stream's orders\n%v\nthe orders hash's\n%v", stream, records)
				}
				if n := rdb.HGet(ctx, k.sale, "orders").Val(); n != "12" {
					t.Errorf("the sale counts %s orders, want 12", n)
				}
			})
		}
	}
}

// formatRecordForAdv is an order's record as the orders hash holds a new
// order's ("p|<user>|<ms>|<lines>|<key>", record.go).
func formatRecordForAdv(o Order) string {
	return fmt.Sprintf("p|%s|%d|%s|%s", o.UserID, o.CreatedAt.UnixMilli(), formatLines(o.Items), o.IdempotencyKey)
}
