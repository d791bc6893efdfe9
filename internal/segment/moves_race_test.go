package segment_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// TestMovesRaceRebuilds: every segment but one is lost from Redis while a
// crowd is about to buy; the crowd's buys rebuild their home segments and
// fall through, so moves take units out of segments that are being rebuilt
// and into them, while Rebalance runs too. Every unit is sold exactly once,
// every buyer within the limit at home, and Redis and the database agree
// segment by segment (moves included) once the consumer has caught up.
func TestMovesRaceRebuilds(t *testing.T) {
	t.Parallel()
	const stock, k, limit = 48, 4, 1
	x := newE2E(t, backends[0], dbtest.SQLiteURL(t))
	x.createRecorded(inventory.Sale{ID: "race", PerUserLimit: limit, Items: []inventory.Item{{SKU: "A", Stock: stock}}}, k)
	// Buyers: three in four at home in the first segment, so that it runs
	// dry at once and its buyers move units from the others.
	var buyers []string
	for u := 0; len(buyers) < 3*stock; u++ {
		user := fmt.Sprintf("r%04d", u)
		if segment.Home(x.ids, user) == x.ids[0] || u%4 == 0 {
			buyers = append(buyers, user)
		}
	}
	// A few buys first, so that the database has orders to rebuild from.
	for _, u := range buyers[:6] {
		if _, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "race", UserID: u, Lines: one("A")}); err != nil {
			t.Fatal(err)
		}
	}
	x.settle()
	for _, seg := range x.ids[:k-1] {
		x.lose(seg)
	}

	var (
		mu   sync.Mutex
		sold = 6
		wg   sync.WaitGroup
	)
	jobs := make(chan string)
	for range 16 {
		wg.Go(func() {
			for u := range jobs {
				_, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "race", UserID: u, Lines: one("A")})
				mu.Lock()
				switch {
				case err == nil:
					sold++
				case errors.Is(err, inventory.ErrSoldOut):
				default:
					t.Errorf("Buy(%s): %v", u, err)
				}
				mu.Unlock()
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 5 {
				if _, err := x.sel.Rebalance(x.ctx, "race"); err != nil {
					t.Errorf("Rebalance: %v", err)
				}
			}
		})
	}
	for _, u := range buyers[6:] {
		jobs <- u
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, seg := range x.ids {
		if _, err := x.eng.FinishMoves(x.ctx, seg); err != nil {
			t.Errorf("FinishMoves(%s): %v", seg, err)
		}
	}
	if moves, _ := x.sel.Moved(); moves == 0 {
		t.Error("no move: the buys never fell through")
	}
	if sold != stock {
		t.Errorf("%d buys succeeded, the stock is %d and demand far beyond it", sold, stock)
	}
	tot := x.totals("race")["A"]
	if tot.Stocked != stock || tot.Sold != stock || tot.Remaining != 0 || x.ordered("race")["A"] != stock {
		t.Errorf("totals over the segments %+v, orders hold %d; want all %d sold once", tot, x.ordered("race")["A"], stock)
	}
	x.settle()
	if stocked := x.checkBooks(limit); stocked["A"] != stock {
		t.Errorf("the database's stocked total over the segments: %d, want %d", stocked["A"], stock)
	}
}

// TestRebalanceRebuildsLostSegments: Rebalance of a sale one of whose
// segments was lost from Redis rebuilds it from the database (with its
// records of moves, so a move it left pending is finished) and evens the
// units out, instead of failing as if the sale did not exist.
func TestRebalanceRebuildsLostSegments(t *testing.T) {
	t.Parallel()
	x := recordedSale(t, 12, 3)
	// A move out of the segment about to be lost, left pending (its
	// process died before the in half), and some units sold elsewhere.
	if n, err := x.eng.Move(x.ctx, x.ids[1], x.ids[0], "A", 2); err != nil || n != 2 {
		t.Fatalf("Move = %d, %v", n, err)
	}
	x.undone(x.ids[1])
	if _, err := x.sel.Buy(x.ctx, inventory.BuyRequest{SaleID: "mv", UserID: userAt(x.ids, x.ids[2], 0), Lines: one("A")}); err != nil {
		t.Fatal(err)
	}
	x.settle()
	x.lose(x.ids[1])
	moved, err := x.sel.Rebalance(x.ctx, "mv")
	if err != nil {
		t.Fatalf("Rebalance with a segment lost from Redis: %v", err)
	}
	rem := x.remaining("A")
	if sum(rem) != 11 {
		t.Errorf("remaining %v after Rebalance (moved %d): %d units, want the 11 unsold", rem, moved, sum(rem))
	}
	for i, r := range rem {
		if r < 3 || r > 4 {
			t.Errorf("segment %s has %d of the 11 units after Rebalance: not evened out (%v)", x.ids[i], r, rem)
		}
	}
	for _, seg := range x.ids {
		if n, err := x.eng.FinishMoves(x.ctx, seg); err != nil || n != 0 {
			t.Errorf("FinishMoves(%s) = %d, %v after Rebalance: a move was left pending", seg, n, err)
		}
	}
}
