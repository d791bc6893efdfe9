package failover

import (
	"context"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// fakeEngine answers every buy with err (or an order), counting the calls.
type fakeEngine struct {
	Engine // the methods a test does not use panic
	err    error
	buys   []inventory.CheckedBuy
}

func (e *fakeEngine) BuyChecked(_ context.Context, b inventory.CheckedBuy) (inventory.Receipt, error) {
	e.buys = append(e.buys, b)
	if e.err != nil {
		return inventory.Receipt{}, e.err
	}
	return inventory.Receipt{Order: inventory.Order{ID: b.OrderID(), SaleID: b.SaleID(), UserID: b.UserID(), Items: b.Lines()}}, nil
}

// fakeStore sells every database buy, counting them.
type fakeStore struct {
	Store
	buys []store.DegradedBuy
}

func (s *fakeStore) Buy(_ context.Context, b store.DegradedBuy) (inventory.Receipt, error) {
	s.buys = append(s.buys, b)
	return inventory.Receipt{Order: inventory.Order{ID: "db-order", SaleID: b.Buy.SaleID(), UserID: b.Buy.UserID()}}, nil
}

func newSeller(eng *fakeEngine, db *fakeStore) *Seller {
	f := New(Config{Tick: time.Second, AckRing: 4})
	f.Wire(Parts{Engine: eng, Store: db})
	return f
}

// dbMode makes the database sell, as a tick that found every instance
// handed over would.
func dbMode(f *Seller) {
	f.set(store.SellMode{Mode: store.ModeDB, Epoch: 2})
	f.flushed, f.fleetEpoch = 2, 2
}

func buy(user string) inventory.CheckedBuy {
	b, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
	if err != nil {
		panic(err)
	}
	return b
}

// TestBuyFromRedisIsAcked: a buy Redis sells gets an order id chosen before
// it is sent, and its order is in the hand-over.
func TestBuyFromRedisIsAcked(t *testing.T) {
	eng, db := &fakeEngine{}, &fakeStore{}
	f := newSeller(eng, db)
	rc, err := f.Buy(context.Background(), buy("u1"))
	if err != nil || rc.Order.ID == "" || len(eng.buys) != 1 || eng.buys[0].OrderID() != rc.Order.ID || len(db.buys) != 0 {
		t.Fatalf("Buy = %+v, %v; engine %+v, database %+v", rc, err, eng.buys, db.buys)
	}
	acked, _, unsure, err := f.acks.snapshot()
	if err != nil || len(acked) != 1 || acked[0].ID != rc.Order.ID || len(unsure) != 0 {
		t.Fatalf("hand-over: acked %+v, unsure %+v, %v", acked, unsure, err)
	}
}

// TestBuyOfUnknownOutcomeIsUnsure: a buy whose reply was lost is handed
// over as unsure under the id it was sent with; a buy Redis refused is not.
func TestBuyOfUnknownOutcomeIsUnsure(t *testing.T) {
	eng, db := &fakeEngine{err: io.ErrUnexpectedEOF}, &fakeStore{}
	f := newSeller(eng, db)
	if _, err := f.Buy(context.Background(), buy("u1")); !errors.Is(err, ErrNobodySells) {
		t.Fatalf("a buy of unknown outcome with nobody else selling: %v, want ErrNobodySells", err)
	}
	eng.err = &inventory.SoldOutError{SKUs: []string{"A"}}
	if _, err := f.Buy(context.Background(), buy("u2")); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a sold-out buy: %v", err)
	}
	acked, _, unsure, err := f.acks.snapshot()
	if err != nil || len(acked) != 0 || len(unsure) != 1 || unsure[0].ID != eng.buys[0].OrderID() || unsure[0].UserID != "u1" {
		t.Fatalf("hand-over: acked %+v, unsure %+v (sent %+v), %v", acked, unsure, eng.buys, err)
	}
	if n := f.redisBuys.Load(); n != 0 {
		t.Fatalf("%d buys still counted on their way to Redis", n)
	}
}

// TestBuyWhileTheDatabaseSells: the database sells, with the checks buy.lua
// makes in Redis asked first; a token buy is refused, and nothing reaches
// Redis.
func TestBuyWhileTheDatabaseSells(t *testing.T) {
	eng, db := &fakeEngine{}, &fakeStore{}
	f := newSeller(eng, db)
	asked := 0
	f.cfg.BeforeDatabaseBuy = func(context.Context, inventory.CheckedBuy) error { asked++; return nil }
	dbMode(f)
	rc, err := f.Buy(context.Background(), buy("u1"))
	if err != nil || rc.Order.ID != "db-order" || len(db.buys) != 1 || db.buys[0].Epoch != 2 || asked != 1 {
		t.Fatalf("Buy = %+v, %v; database %+v, asked %d", rc, err, db.buys, asked)
	}
	tok, err := buy("u2").WithToken("t1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Buy(context.Background(), tok); !errors.Is(err, ErrTokensNeedRedis) {
		t.Fatalf("a token buy while the database sells: %v, want ErrTokensNeedRedis", err)
	}
	if len(eng.buys) != 0 || len(db.buys) != 1 {
		t.Fatalf("engine %+v, database %+v", eng.buys, db.buys)
	}
}

// TestFencedBuyGoesToTheDatabaseOnceItSells: a buy Redis refuses as fenced
// is sold by the database if the mode changed to it on the way, and
// refused (ErrNobodySells) before the database sells.
func TestFencedBuyGoesToTheDatabaseOnceItSells(t *testing.T) {
	eng, db := &fakeEngine{err: inventory.ErrFenced}, &fakeStore{}
	f := newSeller(eng, db)
	f.set(store.SellMode{Mode: store.ModeRedis}) // the mode is known: no stale fence to lift
	f.db = &liftless{db}
	if _, err := f.Buy(context.Background(), buy("u1")); !errors.Is(err, ErrNobodySells) {
		t.Fatalf("fenced, nobody else selling: %v", err)
	}
	f.flushed, f.fleetEpoch = 2, 2
	f.mode = store.SellMode{Mode: store.ModeDB, Epoch: 2} // switched while the buy was on its way
	rc, err := f.Buy(context.Background(), buy("u2"))
	if err != nil || rc.Order.ID != "db-order" || len(db.buys) != 1 {
		t.Fatalf("fenced, the database sells: %+v, %v; database %+v", rc, err, db.buys)
	}
}

// liftless reads a mode in which no fence is stale.
type liftless struct{ *fakeStore }

func (l *liftless) SellMode(context.Context) (store.SellMode, error) {
	return store.SellMode{Mode: store.ModeDB, Epoch: 2}, nil
}

// TestTokenBuyIsHandedOverWithItsToken: the purchase token an
// acknowledged buy spent is handed over with its order, spent until its
// life is over; a buy without a token leaves nothing more in the ring than
// its order.
func TestTokenBuyIsHandedOverWithItsToken(t *testing.T) {
	eng, db := &fakeEngine{}, &fakeStore{}
	f := newSeller(eng, db)
	plain, err := f.Buy(context.Background(), buy("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(f.acks.buf[0]), len(appendOrder(nil, plain.Order)); got != want {
		t.Fatalf("a buy without a token takes %d bytes of the ring, its order %d", got, want)
	}
	tok, err := buy("u2").WithToken("t2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := f.Buy(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	acked, spent, _, err := f.acks.snapshot()
	want := []inventory.SpentToken{{Token: "t2", UserID: "u2", OrderID: rc.Order.ID, Until: rc.Order.CreatedAt.Add(time.Minute)}}
	if err != nil || len(acked) != 2 || !reflect.DeepEqual(spent, want) {
		t.Fatalf("hand-over: acked %+v, spent %+v, %v; want spent %+v", acked, spent, err, want)
	}
}

// TestBoughtNamesTheSaleOfEachRedisBuy: Config.Bought is told the sale of
// every buy Redis sold, and of no buy it refused or the database sold.
func TestBoughtNamesTheSaleOfEachRedisBuy(t *testing.T) {
	var told []string
	eng, db := &fakeEngine{}, &fakeStore{}
	f := New(Config{Tick: time.Second, AckRing: 4, Bought: func(saleID string) { told = append(told, saleID) }})
	f.Wire(Parts{Engine: eng, Store: db})
	if _, err := f.Buy(context.Background(), buy("u1")); err != nil {
		t.Fatal(err)
	}
	eng.err = &inventory.SoldOutError{}
	if _, err := f.Buy(context.Background(), buy("u2")); err == nil {
		t.Fatal("a refused buy succeeded")
	}
	eng.err = nil
	dbMode(f)
	if _, err := f.Buy(context.Background(), buy("u3")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(told, []string{"s1"}) {
		t.Fatalf("Bought told %v, want [s1] (the one buy Redis sold)", told)
	}
}
