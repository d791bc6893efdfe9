package service

import (
	"context"
	"errors"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// Moves of units between the segments of a segmented sale
// (inventory.Engine.Move, from segment.Seller's refills) are two script
// calls; the units are in neither segment between them. A move whose second
// call never runs — its instance died, the call failed, its buyer's request
// was cancelled, it met a segment fenced as degraded mode began — is noted
// in the engine's index of pending moves, and every instance finishes such
// moves (FinishPendingMoves) within a few seconds, whoever began them, as
// long as Redis sells. A move is left to the instance making it for
// movesGrace first. The reconcile loop finishes any move a segment's
// records show pending too (reconcileLoop), in case its note was lost.

// finishMovesEvery is how often an instance looks for moves left pending.
// With nothing pending it costs one command.
const finishMovesEvery = time.Second

// movesGrace is how long a move is its own instance's before the others
// finish it: a move under way takes a few round trips.
const movesGrace = time.Second

// finishMovesLoop finishes the moves left pending, every finishMovesEvery,
// until ctx ends.
func (s *Service) finishMovesLoop(ctx context.Context) {
	t := time.NewTicker(finishMovesEvery)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Not while the database sells (the segments are fenced: the
		// moves wait for Redis), nor while this instance holds Redis back.
		if !s.seller.RedisSells() {
			continue
		}
		n, err := s.eng.FinishPendingMoves(ctx, movesGrace)
		if n > 0 {
			s.log.Info("finished moves between segments left pending", "moves", n)
		}
		// A fenced segment is degraded mode's: its move waits for the
		// recovery. Anything else is said once a minute at most.
		if err != nil && ctx.Err() == nil && !errors.Is(err, inventory.ErrFenced) && time.Since(warned) > time.Minute {
			warned = time.Now()
			s.log.Warn("moves between segments left pending, not finished yet", "err", err)
		}
	}
}
