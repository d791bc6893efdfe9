package admission

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// What a buy does to a room, for the room's tests that run no engine buy:
// the engine's gated buy (inventory.CheckedBuy.WithGate) checks an
// admission against the user's state and spends it there in its own
// script; these helpers read and write the same keys as it does.

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

// errNotLive is MarkUsed's refusal: the user holds no live admission
// nonce (a gated buy would be refused as spent).
var errNotLive = errors.New("admission: no such live admission")

// markUsed is what a gated buy that is accepted writes (buy.lua's gate,
// by the script's clock ARGV[3], unix ms): the user's live admission
// nonce becomes used with the order, the user leaves the live ones and
// the room counts it. KEYS: room:cfg, room:live, the user's bucket.
var markUsed = redis.NewScript(`
local st = redis.call('HGET', KEYS[3], ARGV[1])
local joined, nonce, till, indraw = string.match(st or '', '^a(%d+):(%x+):(%d+):([01])$')
if not joined or nonce ~= ARGV[2] or tonumber(ARGV[3]) >= tonumber(till) then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], 'u' .. joined .. ':' .. nonce .. ':' .. indraw .. ':' .. ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'used', 1)
return 1
`)

// MarkUsed spends user's admission nonce on orderID as an accepted gated
// buy does, at the rooms' clock; errNotLive if the admission is not live
// (the buy would be refused), ErrNoRoom without a room.
func (r *Rooms) MarkUsed(ctx context.Context, saleID, user, nonce, orderID string) error {
	nb, err := r.bucketCount(ctx, saleID)
	if err != nil {
		return err
	}
	var now int64
	if r.clock != nil {
		now = r.clock().UnixMilli()
	} else {
		t, err := r.rdb.Time(ctx).Result()
		if err != nil {
			return err
		}
		now = t.UnixMilli()
	}
	keys := []string{r.key(saleID, "room:cfg"), r.key(saleID, "room:live"), r.bucketKey(saleID, user, nb)}
	ok, err := markUsed.Run(ctx, r.rdb, keys, user, nonce, now, orderID).Int()
	if err != nil {
		return fmt.Errorf("admission: spend the admission of %s in sale %s: %w", user, saleID, err)
	}
	if ok == 0 {
		return errNotLive
	}
	return nil
}
