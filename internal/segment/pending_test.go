package segment_test

import (
	"errors"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
)

// TestStockCountsUnitsOnTheirWay: a move's units left one segment and have
// not reached the other (its in half meets a fenced segment). The sale's
// sum still stocks every unit, and says how many are moving; once any
// engine finishes the move (FinishPendingMoves), they are left in a
// segment again. Before, the sum read 8 stocked of 10 until someone ran
// Rebalance, which nothing did.
func TestStockCountsUnitsOnTheirWay(t *testing.T) {
	t.Parallel()
	x := recordedSale(t, 10, 2)
	from, to := x.ids[1], x.ids[0]
	if _, err := x.eng.Fence(x.ctx, to, 1); err != nil {
		t.Fatal(err)
	}
	var me *inventory.MoveError
	if _, err := x.eng.Move(x.ctx, from, to, "A", 2); !errors.As(err, &me) || me.Units != 2 {
		t.Fatalf("Move to a fenced segment: %v", err)
	}
	if tot := x.totals("mv")["A"]; tot.Stocked != 10 || tot.Remaining != 8 || tot.Sold != 0 {
		t.Fatalf("with the move pending the sale reads %+v, want 10 stocked, 8 remaining, 2 moving", tot)
	}
	if err := x.eng.Unfence(x.ctx, to, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := x.eng.FinishPendingMoves(x.ctx, 0); err != nil || n != 1 {
		t.Fatalf("FinishPendingMoves: %d, %v", n, err)
	}
	if tot := x.totals("mv")["A"]; tot.Stocked != 10 || tot.Remaining != 10 || tot.Sold != 0 {
		t.Fatalf("with the move finished the sale reads %+v", tot)
	}
}

// TestRebuiltSourceNotesItsPendingMoves: the source of a move left pending
// is lost from Redis together with the index of pending moves (a flush).
// Rebuilt from the database, it notes the move again, so that
// FinishPendingMoves finishes it without anyone knowing of it.
func TestRebuiltSourceNotesItsPendingMoves(t *testing.T) {
	t.Parallel()
	x := recordedSale(t, 10, 2)
	from, to := x.ids[1], x.ids[0]
	if _, err := x.eng.Fence(x.ctx, to, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := x.eng.Move(x.ctx, from, to, "A", 2); err == nil {
		t.Fatal("Move to a fenced segment succeeded")
	}
	if err := x.eng.Unfence(x.ctx, to, 1); err != nil {
		t.Fatal(err)
	}
	x.settle()
	x.lose(from)
	if err := x.rdb.Del(x.ctx, "{"+x.prefix+":}:moves").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.eng.Stock(x.ctx, from); err != nil { // rebuilt
		t.Fatal(err)
	}
	if n, err := x.eng.FinishPendingMoves(x.ctx, 0); err != nil || n != 1 {
		t.Fatalf("FinishPendingMoves after the rebuild: %d, %v", n, err)
	}
	if rem := x.remaining("A"); rem[0] != 7 || rem[1] != 3 {
		t.Fatalf("remaining %v, want [7 3]", rem)
	}
}
