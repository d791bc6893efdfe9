package segment_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
	"github.com/seckill/seckill/internal/waitfor"
)

// These tests stop a refill at chosen points, with a hook on the Seller's
// Redis client, to pin down how it counts units that are moving between
// segments: a buyer is refused only when a read of the segments that no
// move of this Seller overlapped finds too few, and units it saw but lost to
// other moves are looked for again, not taken for sold.

// interposer is a go-redis hook. While held, the in half of every move (its
// units out of one segment, not yet in the other) waits for letGo; the next
// read of what is left of an item in the segments (Engine.Remaining: one
// pipeline of HGETs) runs through the function set by onNextRead.
type interposer struct {
	held    atomic.Bool
	release chan struct{}
	waiting atomic.Int64
	read    atomic.Pointer[func(context.Context, []redis.Cmder, redis.ProcessPipelineHook) error]
}

func (ip *interposer) hold() {
	ip.release = make(chan struct{})
	ip.held.Store(true)
}

func (ip *interposer) letGo() {
	ip.held.Store(false)
	close(ip.release)
}

// awaitHeld waits until n in halves are held.
func (ip *interposer) awaitHeld(t *testing.T, n int64) {
	t.Helper()
	waitfor.Until(t, waitfor.Patience, fmt.Sprintf("%d moves held between their halves", n), func() error {
		if got := ip.waiting.Load(); got != n {
			return fmt.Errorf("%d held", got)
		}
		return nil
	})
}

func (ip *interposer) onNextRead(f func(context.Context, []redis.Cmder, redis.ProcessPipelineHook) error) {
	ip.read.Store(&f)
}

func (ip *interposer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ip *interposer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// EVALSHA sha numkeys sale events now half id ...: move.lua's in half.
		a := cmd.Args()
		if ip.held.Load() && len(a) > 7 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") &&
			fmt.Sprint(a[6]) == "in" && strings.HasPrefix(fmt.Sprint(a[7]), "mv-") {
			ip.waiting.Add(1)
			<-ip.release
		}
		return next(ctx, cmd)
	}
}

func (ip *interposer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); c.Name() != "hget" || len(a) != 3 || a[2] != "r:X" {
				return next(ctx, cmds)
			}
		}
		if f := ip.read.Swap(nil); f != nil {
			return (*f)(ctx, cmds, next)
		}
		return next(ctx, cmds)
	}
}

// lastSegmentHolds creates sale "hot" of 4 segments, whose stock units of
// X (at most 4) are all in the last one, with a Seller whose sold-out
// flags last until cleared, on a client of the machine's Redis with an
// interposer.
func lastSegmentHolds(t *testing.T, stock int64) (*rig, []string, *interposer) {
	t.Helper()
	frozen := time.Now()
	r := newRig(t, backends[0], inventory.Options{}, segment.Options{Clock: inventory.ClockFunc(func() time.Time { return frozen })})
	ids := r.create(inventory.Sale{ID: "hot", PerUserLimit: 1, Items: []inventory.Item{{SKU: "X", Stock: stock}}}, 4)
	for _, id := range ids[:3] {
		if _, err := r.eng.Move(r.ctx, id, ids[3], "X", 1); err != nil {
			t.Fatal(err)
		}
	}
	if rem := r.rem(ids); rem[3] != stock {
		t.Fatalf("remaining %v, want all %d in the last segment", rem, stock)
	}
	ip := &interposer{}
	r.rdb.AddHook(ip)
	return r, ids, ip
}

func (r *rig) rem(ids []string) []int64 {
	r.t.Helper()
	rem, err := r.eng.Remaining(r.ctx, "X", ids...)
	if err != nil {
		r.t.Fatal(err)
	}
	return rem
}

// buyAsync buys one X of "hot" for user, and sends the outcome.
func (r *rig) buyAsync(user string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := r.sel.Buy(r.ctx, inventory.BuyRequest{SaleID: "hot", UserID: user, Lines: one("X")})
		ch <- err
	}()
	return ch
}

// outcome waits for a buy's outcome.
func outcome(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitfor.Patience):
		t.Fatalf("%s: no outcome within %v", what, waitfor.Patience)
		return nil
	}
}

// mustSell checks that every unit of X was sold once.
func (r *rig) mustSell(stock int64) {
	r.t.Helper()
	if tot := r.totals("hot")["X"]; tot.Sold != stock || tot.Remaining != 0 {
		r.t.Errorf("totals %+v, want all %d sold", tot, stock)
	}
}

// TestRefillWaitsForUnitsInFlight: two buyers' refills move every unit of
// the item out of the last segment, and both moves are held between their
// halves, so that a third buyer's refill reads the segments with no unit
// in any. Then the moves land (and their buyers buy one unit each, leaving
// one) before that refill goes on. It must count the units that were in
// flight: read again and sell the last unit. Before the fix the refill
// looked at the moves under way only after its read, found none by then,
// flagged the item sold out and refused the buyer with a unit left (the
// flake of TestEveryUnitFindsItsBuyer: 1 of 600 refused, Remaining 1).
func TestRefillWaitsForUnitsInFlight(t *testing.T) {
	r, ids, ip := lastSegmentHolds(t, 3)
	ip.hold()
	v := r.buyAsync(userAt(ids, ids[0], 0)) // moves 2 of the 3
	ip.awaitHeld(t, 1)
	w := r.buyAsync(userAt(ids, ids[1], 0)) // moves the last
	ip.awaitHeld(t, 2)
	if rem := r.rem(ids); sum(rem) != 0 {
		t.Fatalf("remaining %v with both moves held, want every unit in flight", rem)
	}
	read, resume := make(chan struct{}), make(chan struct{})
	ip.onNextRead(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		err := next(ctx, cmds)
		close(read)
		<-resume
		return err
	})
	u := r.buyAsync(userAt(ids, ids[2], 0))
	select {
	case <-read:
	case <-time.After(waitfor.Patience):
		t.Fatal("the third buyer's refill never read the segments")
	}
	ip.letGo()
	if err := outcome(t, "first buyer", v); err != nil {
		t.Errorf("first buyer: %v", err)
	}
	if err := outcome(t, "second buyer", w); err != nil {
		t.Errorf("second buyer: %v", err)
	}
	close(resume)
	if err := outcome(t, "third buyer", u); err != nil {
		t.Errorf("third buyer, its unit in flight during its read: %v (remaining now %v)", err, r.rem(ids))
	}
	r.mustSell(3)
}

// TestRefillReadsAgainAfterMovesDuringTheRead: no move runs when a buyer's
// refill starts reading the segments, but a Rebalance of this Seller runs
// between its reads of the first two segments and of the others, moving
// both units from the last segment into the first two: the read sees no
// unit anywhere. The refill must read again (a move began during its read)
// and sell a unit, and must not flag the item sold out: the next buyer gets
// the other unit. Before the fix it flagged the item and refused both.
func TestRefillReadsAgainAfterMovesDuringTheRead(t *testing.T) {
	r, ids, ip := lastSegmentHolds(t, 2)
	ip.onNextRead(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		err := next(ctx, cmds[:2])
		if _, rerr := r.sel.Rebalance(ctx, "hot"); rerr != nil {
			t.Errorf("Rebalance: %v", rerr)
		}
		return errors.Join(err, next(ctx, cmds[2:]))
	})
	if err := outcome(t, "buyer", r.buyAsync(userAt(ids, ids[2], 0))); err != nil {
		t.Errorf("buyer whose read a Rebalance overlapped: %v (remaining now %v)", err, r.rem(ids))
	}
	if err := outcome(t, "next buyer", r.buyAsync(userAt(ids, ids[3], 0))); err != nil {
		t.Errorf("next buyer: %v (remaining now %v): the item was flagged sold out", err, r.rem(ids))
	}
	r.mustSell(2)
}

// TestRefillLooksAgainWhenItsSourceIsEmptied: a buyer's refill reads all
// three units in the last segment, and before it moves any, a Rebalance
// spreads them over the other segments (its home included). Its move finds
// the last segment empty; the units are not gone, so it must look again and
// sell one. Before the fix it refused the buyer as soon as the segments it
// had read were used up.
func TestRefillLooksAgainWhenItsSourceIsEmptied(t *testing.T) {
	r, ids, ip := lastSegmentHolds(t, 3)
	ip.onNextRead(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		err := next(ctx, cmds)
		if _, rerr := r.sel.Rebalance(ctx, "hot"); rerr != nil {
			t.Errorf("Rebalance: %v", rerr)
		}
		return err
	})
	if err := outcome(t, "buyer", r.buyAsync(userAt(ids, ids[2], 0))); err != nil {
		t.Errorf("buyer whose source was emptied by a Rebalance: %v (remaining now %v)", err, r.rem(ids))
	}
	for i, seg := range ids[:2] {
		if err := outcome(t, "buyer", r.buyAsync(userAt(ids, seg, 0))); err != nil {
			t.Errorf("buyer %d: %v", i, err)
		}
	}
	r.mustSell(3)
}
