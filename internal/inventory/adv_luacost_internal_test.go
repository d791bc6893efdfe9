package inventory

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/luascript"
	"github.com/seckill/seckill/internal/redistest"
)

// TestAdvFirstHoldingOfAnOddQtyArgument: buy.lua writes a first holding
// as the qty argument itself only when int takes it; a qty argument Redis
// would keep in another form ("01", "+1", " 1", "1.0", "1e0", "0x1": the
// engine never sends one, CheckBuy's int64 is formatted by the client) is
// written as the number it is, so the bought hash holds the canonical
// decimal int.lua and HINCRBY (a cancel) take. Called with the script itself, on Redis and miniredis (whose
// Lua, gopher-lua, has its own tonumber). (Seen failing with the
// argument written whenever the holding is new: "01", "+1", " 1" are
// then stored, and HINCRBY fails on them.)
func TestAdvFirstHoldingOfAnOddQtyArgument(t *testing.T) {
	for _, srv := range redistest.SingleBackends() {
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.Client(t)
			e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb)})
			if err := e.CreateSale(ctx, Sale{ID: "s1", PerUserLimit: 10, Items: []Item{{SKU: "A", Stock: 100}}}); err != nil {
				t.Fatal(err)
			}
			k := e.keys("s1")
			keys := []string{k.sale, k.bought, k.orders, k.idem, k.events, k.throttle, k.token, k.deadlines}
			for _, qty := range []string{"1", "3", "01", "+1", " 1", "1 ", "1.0", "1e0", "0x1", "2.", "002"} {
				if qty == "1e0" && srv.Name == "miniredis" {
					continue // gopher-lua's tonumber has no exponents: the script fails before any write
				}
				u := "u" + qty
				// now, one buy, no throttle, no call group, no shared shape;
				// user, order id, shape 0 (its own, next:) key, lines,
				// throttle, token, ttl, n, sku, qty
				args := []any{"", 1, 0, "", 0, u, NewOrderID("s1"), 0, "", "A=" + qty, 0, "", 0, 1, "A", qty}
				res, _, err := luascript.Run(ctx, rdb, buyScript, keys, args...)
				if err != nil {
					t.Fatalf("qty %q: %v", qty, err)
				}
				reply, _ := res.([]any)
				if len(reply) < 3 || reply[2] != int64(0) {
					t.Logf("qty %q: refused %v", qty, reply)
					continue
				}
				v, err := rdb.HGet(ctx, k.bought, u+"|A").Result()
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"1": "1", "3": "3", "002": "2", "2.": "2"}[qty]
				if want == "" {
					want = "1"
				}
				if v != want {
					t.Errorf("qty %q: bought %q, want %q", qty, v, want)
				}
				if err := rdb.HIncrBy(ctx, k.bought, u+"|A", 0).Err(); err != nil {
					t.Errorf("qty %q: HINCRBY on the stored %q: %v", qty, v, err)
				}
			}
		})
	}
}
