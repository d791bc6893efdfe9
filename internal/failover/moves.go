package failover

import (
	"context"
	"fmt"

	"github.com/seckill/seckill/internal/inventory"
)

// errMovesStopped refuses a half of a move while Redis does not sell: the
// database may be selling the units it would move. It matches
// inventory.ErrFenced, as Redis's own refusal of a fenced sale does.
var errMovesStopped = fmt.Errorf("failover: redis does not sell now, no move between segments: %w", inventory.ErrFenced)

// BeginMove is told of a half of a move between segments before the
// engine sends it to Redis (inventory.MoveWatch: the service gives the
// seller to its engine as inventory.Options.Moves). It is counted on its
// way as a buy is, so that a hand-over waits for it, and refused once
// Redis does not sell: a move's out half still in its stream when the
// database takes over would otherwise leave the database counting its
// units in the segment they left, and selling them there.
func (f *Seller) BeginMove(_ context.Context, _ inventory.MoveHalf) error {
	if !f.beginRedisBuy() {
		return errMovesStopped
	}
	return nil
}

// EndMove records how a half of a move begun with BeginMove ended: a half
// Redis acknowledged is handed over with the orders (store.AdoptMoves); an
// out half whose outcome is unknown is handed over as unsure, and the
// database holds the units it may have taken until the recovery settles
// it.
func (f *Seller) EndMove(h inventory.MoveHalf, moved int64, err error) {
	defer f.redisBuys.Add(-1)
	switch {
	case err == nil && moved > 0:
		if h.Units < 0 {
			moved = -moved
		}
		h.Units = moved
		f.acks.addMove(h)
	case h.Units < 0 && inventory.OutcomeUnknown(err):
		f.acks.addUnsureMove(h)
	}
}
