package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seckill/seckill/internal/gcra"
)

// Buy buys every line or none, for one user, in one atomic script: the sale
// must be active, the user must stay within the per-user limit of every sku,
// and every sku must have the units. The order is recorded and its event
// appended to the sale's stream in the same script.
//
// Concurrent buys of one sale are coalesced (see Options.Coalesce): a buy
// that finds no call of its sale in flight is sent at once, alone; buys that
// arrive while calls are in flight go together in the next call, one script
// run that processes them in order, each still all-or-nothing.
//
// With a non-empty idempotencyKey, a repeat by the same user with the same
// lines returns the order the first call made (Receipt.Replayed) and changes
// nothing; the same key with other lines is ErrIdempotencyMismatch. Buy is
// also safe to retry after a network error: the order id is chosen before
// the call, and a retried script finds its own order instead of buying again
// (Receipt.Retried). A repeat or a retry is answered before any refusal:
// whatever the throttle, the token, the sale's window, the limit or the
// stock say now, the first attempt's outcome stands.
//
// The engine chooses the order id unless the buy names one
// (BuyRequest.OrderID; CheckedBuy.WithNewOrderID lets it choose again). On
// an error that leaves the buy's outcome unknown (OutcomeUnknown: a
// transport error, its ctx ended while it was queued or in flight), the
// receipt's Order is the order it was sent as, or would have been: the id
// of the order it may have made.
//
// Errors match ErrInvalid, ErrNotFound (*NotFoundError: the sale or every
// unknown sku), ErrSaleNotActive (*NotActiveError), ErrLimitExceeded
// (*LimitError), ErrSoldOut (*SoldOutError, naming every short sku),
// ErrIdempotencyMismatch, and for BuyWith ErrThrottled (*ThrottledError) or
// ErrTokenSpent.
func (e *Engine) Buy(ctx context.Context, saleID, userID string, lines []Line, idempotencyKey string) (Receipt, error) {
	return e.BuyWith(ctx, BuyRequest{SaleID: saleID, UserID: userID, Lines: lines, IdempotencyKey: idempotencyKey})
}

// BuyWith is Buy with the options of a BuyRequest (a throttle).
func (e *Engine) BuyWith(ctx context.Context, r BuyRequest) (Receipt, error) {
	c, err := checkBuy(r)
	if err != nil {
		return Receipt{}, err
	}
	return e.buyChecked(ctx, c)
}

// BuyChecked is BuyWith for a buy checked already (CheckBuy): it is not
// checked again. Its receipt's lines are a copy of the buy's.
func (e *Engine) BuyChecked(ctx context.Context, c CheckedBuy) (Receipt, error) {
	c.lines = slices.Clone(c.lines)
	return e.buyChecked(ctx, c)
}

// buyChecked sells c; its receipt's lines are c's.
func (e *Engine) buyChecked(ctx context.Context, c CheckedBuy) (Receipt, error) {
	bc, err := e.newBuyCall(c)
	if err != nil {
		return Receipt{}, err
	}
	if !c.ignoreSoldOut {
		if err := e.soldOut.refuse(c.saleID, bc.placed.Items, c.key); err != nil {
			return Receipt{}, err
		}
	}
	if e.coalesce.Off {
		return e.finishBuy(ctx, bc)
	}
	return e.coalescerOf(c.saleID).buy(ctx, bc)
}

// BuyRequest is one buy of BuyWith or BuyMany.
type BuyRequest struct {
	SaleID, UserID string
	Lines          []Line
	IdempotencyKey string
	// Throttle, when set, limits this buyer's buys of this sale: it is
	// checked in the buy's own script (no extra round trip), right after a
	// repeat is answered (a repeat of an accepted buy returns its order and
	// is never throttled), and a buy it refuses changes nothing else and
	// fails with a *ThrottledError. Every buy it lets through, whatever its
	// outcome, counts against it. Its time is the Redis server's clock.
	// The state is kept per buyer and sale, under the sale's hash tag (as
	// a field of "{<prefix>:<sale>}:tat:<window>:<n>", a hash of the states
	// that pass in one window of time, removed a window after they all
	// have, by a later buy's UNLINK or else its expiry: see buy.lua), so it
	// works on Redis Cluster alike. A buyer's state is
	// found only by buckets whose window (throttleWindow) is the same,
	// whoever else shares the buy's batch: changing a sale's limit so that
	// its longest wait crosses a power of two ms starts its buyers afresh.
	// A state survives a step back of Redis's clock of up to its window (1
	// s at least). A sold-out flag may refuse a buy before it counts (see
	// SoldOut).
	Throttle *Throttle
	// Token, when set, is the id of a single-use purchase token the buy
	// must spend (1 to 64 characters from A-Z a-z 0-9 _ . : -). The buy is
	// accepted only if no accepted buy of the sale spent the token before,
	// and spends it in its own script, atomically with the deduction: a
	// refused buy leaves it unspent. A spent token is ErrTokenSpent. A
	// repeat of an accepted buy (same idempotency key, or a resend after a
	// lost reply) returns that buy's order, whatever the token. The token
	// is kept spent for TokenTTL, which must then be at least 1ms (as long
	// as the token can still be presented). Its order's event carries it
	// (Event.Spent): a system of record that keeps it with the order and
	// returns it in Snapshot.SpentTokens keeps it spent across a loss of
	// Redis's data too (spent.go).
	Token    string
	TokenTTL time.Duration
	// OrderID, when set, is the id of the order the buy makes (from
	// NewOrderID of the sale), instead of a new one: a caller that must know
	// which order a buy whose outcome is unknown (a transport error after
	// the script may have run) may have made sets it. Should it be another
	// user's order already, the buy takes a new id, as it always does then.
	OrderID string
	// IgnoreSoldOutFlags sends the buy to Redis even if an item of it is
	// flagged sold out in this engine (see SoldOut): for a caller that
	// knows units came back that the flag has not heard of.
	IgnoreSoldOutFlags bool
}

// BuyResult is the outcome of one buy of BuyMany: what Buy would return.
type BuyResult struct {
	Receipt Receipt
	Err     error
}

// BuyMany runs many buys, of any sales and users, in one pipeline (one
// round trip per Redis node): the buys of each sale go as script calls of
// up to Options.Coalesce.MaxBatch buys, run in the order of reqs. Each buy
// has exactly Buy's checks, writes and results, all-or-nothing on its own;
// a buy that needs more than one round trip (its sale must be rebuilt, its
// connection failed) finishes alone, the way Buy would. Results are in the
// order of reqs.
func (e *Engine) BuyMany(ctx context.Context, reqs []BuyRequest) []BuyResult {
	out := make([]BuyResult, len(reqs))
	type group struct {
		sale string
		keys []string
		bcs  []buyCall
		at   []int
		ids  idGroup // the call's order ids
	}
	var groups []*group
	open := map[string]*group{} // each sale's group still taking buys
	for i, r := range reqs {
		c, err := checkBuy(r)
		var bc buyCall
		if err == nil {
			bc, err = e.newBuyCall(c)
		}
		if err == nil && !r.IgnoreSoldOutFlags {
			err = e.soldOut.refuse(r.SaleID, bc.placed.Items, r.IdempotencyKey)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		g := open[r.SaleID]
		if g == nil || len(g.bcs) == e.coalesce.MaxBatch {
			g = &group{sale: r.SaleID, keys: e.keys(r.SaleID).buy()}
			groups = append(groups, g)
			open[r.SaleID] = g
		}
		g.ids.give(&bc)
		g.bcs, g.at = append(g.bcs, bc), append(g.at, i)
	}
	calls := make([]call, len(groups))
	now := e.scriptNow()
	for j, g := range groups {
		calls[j] = e.batchCall(g.keys, g.bcs, now)
	}
	for j, res := range e.run.runPipelined(ctx, calls) {
		g := groups[j]
		replies, err := buyReplies(res.reply, res.err, len(g.bcs))
		for k, bc := range g.bcs {
			i := g.at[k]
			if err != nil || code(replies[k]) == codeIDTaken {
				out[i].Receipt, out[i].Err = e.finishBuy(ctx, bc) // same order id: safe even if it ran
				continue
			}
			out[i].Receipt, out[i].Err = e.decodeBuy(replies[k], bc)
		}
	}
	return out
}

// buyCall is one buy of a buy.lua call, ready to send: the order id is
// chosen before the first attempt and kept by every retry. The call's keys
// are its sale's (saleKeys.buy), the same for every buy of the sale: the
// caller that sends it has them.
type buyCall struct {
	// placed is the order the buy makes: its user, order id, lines and
	// idempotency key are the buy's arguments.
	placed   Order
	lines    string      // placed.Items as buy.lua takes them ("A=1,B=2")
	token    string      // "" for none
	tokenTTL int64       // ms
	gate     string      // "" for none, else unix ms (CheckedBuy.WithGate)
	epoch    uint64      // the sold-out flags' epoch before it was sent
	throttle gcra.Bucket // zero for none
	// ownID: the order id is the engine's and was never sent, so the call
	// that first sends the buy may give it one of the call's group
	// (idGroup) instead
	ownID bool
	// callerID: the caller chose the order id (BuyRequest.OrderID): it may
	// name an order stored before order groups, in a field of its own
	callerID bool
}

func (e *Engine) newBuyCall(c CheckedBuy) (buyCall, error) {
	if err := c.checkOrderOfSale(); err != nil {
		return buyCall{}, err
	}
	orderID := c.orderID
	if orderID == "" {
		orderID = NewOrderID(c.saleID)
	}
	return buyCall{
		throttle: c.throttle,
		lines:    formatLines(c.lines),
		token:    c.token,
		tokenTTL: c.tokenTTL,
		gate:     gateArg(c.gate),
		placed: Order{ID: orderID, SaleID: c.saleID, UserID: c.userID, Status: OrderPending,
			Items: c.lines, IdempotencyKey: c.key},
		epoch:    e.soldOut.epoch.Load(),
		ownID:    c.orderID == "" || c.newID,
		callerID: c.orderID != "" && !c.newID,
	}, nil
}

// maxShapes bounds the shared shapes of one call: a batch of many
// different buys sends the rest whole.
const maxShapes = 8

// batchCall is one buy.lua call running bcs, all of one sale whose keys
// (saleKeys.buy) are keys, in order, at time now (see scriptNow). The
// batch's throttles go once each, ahead of the buys, which name theirs by
// its place (usually every buy has the same); so do its shared shapes: the
// buys with no idempotency key that have the same lines and throttle and
// either no token or a gated one (usually most of a crowd's) send their
// shape once; a gated buy sends its nonce and until after it. The buys
// whose order ids are of the first buy's group (usually all: idGroup)
// send only their ids' tails, and the script the group once.
func (e *Engine) batchCall(keys []string, bcs []buyCall, now any) call {
	var throttles []gcra.Bucket
	which := make([]int, len(bcs)) // 1-based place of bcs[i]'s throttle, 0 none
	shape := make([]int, len(bcs)) // 1-based place of bcs[i]'s shared shape, 0 none
	var shared []int               // the first buy of each shared shape
	n := 5
	for i := range bcs {
		th := bcs[i].throttle
		if th.Rate != 0 {
			for j := range throttles {
				if throttles[j] == th {
					which[i] = j + 1
					break
				}
			}
			if which[i] == 0 {
				throttles = append(throttles, th)
				which[i] = len(throttles)
			}
		}
		bc := &bcs[i]
		size := 7 + 2*len(bc.placed.Items) // the buy's shape's arguments
		if bc.placed.IdempotencyKey == "" && (bc.token == "" || bc.gate != "") {
			for k, f := range shared {
				if which[f] == which[i] && bcs[f].lines == bc.lines && (bcs[f].gate == "") == (bc.gate == "") {
					shape[i] = k + 1
					break
				}
			}
			if shape[i] == 0 && len(shared) < maxShapes {
				shared = append(shared, i)
				shape[i] = len(shared)
				n += size
			}
		}
		n += 3
		if shape[i] == 0 {
			n += size
		}
		if bc.gate != "" {
			n += 2
		}
	}
	args := make([]any, 0, n+1+4*len(throttles))
	args = append(args, now, len(bcs), len(throttles))
	for _, th := range throttles {
		args = append(args, th.Rate, th.PeriodUS, th.Capacity, throttleWindow(th))
	}
	appendShape := func(i int) {
		bc := &bcs[i]
		if bc.gate != "" {
			// gated: the nonce goes with the buy (after the shape)
			args = append(args, bc.placed.IdempotencyKey, bc.lines, which[i], "", 0, len(bc.placed.Items))
		} else {
			args = append(args, bc.placed.IdempotencyKey, bc.lines, which[i], bc.token, bc.tokenTTL, len(bc.placed.Items))
		}
		for _, l := range bc.placed.Items {
			args = append(args, l.SKU, l.Qty)
		}
		if bc.gate != "" {
			args = append(args, "1")
		} else {
			args = append(args, "")
		}
	}
	// The call's group: the buys whose ids are of it send their tails.
	group := orderGroup(bcs[0].placed.ID)
	args = append(args, group, len(shared))
	for _, i := range shared {
		appendShape(i)
	}
	for i := range bcs {
		id := bcs[i].placed.ID
		if len(id) > orderGroupTail && orderGroup(id) == group {
			id = id[len(group):]
		}
		args = append(args, bcs[i].placed.UserID, id, shape[i])
		if shape[i] == 0 {
			appendShape(i)
		}
		if bcs[i].gate != "" {
			args = append(args, bcs[i].token, bcs[i].gate)
		}
	}
	// The buys whose order id the caller chose: a resend of one may find
	// its order in a field of its own, stored before order groups.
	at := len(args)
	args = append(args, 0)
	for i := range bcs {
		if bcs[i].callerID {
			args = append(args, i+1)
		}
	}
	args[at] = len(args) - at - 1
	args = append(args, e.streamMode, distinctBuys(bcs))
	return call{s: buyScript, keys: keys, args: args}
}

// distinctBuys is buy.lua's distinct flag for a call of bcs: 1 if no two
// buys have the same user or order id, none has an idempotency key and
// none names a sku twice, else 0. The script then keeps the buyers'
// holdings by place, not by name: so it must be exact.
func distinctBuys(bcs []buyCall) int {
	seen := make(map[string]struct{}, 2*len(bcs))
	for i := range bcs {
		p := &bcs[i].placed
		if p.IdempotencyKey != "" {
			return 0
		}
		for j, l := range p.Items {
			for _, prev := range p.Items[:j] {
				if prev.SKU == l.SKU {
					return 0
				}
			}
		}
		// users and order ids in one set: a user id that equals another
		// buy's order id only makes the flag 0, which is always safe
		if _, ok := seen[p.UserID]; ok {
			return 0
		}
		if _, ok := seen[p.ID]; ok {
			return 0
		}
		seen[p.UserID], seen[p.ID] = struct{}{}, struct{}{}
	}
	return 1
}

// buyReplies splits a buy.lua reply into its n buys' replies, each a
// non-empty array led by its integer code. The script replies them flat,
// each after its length ({0, len1, code1, ..., len2, code2, ...}: one
// array for the call, not one per buy), so each buy's reply is a slice of
// the call's. A sale missing from Redis, an error or a malformed reply is
// an error for the whole call.
func buyReplies(reply []any, err error, n int) ([][]any, error) {
	if err != nil {
		return nil, err
	}
	if code(reply) != codeOK {
		return nil, unexpected(buyScript, reply)
	}
	out := make([][]any, n)
	p := 1
	for i := range out {
		k, ok := at(reply, p).(int64)
		if !ok || k < 1 || k > int64(len(reply)-p-1) {
			return nil, unexpected(buyScript, reply)
		}
		r := reply[p+1 : p+1+int(k) : p+1+int(k)]
		if _, ok := r[0].(int64); !ok {
			return nil, unexpected(buyScript, reply)
		}
		out[i] = r
		p += 1 + int(k)
	}
	if p != len(reply) {
		return nil, unexpected(buyScript, reply)
	}
	return out, nil
}

// runBuys runs bcs, all of one sale whose keys are keys, as one buy.lua
// call: through a rebuild of the sale when it is missing from Redis, but
// with no transport retries (a caller retries each buy alone, with
// finishBuy).
func (e *Engine) runBuys(ctx context.Context, keys []string, bcs []buyCall) ([][]any, error) {
	c := e.batchCall(keys, bcs, e.scriptNow())
	reply, err := e.runSale(ctx, bcs[0].placed.SaleID, c.s, c.keys, c.args...)
	return buyReplies(reply, err, len(bcs))
}

// runBuysOnce runs bcs, all of one sale whose keys are keys, as one
// buy.lua call, with no rebuild and no transport retries: a sale missing
// from Redis fails with errSaleMissing, so that the caller can rebuild it
// off the pipeline.
func (e *Engine) runBuysOnce(ctx context.Context, keys []string, bcs []buyCall) ([][]any, error) {
	c := e.batchCall(keys, bcs, e.scriptNow())
	reply, err := e.run.run(ctx, c.s, c.keys, c.args...)
	if err == nil && code(reply) == codeMissing {
		return nil, errSaleMissing
	}
	return buyReplies(reply, err, len(bcs))
}

// errSaleMissing is runBuysPipelined's (and runBuysOnce's) error for a batch whose sale is
// missing from Redis: it did not run, and runBuys can rebuild the sale.
var errSaleMissing = errors.New("seckill: sale missing from redis")

// batchReplies is the outcome of one batch of runBuysPipelined.
type batchReplies struct {
	replies [][]any
	err     error
}

// runBuysPipelined runs batches, each a buy.lua call of one sale whose
// keys are keys[i], in one pipeline (one round trip to each node, and one
// more to a node that answered NOSCRIPT), with no rebuild and no transport
// retries: a batch whose sale is missing from Redis fails with
// errSaleMissing. Results are in the order of batches.
func (e *Engine) runBuysPipelined(ctx context.Context, keys [][]string, batches [][]buyCall) []batchReplies {
	calls := make([]call, len(batches))
	now := e.scriptNow()
	for i, bcs := range batches {
		calls[i] = e.batchCall(keys[i], bcs, now)
	}
	out := make([]batchReplies, len(batches))
	for i, res := range e.run.runPipelined(ctx, calls) {
		if res.err == nil && code(res.reply) == codeMissing {
			out[i].err = errSaleMissing
			continue
		}
		out[i].replies, out[i].err = buyReplies(res.reply, res.err, len(batches[i]))
	}
	return out
}

// finishBuy sends a buy alone until it has an answer: through a rebuild of
// its sale, transport retries, and (astronomically rarely) a new order id.
func (e *Engine) finishBuy(ctx context.Context, bc buyCall) (Receipt, error) {
	return e.finishBuyAfter(ctx, bc, 0)
}

// finishBuyAfter is finishBuy for a buy whose call already failed failed
// times with a transport error.
func (e *Engine) finishBuyAfter(ctx context.Context, bc buyCall, failed int) (Receipt, error) {
	one := []buyCall{bc}
	keys := e.keys(bc.placed.SaleID).buy()
	for attempt := 1; ; attempt++ {
		var replies [][]any
		_, err := e.retryTransientAfter(ctx, failed, func() ([]any, error) {
			var err error
			replies, err = e.runBuys(ctx, keys, one)
			return nil, err
		})
		if err != nil {
			return unsure(one[0].placed, err), err
		}
		failed = 0
		if code(replies[0]) == codeIDTaken && attempt < maxIDAttempts {
			one[0].placed.ID = NewOrderID(bc.placed.SaleID) // 80 random bits collided
			continue
		}
		return e.decodeBuy(replies[0], one[0])
	}
}

func (e *Engine) decodeBuy(reply []any, bc buyCall) (Receipt, error) {
	placed := bc.placed
	switch code(reply) {
	case codeOK:
		created, ok := at(reply, 1).(int64)
		rem, err := ints(from(reply, 2))
		if !ok || err != nil || len(rem) != len(placed.Items) {
			return Receipt{}, unexpected(buyScript, reply)
		}
		placed.CreatedAt = time.UnixMilli(created).UTC() // Redis's clock
		for i, l := range placed.Items {
			if rem[i] == 0 {
				e.soldOut.mark(placed.SaleID, l.SKU, bc.epoch)
			}
		}
		return Receipt{Order: placed, Remaining: rem}, nil
	case codeReplay:
		if len(reply) < 3 {
			return Receipt{}, unexpected(buyScript, reply)
		}
		id, rec := str(at(reply, 1)), str(at(reply, 2))
		o, err := decodeRecord(id, placed.SaleID, rec)
		if err != nil {
			return Receipt{}, err
		}
		rem, err := ints(from(reply, 3))
		if err != nil || len(rem) != len(o.Items) {
			return Receipt{}, unexpected(buyScript, reply)
		}
		// The order this very call made (its first attempt ran, but the
		// reply was lost) is no replay for the caller.
		return Receipt{Order: o, Remaining: rem, Replayed: id != placed.ID, Retried: id == placed.ID}, nil
	case codeNotActive:
		if st := str(at(reply, 1)); st == statusFenced {
			return Receipt{}, ErrFenced
		}
		return Receipt{}, &NotActiveError{Status: Status(str(at(reply, 1)))}
	case codeUnknown:
		return Receipt{}, &NotFoundError{Kind: "sku", IDs: strs(from(reply, 1))}
	case codeMismatch:
		return Receipt{}, fmt.Errorf("%w: key %q names order %s", ErrIdempotencyMismatch, placed.IdempotencyKey, str(at(reply, 1)))
	case codeSpent:
		return Receipt{}, ErrTokenSpent
	case codeLimit:
		limit, _ := at(reply, 1).(int64)
		return Receipt{}, &LimitError{Limit: limit, SKUs: strs(from(reply, 2))}
	case codeRefused:
		debt, ok := at(reply, 1).(int64)
		if !ok || bc.throttle.Rate == 0 {
			return Receipt{}, unexpected(buyScript, reply)
		}
		return Receipt{}, &ThrottledError{RetryAfter: gcra.Duration(bc.throttle.RetryAfterUS(debt, 1))}
	case codeSoldOut:
		short := from(reply, 1)
		if len(short)%2 != 0 {
			return Receipt{}, unexpected(buyScript, reply)
		}
		err := &SoldOutError{}
		for i := 0; i < len(short); i += 2 {
			sku := str(short[i])
			err.SKUs = append(err.SKUs, sku)
			if left, ok := short[i+1].(int64); ok && left == 0 {
				e.soldOut.mark(placed.SaleID, sku, bc.epoch)
			}
		}
		return Receipt{}, err
	}
	return Receipt{}, unexpected(buyScript, reply)
}
