package inventory

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redistest"
)

// TestAdv5GatedBuysMixedWithEveryShapeInOneCall: one buy.lua call holding
// gated buys of a shared shape, of a two-line shape, with a key (inline),
// past maxShapes (inline), with a throttle; plain buys of the very lines a
// gated shape has; token buys; the same admission twice (new order id,
// and the same order id); one user with a stale and a live admission; one
// user plain then gated. Each buy gets its own answer: the gated buys
// with a live admission are accepted once each and spend it (state used
// with their own order, out of live, counted), the others are refused
// and change nothing; every order is its own user's lines. Argument
// misalignment shows as a wrong user/lines, a wrong code, or a corrupt
// reply. Run twice: with repeats (distinct 0) and all distinct buyers
// (distinct 1). On Redis and the embedded server.
func TestAdv5GatedBuysMixedWithEveryShapeInOneCall(t *testing.T) {
	for _, srv := range redistest.SingleBackends() {
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.Client(t)
			e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb)})
			var items []Item
			for i := range 14 {
				items = append(items, Item{SKU: fmt.Sprint("S", i), Stock: 1000})
			}
			if err := e.CreateSale(ctx, Sale{ID: "s1", PerUserLimit: 50, Items: items}); err != nil {
				t.Fatal(err)
			}
			k := e.keys("s1")
			const nb = 4
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(rdb.HSet(ctx, k.roomCfg, "nb", nb, "used", 0, "admitted", 0, "lapsed", 0).Err())
			bucket := func(user string) string {
				sum := sha1.Sum([]byte(user))
				return k.buckets + strconv.FormatInt(int64(binary.BigEndian.Uint32(sum[:4]))%nb, 10)
			}
			tm, err := rdb.Time(ctx).Result()
			must(err)
			until := tm.Add(2 * time.Minute).Truncate(time.Millisecond)
			ums := strconv.FormatInt(until.UnixMilli(), 10)
			admit := func(user, nonce string) {
				must(rdb.HSet(ctx, bucket(user), user, "a7:"+nonce+":"+ums+":1").Err())
				must(rdb.ZAdd(ctx, k.live, redis.Z{Score: float64(until.UnixMilli()), Member: user}).Err())
				must(rdb.HIncrBy(ctx, k.roomCfg, "admitted", 1).Err())
			}
			th := &Throttle{Rate: 100, Period: time.Second, Burst: 10}
			type buy struct {
				user, nonce, key, id string
				lines                []Line
				gated, throttle      bool
				want                 int // 0 bought, 1 replay, 15 spent
			}
			l := func(kv ...any) []Line {
				var out []Line
				for i := 0; i < len(kv); i += 2 {
					out = append(out, Line{SKU: kv[i].(string), Qty: int64(kv[i+1].(int))})
				}
				return out
			}
			for round, distinct := range []bool{false, true} {
				p := fmt.Sprint("r", round, "-")
				var buys []buy
				if !distinct {
					admit(p+"g1", "a1")
					admit(p+"g3", "a3")
					admit(p+"g4", "a4")
					admit(p+"u5", "a5")
					admit(p+"g6", "a6")
					admit(p+"g7", "a7")
					admit(p+"g8", "a8")
					same := NewOrderID("s1")
					buys = []buy{
						{user: p + "g1", nonce: "a1", lines: l("S0", 1), gated: true, want: 0},
						{user: p + "p1", lines: l("S0", 1), want: 0},
						{user: p + "g2", nonce: "a2", lines: l("S0", 1), gated: true, want: 15}, // no admission
						{user: p + "t1", nonce: "70", lines: l("S0", 1), want: 0},               // a purchase token
						{user: p + "g3", nonce: "a3", key: "k3", lines: l("S0", 1), gated: true, want: 0},
						{user: p + "g1", nonce: "a1", lines: l("S0", 1), gated: true, want: 15}, // the same admission again
						{user: p + "g4", nonce: "a4", lines: l("S1", 2, "S0", 1), gated: true, want: 0},
						{user: p + "u5", lines: l("S0", 1), want: 0},
						{user: p + "u5", nonce: "a5", lines: l("S0", 1), gated: true, want: 0},
						{user: p + "g6", nonce: "a60", lines: l("S0", 1), gated: true, want: 15}, // a stale admission
						{user: p + "g6", nonce: "a6", lines: l("S0", 1), gated: true, throttle: true, want: 0},
						{user: p + "g7", nonce: "a7", id: same, lines: l("S0", 1), gated: true, want: 0},
						{user: p + "g7", nonce: "a7", id: same, lines: l("S0", 1), gated: true, want: 1}, // a resend in the same call
					}
					// more shapes than a call shares, then gated buys of new shapes
					for i := range 9 {
						buys = append(buys, buy{user: p + "x" + strconv.Itoa(i), lines: l(fmt.Sprint("S", 2+i), 1+i%3), want: 0})
					}
					buys = append(buys,
						buy{user: p + "g8", nonce: "a8", lines: l("S12", 3), gated: true, want: 0},
						buy{user: p + "g1", nonce: "a1", lines: l("S13", 1), gated: true, want: 15})
				} else {
					for i := range 30 {
						u := p + "d" + strconv.Itoa(i)
						b := buy{user: u, lines: l(fmt.Sprint("S", i%14), 1+i%2)}
						switch i % 3 {
						case 0:
							admit(u, fmt.Sprintf("b%x", i))
							b.nonce, b.gated = fmt.Sprintf("b%x", i), true
						case 1:
							b.nonce, b.gated, b.want = fmt.Sprintf("c%x", i), true, 15 // none
						}
						b.throttle = i%4 == 0
						buys = append(buys, b)
					}
				}
				var bcs []buyCall
				for _, b := range buys {
					req := BuyRequest{SaleID: "s1", UserID: b.user, Lines: b.lines, IdempotencyKey: b.key, OrderID: b.id}
					if b.throttle {
						req.Throttle = th
					}
					c, err := checkBuy(req)
					if err == nil && b.nonce != "" {
						c, err = c.WithToken(b.nonce, time.Hour)
					}
					if err == nil && b.gated {
						c, err = c.WithGate(until)
					}
					must(err)
					bc, err := e.newBuyCall(c)
					must(err)
					bcs = append(bcs, bc)
				}
				if got := distinctBuys(bcs) == 1; got != distinct {
					t.Fatalf("round %d: distinct %v", round, got)
				}
				usedBefore, _ := rdb.HGet(ctx, k.roomCfg, "used").Int()
				states := map[string]string{}
				for _, b := range buys {
					if b.gated {
						states[b.user] = rdb.HGet(ctx, bucket(b.user), b.user).Val()
					}
				}
				replies, err := e.runBuys(ctx, k.buy(), bcs)
				if err != nil {
					t.Fatalf("round %d: the call: %v", round, err)
				}
				accepted := 0
				held := map[string]int64{}
				for i, b := range buys {
					rc, err := e.decodeBuy(replies[i], bcs[i])
					switch b.want {
					case 0:
						if err != nil {
							t.Errorf("round %d buy %d (%s %v gated %v): %v, want bought", round, i, b.user, b.lines, b.gated, err)
							continue
						}
						o, err := e.Order(ctx, rc.Order.ID)
						must(err)
						if o.UserID != b.user || !slices.Equal(o.Items, b.lines) || o.IdempotencyKey != b.key {
							t.Errorf("round %d buy %d: order of %s %v key %q, want %s %v %q", round, i, o.UserID, o.Items, o.IdempotencyKey, b.user, b.lines, b.key)
						}
						for _, x := range b.lines {
							held[b.user+"|"+x.SKU] += x.Qty
						}
						if b.gated {
							accepted++
							if got, want := rdb.HGet(ctx, bucket(b.user), b.user).Val(), "u7:"+b.nonce+":1:"+rc.Order.ID; got != want {
								t.Errorf("round %d buy %d: %s's state %q, want %q", round, i, b.user, got, want)
							}
							if err := rdb.ZScore(ctx, k.live, b.user).Err(); !errors.Is(err, redis.Nil) {
								t.Errorf("round %d buy %d: %s still live", round, i, b.user)
							}
						}
					case 1:
						if err != nil || !rc.Retried {
							t.Errorf("round %d buy %d: %+v %v, want its own order again", round, i, rc, err)
						}
					case 15:
						if !errors.Is(err, ErrTokenSpent) {
							t.Errorf("round %d buy %d (%s): %v, want ErrTokenSpent", round, i, b.user, err)
						}
					}
				}
				for _, b := range buys {
					if b.gated && b.want == 15 && states[b.user] != "" && !slices.ContainsFunc(buys, func(x buy) bool { return x.user == b.user && x.want == 0 && x.gated }) {
						if got := rdb.HGet(ctx, bucket(b.user), b.user).Val(); got != states[b.user] {
							t.Errorf("round %d: a refused buy changed %s's state: %q", round, b.user, got)
						}
					}
				}
				used, _ := rdb.HGet(ctx, k.roomCfg, "used").Int()
				if used-usedBefore != accepted {
					t.Errorf("round %d: used +%d, %d gated buys accepted", round, used-usedBefore, accepted)
				}
				got, err := rdb.HGetAll(ctx, k.bought).Result()
				must(err)
				for f, n := range held {
					if got[f] != strconv.FormatInt(n, 10) {
						t.Errorf("round %d: bought %s %q, want %d", round, f, got[f], n)
					}
				}
				c := rdb.HMGet(ctx, k.roomCfg, "admitted", "used", "lapsed").Val()
				a, _ := strconv.Atoi(c[0].(string))
				u, _ := strconv.Atoi(c[1].(string))
				la, _ := strconv.Atoi(c[2].(string))
				if live := int(rdb.ZCard(ctx, k.live).Val()); a != u+la+live {
					t.Errorf("round %d: admitted %d != used %d + lapsed %d + live %d", round, a, u, la, live)
				}
			}
		})
	}
}
