package failover

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/store"
)

// moveStore records the hand-over of moves.
type moveStore struct {
	fakeStore
	moves, unsure []inventory.MoveHalf
}

func (s *moveStore) AdoptOrders(context.Context, []inventory.Order) error { return nil }
func (s *moveStore) MarkUnsure(context.Context, []inventory.Order) error  { return nil }
func (s *moveStore) AdoptMoves(_ context.Context, moves, unsure []inventory.MoveHalf) error {
	s.moves, s.unsure = moves, unsure
	return nil
}

// TestMovesAreHandedOver: the halves of moves Redis acknowledged are handed
// over with their units (an out half with what it took), once each; an out
// half of unknown outcome as unsure, with the most it may have taken, and
// an in half of unknown outcome not at all (the database then counts the
// units nowhere: it sells fewer, never more). Once Redis does not sell, a
// half is refused unsent, as a fenced sale; while one is on its way, the
// hand-over waits for it.
func TestMovesAreHandedOver(t *testing.T) {
	db := &moveStore{}
	f := New(Config{Tick: 1 << 40, AckRing: 4})
	f.Wire(Parts{Engine: &fakeEngine{}, Store: db})
	ctx := context.Background()
	half := func(sale, id string, units int64) inventory.MoveHalf {
		return inventory.MoveHalf{SaleID: sale, Move: inventory.Move{ID: id, Peer: "p:9", SKU: "A", Units: units}}
	}
	move := func(h inventory.MoveHalf, moved int64, err error) {
		t.Helper()
		if e := f.BeginMove(ctx, h); e != nil {
			t.Fatalf("BeginMove while redis sells: %v", e)
		}
		f.EndMove(h, moved, err)
	}
	move(half("p:0", "m1", -5), 3, nil)                 // took 3 of the 5 asked
	move(half("p:9", "m1", 3), 3, nil)                  // its in half
	move(half("p:9", "m1", 3), 3, nil)                  // the in half again (FinishMoves: a replay)
	move(half("p:0", "m2", -2), 0, nil)                 // nothing left to take
	move(half("p:0", "m3", -2), 0, io.ErrUnexpectedEOF) // reply lost
	move(half("p:9", "m4", 1), 0, io.ErrUnexpectedEOF)  // in half's reply lost
	move(half("p:0", "m5", -1), 0, inventory.ErrFenced) // refused by Redis
	f.set(store.SellMode{Mode: store.ModeDB, Epoch: 2})
	if err := f.BeginMove(ctx, half("p:0", "m6", -1)); !errors.Is(err, inventory.ErrFenced) {
		t.Fatalf("BeginMove while the database sells: %v, want a fenced refusal", err)
	}
	if n := f.redisBuys.Load(); n != 0 {
		t.Fatalf("%d halves still counted on their way", n)
	}
	f.flush(ctx, 2, false)
	want := []inventory.MoveHalf{half("p:0", "m1", -3), half("p:9", "m1", 3)}
	if len(db.moves) != len(want) || db.moves[0] != want[0] || db.moves[1] != want[1] {
		t.Errorf("handed over %+v, want %+v", db.moves, want)
	}
	if len(db.unsure) != 1 || db.unsure[0] != half("p:0", "m3", -2) {
		t.Errorf("handed over as unsure %+v", db.unsure)
	}
	if f.flushedEpoch() != 2 {
		t.Errorf("not marked handed over")
	}
	// A recovery settles the unsure halves handed over.
	f.acks.settle()
	if _, unsure := f.acks.moveSnapshot(); len(unsure) != 0 {
		t.Errorf("unsure halves after the recovery: %+v", unsure)
	}
}
