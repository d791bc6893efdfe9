package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The index of pending moves (keys.go: pendingMovesKey) is how a move whose
// second half never ran is found without looking at every sale: Move notes
// "<source sale>|<move id>" in it, scored with the time, before the out
// half, and takes it out once the move is done (or took nothing). What a
// move did is in the source sale's record of it (move.lua), so the index
// says only where to look:
//
//   - the record says "out": the units left the source and their arrival
//     is not confirmed; FinishPendingMoves applies the in half (once per
//     move, whoever else does too) and marks the record done;
//   - it says "done": the move finished, only its note was left;
//   - there is none: the out half has not run, or never will (the process
//     died before it, its call never reached Redis). Such a note is kept
//     for abandonAfter, in case the call is still on its way, then dropped.
//
// A sale rebuilt from the system of record notes the moves out of it that
// the system of record shows pending. What is noted nowhere (an index lost
// with its node, say) is still in the sale's records: FinishMoves of the
// sale finds it.

// abandonAfter is how long a note whose move left no record is kept: a
// move's out half is sent right after its note, so after this long it
// never will be.
const abandonAfter = time.Minute

// pendingBatch bounds the notes one FinishPendingMoves looks at.
const pendingBatch = 256

// notePending notes a move of units out of saleID in the index.
func (e *Engine) notePending(ctx context.Context, saleID, moveID string) error {
	z := redis.Z{Score: float64(e.nowMs()), Member: saleID + "|" + moveID}
	if err := e.rdb.ZAddNX(ctx, e.pendingMovesKey(), z).Err(); err != nil {
		return fmt.Errorf("seckill: note move %s of sale %s: %w", moveID, saleID, err)
	}
	return nil
}

// forgetPending takes a move out of the index, once it is done or took
// nothing. A note this fails to remove is removed by FinishPendingMoves,
// which finds the move done.
func (e *Engine) forgetPending(ctx context.Context, saleID, moveID string) {
	_ = e.rdb.ZRem(ctx, e.pendingMovesKey(), saleID+"|"+moveID).Err()
}

// FinishPendingMoves finishes the moves that any process left pending: a
// process that died between the two halves of a Move, a second half that
// failed or met a fenced sale. It looks at the moves noted at least
// olderThan ago (the ones under way are their own Move's), at most a few
// hundred at a time, oldest first, and returns how many of them it
// finished or found finished. A move it cannot finish now (its
// destination is fenced while the database sells, a node is away) stays
// noted for the next call; the error says why. Finishing a move twice
// changes nothing, so every process may call it, as often as it likes;
// when nothing is pending it costs one command.
func (e *Engine) FinishPendingMoves(ctx context.Context, olderThan time.Duration) (int, error) {
	now := e.nowMs()
	notes, err := e.rdb.ZRangeByScoreWithScores(ctx, e.pendingMovesKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now-olderThan.Milliseconds(), 10), Count: pendingBatch,
	}).Result()
	if err != nil || len(notes) == 0 {
		if err != nil {
			err = fmt.Errorf("seckill: read pending moves: %w", err)
		}
		return 0, err
	}
	type note struct {
		sale, id string
		at       int64
		rec      *redis.StringCmd
		exists   *redis.IntCmd
	}
	list := make([]note, 0, len(notes))
	p := e.rdb.Pipeline()
	for _, z := range notes {
		member, _ := z.Member.(string)
		sale, id, ok := strings.Cut(member, "|")
		if !ok || !ValidID(sale) {
			_ = e.rdb.ZRem(ctx, e.pendingMovesKey(), member).Err() // not a note Move wrote
			continue
		}
		k := e.keys(sale).sale
		list = append(list, note{sale: sale, id: id, at: int64(z.Score),
			rec: p.HGet(ctx, k, movePrefix+id), exists: p.Exists(ctx, k)})
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	finished := 0
	var errs []error
	for _, n := range list {
		rec, err := n.rec.Result()
		switch {
		case errors.Is(err, redis.Nil) && n.exists.Val() == 1:
			if now-n.at > abandonAfter.Milliseconds() {
				e.forgetPending(ctx, n.sale, n.id) // its out half never ran
			}
		case errors.Is(err, redis.Nil) && n.exists.Err() == nil:
			// The sale is not in Redis: rebuilt, it gets its records back
			// (and notes its pending moves again); gone for good (archived,
			// unknown), it has nothing left to move.
			if _, err := e.Stock(ctx, n.sale); err != nil {
				var archived *ArchivedError
				if errors.Is(err, ErrNotFound) || errors.As(err, &archived) {
					e.forgetPending(ctx, n.sale, n.id)
					continue
				}
				errs = append(errs, err)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("seckill: read move %s of sale %s: %w", n.id, n.sale, err))
		default:
			m, derr := decodeMove(n.id, rec)
			switch {
			case derr != nil:
				errs = append(errs, fmt.Errorf("%w: sale %s: %v", ErrCorrupt, n.sale, derr))
			case m.Units < 0 && !m.Arrived:
				if err := e.finishFound(ctx, n.sale, m.ID, m.Peer, m.SKU, -m.Units); err != nil {
					errs = append(errs, fmt.Errorf("seckill: finish move %s of sale %s: %w", m.ID, n.sale, err))
					continue
				}
				finished++
			default: // done (or not a move out): only its note was left
				e.forgetPending(ctx, n.sale, n.id)
				finished++
			}
		}
	}
	return finished, errors.Join(errs...)
}

// notePendingOf notes the moves out of a rebuilt sale that its snapshot
// shows pending, for FinishPendingMoves to finish. A note that fails is no
// loss of the move: FinishMoves of the sale still finds its record.
func (e *Engine) notePendingOf(ctx context.Context, saleID string, moves []Move) {
	for _, m := range moves {
		if m.Units < 0 && !m.Arrived {
			_ = e.notePending(ctx, saleID, m.ID)
		}
	}
}
