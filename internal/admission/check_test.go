package admission

import (
	"context"
	"fmt"
	"strings"
)

// What a buy does to a room, for the room's tests: the engine's gated buy
// (inventory.CheckedBuy.WithGate) checks an admission against the room's
// live admissions and notes the one it spends in "room:used" in its own
// script; these helpers read and write the same keys by hand.

// AdmissionCheck is what the room says of an admission presented to a buy.
type AdmissionCheck int

const (
	CheckNone     AdmissionCheck = iota // the room holds no such admission of the user
	CheckAdmitted                       // live: the buy may spend it
	CheckUsed                           // it bought an order already
	CheckLapsed                         // it was not used in time
)

// Check says whether nonce is user's live admission, from the plain reads
// a place read makes.
func (r *Rooms) Check(ctx context.Context, saleID, user, nonce string) (AdmissionCheck, error) {
	s, err := r.reads.do(ctx, saleID, user)
	if err != nil {
		return CheckNone, err
	}
	if !s.joined {
		return CheckNone, nil
	}
	ps, err := parseState(s.st)
	if err != nil {
		return CheckNone, err
	}
	if (ps.kind != 'a' && ps.kind != 'u' && ps.kind != 'l') || ps.nonce != nonce {
		return CheckNone, nil
	}
	if n, _, ok := strings.Cut(s.notice, ":"); ok && n == nonce {
		return CheckUsed, nil
	}
	switch ps.kind {
	case 'a':
		if r.nowMs(s.facts) < ps.until {
			return CheckAdmitted, nil
		}
		return CheckLapsed, nil
	case 'u':
		return CheckUsed, nil
	}
	return CheckLapsed, nil
}

// MarkUsed writes the note a gated buy writes when it spends user's
// admission nonce on orderID (buy.lua, KEYS[10]): the room's next step
// applies it; ErrNoRoom without a room.
func (r *Rooms) MarkUsed(ctx context.Context, saleID, user, nonce, orderID string) error {
	if _, err := r.bucketCount(ctx, saleID); err != nil {
		return err
	}
	key := r.key(saleID, "room:used")
	if err := r.rdb.HSet(ctx, key, user, nonce+":"+orderID).Err(); err != nil {
		return fmt.Errorf("admission: used notice of sale %s: %w", saleID, err)
	}
	return nil // kept until applied, as buy.lua keeps it
}
