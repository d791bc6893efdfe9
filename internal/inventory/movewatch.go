package inventory

import "context"

// MoveHalf is one half of a move (Move, FinishMoves) as the sale it
// changes records it: Units < 0 out of SaleID, > 0 into it.
type MoveHalf struct {
	SaleID string
	Move
}

// MoveWatch is told of every half of a move that changes a sale's stock
// (out, in), as the engine sends it to Redis (Options.Moves). BeginMove
// comes before the half is sent; its error refuses the half (nothing is
// sent, and the call fails with that error). EndMove comes after, with the
// units the half moved (an out half's h.Units is minus the most it may
// take; moved is what it took, 0 when nothing was left) and its error. The
// halves are journaled in the sales' streams, which the system of record
// follows behind: a watcher that hands the database what Redis may not
// have passed on yet (failover.Seller does, when the database takes over
// from Redis) counts each half it is told of once Redis acknowledged it,
// and an out half whose outcome is unknown (OutcomeUnknown) as one that
// may have taken its units. A move finished from its source's record
// (FinishMoves, FinishPendingMoves) has its out half told as one Redis
// acknowledged (BeginMove, then EndMove with no error) before its in half
// is sent: the record says it ran, and the process that ran it may be
// gone with its own account of it.
type MoveWatch interface {
	BeginMove(ctx context.Context, h MoveHalf) error
	EndMove(h MoveHalf, moved int64, err error)
}
