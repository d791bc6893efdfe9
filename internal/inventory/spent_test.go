package inventory_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
)

// TestRebuildKeepsSpentTokens: the stream entry of a buy that spent a
// token names it (alone, or among the orders of a call of several buys),
// and a sale rebuilt from a system of record that kept the tokens with the
// orders refuses them again (ErrTokenSpent), on every backend. Buys
// without a token leave no trace of one.
func TestRebuildKeepsSpentTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := &recordDB{}
		r := newRig(t, b, inventory.Options{Loader: db})
		r.create(inventory.Sale{ID: "s1", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}})
		buy := func(user, token string) inventory.BuyRequest {
			return inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: lines("A", 1), Token: token, TokenTTL: time.Hour}
		}
		if _, err := r.eng.BuyWith(r.ctx, buy("u1", "t1")); err != nil {
			t.Fatal(err)
		}
		for _, res := range r.eng.BuyMany(r.ctx, []inventory.BuyRequest{buy("u2", "t2"), buy("u3", ""), buy("u4", "t4")}) {
			if res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		db.catchUp(r, "s1")
		var got []string
		for _, s := range db.spent {
			got = append(got, s.UserID+"="+s.Token)
			if d := s.Until.Sub(r.clock.Now()); d <= 50*time.Minute || d > time.Hour+time.Minute {
				t.Errorf("token %s spent until %v, want in an hour", s.Token, s.Until)
			}
		}
		if strings.Join(got, ",") != "u1=t1,u2=t2,u4=t4" {
			t.Fatalf("tokens the stream carried: %v", got)
		}
		r.lose("s1", true)
		for _, tok := range []string{"t1", "t2", "t4"} {
			if err := r.rdb.Del(r.ctx, r.key("s1", "ptoken:"+tok)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i, u := range []string{"u1", "u2", "u4"} {
			if _, err := r.eng.BuyWith(r.ctx, buy(u, got[i][len(u)+1:])); !errors.Is(err, inventory.ErrTokenSpent) {
				t.Errorf("%s's spent token after the rebuild: %v", u, err)
			}
		}
		if _, err := r.eng.BuyWith(r.ctx, buy("u3", "t3")); err != nil {
			t.Errorf("a token never spent after the rebuild: %v", err)
		}
	})
}

// TestParseEntryTokens: the "tokens" field of an entry of bought orders
// names the tokens its orders spent; an entry without one has none; one
// the engine could not have written makes every order of its entry a dead
// letter (its orders are not stored without it).
func TestParseEntryTokens(t *testing.T) {
	rec := func(id, user string) string { return id + "|p|" + user + "|1700000000000|A=1|" }
	o1, o2 := "s1.01HZZZZZZZZZZZZZZZZZZZ0000", "s1.01HZZZZZZZZZZZZZZZZZZZ0001"
	packed := rec(o1, "u1") + "\n" + rec(o2, "u2")
	for _, c := range []struct {
		name   string
		values map[string]any
		want   map[string]string // order id -> token
		bad    int
	}{
		{"one order", map[string]any{"bought": rec(o1, "u1"), "tokens": o1 + "|t1|1700000060000"}, map[string]string{o1: "t1"}, 0},
		{"one order, no token", map[string]any{"bought": rec(o1, "u1")}, map[string]string{o1: ""}, 0},
		{"two orders, one token", map[string]any{"orders": packed, "tokens": o2 + "|t2|1700000060000"}, map[string]string{o1: "", o2: "t2"}, 0},
		{"two orders, two tokens", map[string]any{"orders": packed, "tokens": o1 + "|t1|1700000060000\n" + o2 + "|t2|1700000060000"},
			map[string]string{o1: "t1", o2: "t2"}, 0},
		{"a token that is no id", map[string]any{"orders": packed, "tokens": o1 + "|t 1|1700000060000"}, nil, 2},
		{"no time", map[string]any{"bought": rec(o1, "u1"), "tokens": o1 + "|t1"}, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs, bad := inventory.ParseEntry(nil, "s1", redis.XMessage{ID: "1700000000000-0", Values: c.values})
			if len(bad) != c.bad {
				t.Fatalf("bad events %+v, want %d", bad, c.bad)
			}
			if len(evs) != len(c.want) {
				t.Fatalf("events %+v, want %d", evs, len(c.want))
			}
			for _, ev := range evs {
				if ev.Spent.Token != c.want[ev.Order.ID] {
					t.Errorf("order %s spent %q, want %q", ev.Order.ID, ev.Spent.Token, c.want[ev.Order.ID])
				}
				if ev.Spent.Token != "" && (ev.Spent.UserID != ev.Order.UserID || ev.Spent.Until.UnixMilli() != 1700000060000) {
					t.Errorf("order %s: spent %+v", ev.Order.ID, ev.Spent)
				}
			}
		})
	}
}
