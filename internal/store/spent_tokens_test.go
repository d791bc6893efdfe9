package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// tokenRig is a sale on the real engine whose stream the test applies to
// a database by hand, as the order consumer does.
type tokenRig struct {
	t       *testing.T
	ctx     context.Context
	rdb     redis.UniversalClient
	eng     *inventory.Engine
	s       *Store
	applied string // the newest event applied
}

func newTokenRig(t *testing.T, rdb redis.UniversalClient, url string) *tokenRig {
	r := &tokenRig{t: t, ctx: context.Background(), rdb: rdb, s: openStore(t, url)}
	r.eng = inventory.New(rdb, inventory.Options{Prefix: redistest.Prefix(t, rdb),
		Loader: inventory.LoaderFunc(func(ctx context.Context, saleID string) (inventory.Snapshot, error) {
			snap, err := r.s.Snapshot(ctx, saleID)
			snap.EventsApplied = r.applied
			return snap, err
		})})
	return r
}

// catchUp applies the events of the sale's stream after the last applied.
func (r *tokenRig) catchUp(saleID string) {
	r.t.Helper()
	start := "-"
	if r.applied != "" {
		start = "(" + r.applied
	}
	msgs, err := r.rdb.XRange(r.ctx, r.eng.EventsKey(saleID), start, "+").Result()
	must(r.t, err)
	evs, err := inventory.ParseEntries(saleID, msgs)
	must(r.t, err)
	if len(evs) > 0 {
		must(r.t, r.s.Apply(r.ctx, saleID, evs))
		r.applied = msgs[len(msgs)-1].ID
	}
}

// keys lists the sale's keys in Redis (SCAN of its hash tag).
func (r *tokenRig) keys(saleID string) []string {
	r.t.Helper()
	var keys []string
	iter := r.rdb.Scan(r.ctx, 0, r.eng.Key(saleID, "*"), 1000).Iterator()
	for iter.Next(r.ctx) {
		keys = append(keys, iter.Val())
	}
	must(r.t, iter.Err())
	return keys
}

func (r *tokenRig) buyWith(user, token string, ttl time.Duration) (inventory.Receipt, error) {
	return r.eng.BuyWith(r.ctx, inventory.BuyRequest{SaleID: "tok", UserID: user, Lines: []inventory.Line{line("A", 1)},
		Token: token, TokenTTL: ttl})
}

// TestSpentTokenSurvivesRedisLoss: a purchase token an accepted buy spent
// stays spent when Redis loses the sale (every key of it, the token marks
// too) once the database has the buy: the rebuild from the database
// restores the marks of the tokens still within their life, bought alone
// or in a call of several buys, and the same token buys nothing again. A
// token whose life is over is not restored; a buy without a token is as
// before.
func TestSpentTokenSurvivesRedisLoss(t *testing.T) {
	for _, b := range redistest.SingleBackends() {
		t.Run(b.Name, func(t *testing.T) {
			for _, d := range dbtest.Dialects(t) {
				t.Run(d.Name, func(t *testing.T) {
					r := newTokenRig(t, b.Client(t), d.URL)
					must(t, r.eng.CreateSale(r.ctx, inventory.Sale{ID: "tok", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}}))
					first, err := r.buyWith("alice", "tok-alice", time.Hour)
					must(t, err)
					_, err = r.buyWith("bob", "", 0)
					must(t, err)
					for _, res := range r.eng.BuyMany(r.ctx, []inventory.BuyRequest{
						{SaleID: "tok", UserID: "carol", Lines: []inventory.Line{line("A", 1)}, Token: "tok-carol", TokenTTL: time.Hour},
						{SaleID: "tok", UserID: "dave", Lines: []inventory.Line{line("A", 1)}},
						{SaleID: "tok", UserID: "erin", Lines: []inventory.Line{line("A", 1)}, Token: "tok-erin", TokenTTL: time.Hour},
					}) {
						must(t, res.Err)
					}
					_, err = r.buyWith("frank", "tok-frank", time.Millisecond) // its life ends at once
					must(t, err)
					if _, err := r.buyWith("alice", "tok-alice", time.Hour); !errors.Is(err, inventory.ErrTokenSpent) {
						t.Fatalf("the spent token before the loss: %v", err)
					}
					r.catchUp("tok")

					// Redis loses the sale: every key of it.
					must(t, r.rdb.Del(r.ctx, r.keys("tok")...).Err())
					if _, err := r.eng.Stock(r.ctx, "tok"); err != nil {
						t.Fatalf("rebuild: %v", err)
					}
					for _, u := range []string{"alice", "carol", "erin"} {
						if rc, err := r.buyWith(u, "tok-"+u, time.Hour); !errors.Is(err, inventory.ErrTokenSpent) {
							t.Errorf("%s's spent token after the loss: %+v, %v; want ErrTokenSpent", u, rc.Order, err)
						}
					}
					if n, err := r.rdb.Exists(r.ctx, r.eng.Key("tok", "ptoken:tok-frank")).Result(); err != nil || n != 0 {
						t.Errorf("a token whose life is over was restored: %d, %v", n, err)
					}
					if _, err := r.buyWith("bob", "", 0); err != nil {
						t.Errorf("a buy without a token after the loss: %v", err)
					}
					r.catchUp("tok")
					snap, err := r.s.Snapshot(r.ctx, "tok")
					must(t, err)
					n := 0
					for _, o := range snap.Orders {
						if o.UserID == "alice" {
							n++
							if o.ID != first.Order.ID {
								t.Errorf("alice has a second order %s", o.ID)
							}
						}
					}
					check(t, "alice's orders", n, 1)
				})
			}
		})
	}
}

// TestRepairRestoresSpentTokens: Redis comes back behind the database (a
// replica that lagged, an AOF that lost its last second): the sale is
// there, as it was before a token buy the database has. The repair brings
// the order back, and the token's mark with it: the token buys nothing
// again.
func TestRepairRestoresSpentTokens(t *testing.T) {
	for _, d := range dbtest.Dialects(t) {
		t.Run(d.Name, func(t *testing.T) {
			r := newTokenRig(t, redistest.Standalone(t), d.URL)
			must(t, r.eng.CreateSale(r.ctx, inventory.Sale{ID: "tok", PerUserLimit: 5, Items: []inventory.Item{{SKU: "A", Stock: 100}}}))
			_, err := r.buyWith("bob", "tok-bob", time.Hour)
			must(t, err)
			r.catchUp("tok")
			// Redis as it was here...
			before := map[string]string{}
			for _, k := range r.keys("tok") {
				dump, err := r.rdb.Dump(r.ctx, k).Result()
				must(t, err)
				before[k] = dump
			}
			rc, err := r.buyWith("alice", "tok-alice", time.Hour)
			must(t, err)
			r.catchUp("tok")
			// ...comes back: what the token buy wrote is lost.
			must(t, r.rdb.Del(r.ctx, r.keys("tok")...).Err())
			for k, dump := range before {
				must(t, r.rdb.Restore(r.ctx, k, 0, dump).Err())
			}
			// Its stream was read and acknowledged to its end (the recovery
			// waits for that before it repairs).
			must(t, r.rdb.XGroupCreate(r.ctx, r.eng.EventsKey("tok"), "orders", "$").Err())

			rep, err := r.eng.Repair(r.ctx, "tok", nil)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if o, err := r.eng.Order(r.ctx, rc.Order.ID); err != nil || o.UserID != "alice" {
				t.Fatalf("alice's order after the repair: %+v, %v (%+v)", o, err, rep)
			}
			for _, u := range []string{"alice", "bob"} {
				if rc, err := r.buyWith(u, "tok-"+u, time.Hour); !errors.Is(err, inventory.ErrTokenSpent) {
					t.Errorf("%s's spent token after the repair: %+v, %v; want ErrTokenSpent (repair %+v)", u, rc.Order, err, rep)
				}
			}
		})
	}
}

// TestAdoptSpentTokens: the tokens an instance hands over with its
// acknowledged orders are kept with the orders' sales, once each; the
// snapshot of a sale has those whose life is not over.
func TestAdoptSpentTokens(t *testing.T) {
	onBoth(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now()
		live := inventory.SpentToken{Token: "t1", UserID: "u1", OrderID: inventory.NewOrderID("s1"), Until: now.Add(time.Hour).Truncate(time.Millisecond).UTC()}
		over := inventory.SpentToken{Token: "t2", UserID: "u2", OrderID: inventory.NewOrderID("s1"), Until: now.Add(-time.Second)}
		other := inventory.SpentToken{Token: "t1", UserID: "u3", OrderID: inventory.NewOrderID("s2"), Until: now.Add(time.Hour)}
		must(t, s.CreateSale(ctx, Sale{Sale: inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 5}}}, CreatedAt: now}))
		must(t, s.AdoptSpentTokens(ctx, nil))
		for range 2 {
			must(t, s.AdoptSpentTokens(ctx, []inventory.SpentToken{live, over, other}))
		}
		snap, err := s.Snapshot(ctx, "s1")
		must(t, err)
		check(t, "spent tokens of s1", snap.SpentTokens, []inventory.SpentToken{live})

		// Archived, the sale is never rebuilt: its tokens go.
		must(t, s.FinishArchive(ctx, "s1", now)) // not archiving: nothing changes
		snap, err = s.Snapshot(ctx, "s1")
		must(t, err)
		check(t, "spent tokens of s1 not archiving", len(snap.SpentTokens), 1)
		must(t, s.BeginArchive(ctx, "s1", now))
		must(t, s.FinishArchive(ctx, "s1", now))
		var left int
		must(t, s.queryRow(ctx, s.db, "SELECT COUNT(*) FROM spent_tokens WHERE sale_id = ?", "s1").Scan(&left))
		check(t, "rows of the archived sale's spent tokens", left, 0)
	})
}
