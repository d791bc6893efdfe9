package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
)

// Move takes up to qty unsold units of a limited item from one sale and
// adds them to another sale with the same sku, and returns how many it
// moved: fewer than qty when fewer were left, 0 when none were. The segments
// of a hot item (package segment) use it to bring leftover units to the
// segment that sells them.
//
// The two sales may live on different Redis nodes, so a move is two script
// calls, each atomic on its own sale and journaled there as an EventMoved.
// The first takes the units from the source and records the move as pending
// in the source; the second adds them to the destination, once per move
// (the destination keeps the move's id). Units are never in both sales at
// once, so nothing can be sold twice.
//
// Before the first call the move is noted in an index of pending moves
// (one sorted set for every sale of the engine's prefix), and it leaves the
// index once done, so that a move whose second call never ran — the process
// died between the calls, the call failed, the destination is fenced — is
// found and finished by FinishPendingMoves, which any process may run. The
// second call does not depend on ctx: once the units have left the source,
// a caller that gives up does not strand them (it runs on its own, for up
// to moveFinishTimeout). If it fails (the error says so), the units are in
// neither sale until the move is finished; Move's error is then a
// *MoveError.
func (e *Engine) Move(ctx context.Context, fromSale, toSale, sku string, qty int64) (int64, error) {
	if err := validateID("from_sale", fromSale); err != nil {
		return 0, err
	}
	if err := validateID("to_sale", toSale); err != nil {
		return 0, err
	}
	if fromSale == toSale {
		return 0, invalid("to_sale", "is the sale the units come from")
	}
	if err := validateID("sku", sku); err != nil {
		return 0, err
	}
	if err := validateQty("qty", qty); err != nil {
		return 0, err
	}
	id := "mv-" + ulid.Make().String()
	if err := e.notePending(ctx, fromSale, id); err != nil {
		return 0, err
	}
	taken, _, err := e.moveHalf(ctx, fromSale, "out", id, toSale, sku, qty)
	if err != nil && !refused(err) {
		return 0, err // the out half may have run: the index keeps the move
	}
	if err != nil || taken == 0 {
		e.forgetPending(context.WithoutCancel(ctx), fromSale, id)
		return 0, err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveFinishTimeout)
	defer cancel()
	if err := e.finishMove(fctx, fromSale, id, toSale, sku, taken); err != nil {
		return 0, &MoveError{ID: id, From: fromSale, To: toSale, SKU: sku, Units: taken, Err: err}
	}
	return taken, nil
}

// moveFinishTimeout bounds the second half of a Move, which runs whatever
// becomes of its caller's context.
const moveFinishTimeout = 10 * time.Second

// refused reports whether a move half's error is a refusal from its script
// (nothing was written), not a call whose outcome is unknown.
func refused(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrCorrupt)
}

// MoveError is a move whose units left the source sale but may not have
// reached the destination: FinishPendingMoves (or FinishMoves on the
// source) completes it.
type MoveError struct {
	ID, From, To, SKU string
	Units             int64
	Err               error
}

func (e *MoveError) Error() string {
	return fmt.Sprintf("seckill: move %s of %d %s from %s to %s is pending: %v", e.ID, e.Units, e.SKU, e.From, e.To, e.Err)
}

func (e *MoveError) Unwrap() error { return e.Err }

// FinishMoves completes every move out of the sale whose units have left
// it but whose arrival was not confirmed (a process that died between the
// two halves of a Move, a failed second call), and returns how many it
// completed. Completing a move that did arrive changes nothing, so it is
// safe to call at any time, from any instance, as often as one likes.
func (e *Engine) FinishMoves(ctx context.Context, saleID string) (int, error) {
	if err := validateID("sale", saleID); err != nil {
		return 0, err
	}
	moves, err := e.pendingMoves(ctx, saleID)
	if err != nil {
		return 0, err
	}
	for i, m := range moves {
		if err := e.finishFound(ctx, saleID, m.ID, m.Peer, m.SKU, -m.Units); err != nil {
			return i, err
		}
	}
	return len(moves), nil
}

// PendingOut reports whether a sale's move records (SaleState.Moves) hold
// a move out of it whose arrival is not confirmed: FinishMoves has work.
func PendingOut(moves []Move) bool {
	for _, m := range moves {
		if m.Units < 0 && !m.Arrived {
			return true
		}
	}
	return false
}

// pendingMoves reads the sale's moves out whose arrival is not confirmed.
func (e *Engine) pendingMoves(ctx context.Context, saleID string) ([]Move, error) {
	key := e.keys(saleID).sale
	var out []Move
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, key, cursor, movePrefix+"*", 500).Result()
		if err != nil {
			return nil, fmt.Errorf("seckill: moves of sale %s: %w", saleID, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m, err := decodeMove(strings.TrimPrefix(kv[i], movePrefix), kv[i+1])
			if err != nil {
				return nil, fmt.Errorf("%w: sale %s: %v", ErrCorrupt, saleID, err)
			}
			if m.Units < 0 && !m.Arrived {
				out = append(out, m)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// Move is a sale's record of one move of units out of it or into it.
type Move struct {
	ID   string
	Peer string // the other sale of the move
	SKU  string
	// Units moved: negative out of this sale, positive into it.
	Units int64
	// Arrived, for a move out: its units have been added to Peer.
	Arrived bool
}

// InMotion is what the records of moves between several sales say of one
// item's units (CountMoves).
type InMotion struct {
	// Moving is the units that have left one of the sales and not reached
	// the other: in none of them, on their way.
	Moving int64
	// Twice is the units counted in two sales: the source's state was read
	// before they left it, the destination's after they reached it.
	Twice int64
}

// CountMoves tells, per sku, which units are in motion between the sales
// whose move records are given (sale id -> SaleState.Moves), each sale's
// records read at one instant with its counters (as Stock and Stocks read
// them), not necessarily the same instant for all. Only moves between two
// of the given sales count. Summing those sales' counters as one, the
// units stocked are then sum(Stocked) + Moving - Twice and those left are
// sum(Remaining) - Twice, however the reads and the moves interleaved: a
// move out is recorded in its source in the same call that takes the
// units, and the move's in half in its destination in the call that adds
// them, and a record stays as long as its sale.
func CountMoves(moves map[string][]Move) map[string]InMotion {
	type key struct{ sale, id string }
	recorded := map[key]bool{}
	for sale, ms := range moves {
		for _, m := range ms {
			recorded[key{sale, m.ID}] = true
		}
	}
	out := map[string]InMotion{}
	for sale, ms := range moves {
		for _, m := range ms {
			if _, ok := moves[m.Peer]; !ok || m.Peer == sale {
				continue
			}
			if recorded[key{m.Peer, m.ID}] {
				continue // both halves read: counted once
			}
			n := out[m.SKU]
			if m.Units < 0 { // left the source, not yet in the destination as read
				n.Moving -= m.Units
			} else { // in the destination, and still in the source as read
				n.Twice += m.Units
			}
			out[m.SKU] = n
		}
	}
	return out
}

// movePrefix starts the sale-hash field of a move record.
const movePrefix = "m:"

// encode is the record of a move in the sale hash (see move.lua).
func (m Move) encode() string {
	state, units := "in", m.Units
	if units < 0 {
		state, units = "out", -units
		if m.Arrived {
			state = "done"
		}
	}
	return state + "|" + m.Peer + "|" + m.SKU + "|" + strconv.FormatInt(units, 10)
}

func decodeMove(id, rec string) (Move, error) {
	f := strings.Split(rec, "|")
	if len(f) != 4 {
		return Move{}, fmt.Errorf("move %s: record %q", id, rec)
	}
	units, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || units < 1 || !ValidID(f[1]) || !ValidID(f[2]) {
		return Move{}, fmt.Errorf("move %s: record %q", id, rec)
	}
	m := Move{ID: id, Peer: f[1], SKU: f[2], Units: units}
	switch f[0] {
	case "in":
	case "out", "done":
		m.Units, m.Arrived = -units, f[0] == "done"
	default:
		return Move{}, fmt.Errorf("move %s: record %q", id, rec)
	}
	return m, nil
}

// finishFound finishes a move out of fromSale found pending in its
// record (FinishMoves, FinishPendingMoves), not made by this call: the
// watcher (Options.Moves) is first told of its out half as acknowledged,
// for the record says it ran. The process that ran it may have died with
// its own account of it, and the half's event may still be in the
// source's stream: a hand-over of the in half alone would have the
// system of record count the units in both sales.
func (e *Engine) finishFound(ctx context.Context, fromSale, id, toSale, sku string, units int64) error {
	if e.moves != nil {
		h := MoveHalf{SaleID: fromSale, Move: Move{ID: id, Peer: toSale, SKU: sku, Units: -units}}
		if err := e.moves.BeginMove(ctx, h); err != nil {
			return err
		}
		e.moves.EndMove(h, units, nil)
	}
	return e.finishMove(ctx, fromSale, id, toSale, sku, units)
}

// finishMove applies a move's in half, then marks its out half done, then
// takes it out of the index of pending moves.
func (e *Engine) finishMove(ctx context.Context, fromSale, id, toSale, sku string, units int64) error {
	if _, _, err := e.moveHalf(ctx, toSale, "in", id, fromSale, sku, units); err != nil {
		return err
	}
	if _, _, err := e.moveHalf(ctx, fromSale, "done", id, toSale, sku, units); err != nil {
		return err
	}
	e.forgetPending(ctx, fromSale, id)
	return nil
}

// moveHalf runs one half of a move on saleID and returns the units it
// moved and the item's remaining after it. The watcher (Options.Moves) is
// told of an out or in half before and after.
func (e *Engine) moveHalf(ctx context.Context, saleID, half, id, peer, sku string, units int64) (moved, rem int64, err error) {
	if e.moves != nil && half != "done" {
		h := MoveHalf{SaleID: saleID, Move: Move{ID: id, Peer: peer, SKU: sku, Units: units}}
		if half == "out" {
			h.Units = -units
		}
		if err := e.moves.BeginMove(ctx, h); err != nil {
			return 0, 0, err
		}
		defer func() { e.moves.EndMove(h, moved, err) }()
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.events}
	args := []any{e.nowMs(), half, id, peer, sku, units, e.StockChannel(), saleID + "|" + sku}
	run := func() ([]any, error) { return e.runSale(ctx, saleID, moveScript, keys, args...) }
	if half == "in" {
		done := e.soldOut.returning()
		defer done(saleID, sku) // even a failed call may have added stock
	}
	reply, err := e.retryTransient(ctx, run)
	if err != nil {
		return 0, 0, err
	}
	switch code(reply) {
	case codeOK, codeReplay:
		moved, ok1 := at(reply, 1).(int64)
		rem, ok2 := at(reply, 2).(int64)
		if ok1 && ok2 {
			return moved, rem, nil
		}
	case codeNotActive:
		return 0, 0, ErrFenced
	case codeUnknown:
		return 0, 0, &NotFoundError{Kind: "sku", IDs: []string{sku}}
	case codeRefused:
		return 0, 0, invalid("sku", "%s has unlimited stock", sku)
	}
	return 0, 0, unexpected(moveScript, reply)
}

// Remaining reads what is left of one item in each of the sales (-1:
// unlimited), in one round trip per Redis node, without rebuilding a sale
// missing from Redis: a sale or sku Redis does not hold is an error
// matching ErrNotFound (Stock rebuilds a lost sale).
func (e *Engine) Remaining(ctx context.Context, sku string, saleIDs ...string) ([]int64, error) {
	if err := validateID("sku", sku); err != nil {
		return nil, err
	}
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(saleIDs))
	for i, id := range saleIDs {
		if err := validateID("sale", id); err != nil {
			return nil, err
		}
		cmds[i] = pipe.HGet(ctx, e.keys(id).sale, "r:"+sku)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	out := make([]int64, len(saleIDs))
	var missing []string
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		switch {
		case errors.Is(err, redis.Nil):
			missing = append(missing, saleIDs[i])
		case err != nil:
			return nil, fmt.Errorf("seckill: remaining of %s: %w", sku, err)
		}
		out[i] = n
	}
	if missing != nil {
		return out, &NotFoundError{Kind: "sale", IDs: missing}
	}
	return out, nil
}
