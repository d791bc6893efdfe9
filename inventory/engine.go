package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
	"github.com/seckill/seckill/ratelimit"
)

// Client is the part of a go-redis client the engine uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and a Sentinel-backed *redis.Client all
// satisfy it, and so does any wrapper that embeds one (to inject faults, say).
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	HScan(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd
}

// Clock tells the engine the time; tests inject their own.
type Clock interface{ Now() time.Time }

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }

// Options configure an Engine. The zero value of every field is usable.
type Options struct {
	// Prefix starts the hash tag of every key: "{<Prefix>:<sale>}:...".
	// Several deployments (or tests) can share one Redis with different
	// prefixes. Default "seckill".
	Prefix string
	// Loader rebuilds a sale whose keys are missing from Redis (flushed,
	// lost in a failover, a new node) from the system of record. Without
	// one, a missing sale is ErrNotFound.
	Loader Loader
	// Clock is this process's time: the sold-out flags' lifetimes, a sale's
	// Status in Stock, and the times of the events of creates, cancels,
	// restocks and pauses. Default: the system clock. It does not decide
	// whether a buy is in its sale's window, nor a buyer's throttle, nor an
	// order's time: a buy's script reads those from the clock of the Redis
	// node that owns the sale, the one clock every instance shares, so
	// instances whose own clocks drift apart still agree.
	Clock Clock
	// ScriptClock, for tests only, stands in for the Redis server's clock in
	// a buy's script (its sale window, its throttle, its order's time), so
	// that a test can move time. Leave it nil in production.
	ScriptClock Clock
	// InitLockTTL bounds how long one instance keeps others from rebuilding
	// the same sale. Default 10s.
	InitLockTTL time.Duration
	// InitTimeout bounds how long a call waits for a sale to be rebuilt
	// before it fails with ErrUnavailable. Default 5s.
	InitTimeout time.Duration
	// EvalEveryCall sends every script in full (EVAL) instead of by its
	// SHA (EVALSHA). Slower; it exists to measure what the script cache
	// saves (seckill bench).
	EvalEveryCall bool
	// Coalesce tunes how concurrent buys of one sale share script calls.
	Coalesce Coalesce
	// SoldOut tunes the in-process sold-out flags.
	SoldOut SoldOut
}

// Engine sells the stock of flash sales held in Redis. Every call that
// changes stock is one Lua script, atomic on the Redis node that owns the
// sale. An Engine is safe for concurrent use; create one per Redis client.
type Engine struct {
	rdb    Client
	run    *scriptRunner
	prefix string
	loader Loader
	clock  Clock
	// scriptClock stands in for Redis's clock in buy.lua; nil: Redis's own
	scriptClock Clock
	lockTTL     time.Duration
	waitFor     time.Duration

	coalesce   Coalesce
	coalescers sync.Map // sale id -> *coalescer
	soldOut    *soldOutFlags
}

// New returns an engine that keeps its sales in rdb.
func New(rdb Client, opts Options) *Engine {
	e := &Engine{
		rdb:         rdb,
		run:         &scriptRunner{rdb: rdb, evalAlways: opts.EvalEveryCall},
		prefix:      opts.Prefix,
		loader:      opts.Loader,
		clock:       opts.Clock,
		scriptClock: opts.ScriptClock,
		lockTTL:     opts.InitLockTTL,
		waitFor:     opts.InitTimeout,
		coalesce:    opts.Coalesce.withDefaults(),
		soldOut:     newSoldOutFlags(opts.SoldOut, opts.Clock),
	}
	if e.prefix == "" {
		e.prefix = "seckill"
	}
	if e.clock == nil {
		e.clock = ClockFunc(time.Now)
	}
	if e.lockTTL <= 0 {
		e.lockTTL = 10 * time.Second
	}
	if e.waitFor <= 0 {
		e.waitFor = 5 * time.Second
	}
	return e
}

// Preload puts the engine's scripts into the script cache of every node the
// client reaches. Optional: without it, the first call on each node pays for
// one NOSCRIPT round trip.
func (e *Engine) Preload(ctx context.Context) error { return e.run.load(ctx) }

// ScriptReloads counts the calls that found their script missing from a
// node's cache and sent it again.
func (e *Engine) ScriptReloads() int64 { return e.run.reloads.Load() }

func (e *Engine) nowMs() int64 { return e.clock.Now().UnixMilli() }

// scriptNow is buy.lua's time argument: "" lets the script read the Redis
// server's clock; a test's ScriptClock stands in for it.
func (e *Engine) scriptNow() any {
	if e.scriptClock == nil {
		return ""
	}
	return e.scriptClock.Now().UnixMicro()
}

// Outcome codes of the scripts; each .lua file lists the ones it replies.
const (
	codeOK         = 0
	codeReplay     = 1 // also: already so (cancel, lock: sale ready, commit: sale there)
	codeMissing    = 2
	codeNotActive  = 3
	codeUnknown    = 4
	codeLimit      = 5
	codeSoldOut    = 6
	codeIDTaken    = 7
	codeCorrupt    = 8
	codeRefused    = 9
	codeExists     = 10
	codeLocked     = 11
	codeInFlight   = 12
	codeStageGone  = 13
	codeMismatch   = 14
	codeSpent      = 15
	maxIDAttempts  = 3
	missingRetries = 2
)

func code(reply []any) int64 { return reply[0].(int64) } // asReply checked the type

// runSale runs a script of one sale; when the sale is missing from Redis it
// rebuilds it through the Loader and runs the script again.
func (e *Engine) runSale(ctx context.Context, saleID string, s *luascript.Script, keys []string, args ...any) ([]any, error) {
	for attempt := 0; ; attempt++ {
		reply, err := e.run.run(ctx, s, keys, args...)
		if err != nil || code(reply) != codeMissing {
			return reply, err
		}
		if attempt == missingRetries {
			return nil, fmt.Errorf("%w: sale %s vanished again after a rebuild", ErrUnavailable, saleID)
		}
		if err := e.rebuild(ctx, saleID); err != nil {
			return nil, err
		}
	}
}

// CreateSale defines a sale. It never resets a sale that exists: if the id
// is taken, it returns an error matching ErrExists and changes nothing.
func (e *Engine) CreateSale(ctx context.Context, s Sale) error {
	if err := ValidateSale(s); err != nil {
		return err
	}
	k := e.keys(s.ID)
	args := make([]any, 0, 7+2*len(s.Items))
	// The token makes a resent call (its reply lost) find its own sale.
	args = append(args, e.nowMs(), limitOf(s), unixMs(s.StartsAt), unixMs(s.EndsAt), flag(s.Paused), formatItems(s.Items),
		newToken())
	for _, it := range s.Items {
		args = append(args, it.SKU, it.Stock)
	}
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.run.run(ctx, createScript, []string{k.sale, k.events}, args...)
	})
	if err != nil {
		return err
	}
	switch code(reply) {
	case codeOK:
		return nil
	case codeExists:
		return fmt.Errorf("%w: sale %s", ErrExists, s.ID)
	}
	return unexpected(createScript, reply)
}

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
	bc, err := e.newBuyCall(r)
	if err != nil {
		return Receipt{}, err
	}
	if !r.IgnoreSoldOutFlags {
		if err := e.soldOut.refuse(r.SaleID, bc.placed.Items, r.IdempotencyKey); err != nil {
			return Receipt{}, err
		}
	}
	if e.coalesce.Off {
		return e.finishBuy(ctx, bc)
	}
	return e.coalescerOf(r.SaleID).buy(ctx, bc)
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
	// The state is kept per buyer and sale, under the sale's hash tag
	// ("{<prefix>:<sale>}:throttle:<user>", expiring once the bucket is full
	// again), so it works on Redis Cluster alike. A sold-out flag may refuse
	// a buy before it counts (see SoldOut).
	Throttle *ratelimit.Bucket
	// Token, when set, is the id of a single-use purchase token the buy
	// must spend (1 to 64 characters from A-Z a-z 0-9 _ . : -). The buy is
	// accepted only if no accepted buy of the sale spent the token before,
	// and spends it in its own script, atomically with the deduction: a
	// refused buy leaves it unspent. A spent token is ErrTokenSpent. A
	// repeat of an accepted buy (same idempotency key, or a resend after a
	// lost reply) returns that buy's order, whatever the token. The token
	// is kept spent for TokenTTL, which must then be at least 1ms (as long
	// as the token can still be presented).
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
		bcs  []buyCall
		at   []int
	}
	var groups []*group
	open := map[string]*group{} // each sale's group still taking buys
	for i, r := range reqs {
		bc, err := e.newBuyCall(r)
		if err == nil && !r.IgnoreSoldOutFlags {
			err = e.soldOut.refuse(r.SaleID, bc.placed.Items, r.IdempotencyKey)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		g := open[r.SaleID]
		if g == nil || len(g.bcs) == e.coalesce.MaxBatch {
			g = &group{sale: r.SaleID}
			groups = append(groups, g)
			open[r.SaleID] = g
		}
		g.bcs, g.at = append(g.bcs, bc), append(g.at, i)
	}
	calls := make([]call, len(groups))
	now := e.scriptNow()
	for j, g := range groups {
		calls[j] = e.batchCall(g.bcs, now)
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
// chosen before the first attempt and kept by every retry.
type buyCall struct {
	keys     []string
	args     []any // this buy's part of the script's arguments
	placed   Order
	epoch    uint64 // the sold-out flags' epoch before it was sent
	throttle ratelimit.Bucket
}

func (e *Engine) newBuyCall(r BuyRequest) (buyCall, error) {
	if err := ValidateBuy(r.SaleID, r.UserID, r.Lines, r.IdempotencyKey); err != nil {
		return buyCall{}, err
	}
	var th ratelimit.Bucket
	if r.Throttle != nil {
		th = *r.Throttle
		if th.Rate < 1 || th.PeriodUS < 1 || th.Capacity < 1 {
			return buyCall{}, invalid("throttle", "needs a positive rate, period and capacity (use ratelimit.Limit.Bucket)")
		}
	}
	var tokenTTL int64
	if r.Token != "" {
		if err := validateID("token", r.Token); err != nil {
			return buyCall{}, err
		}
		if tokenTTL = r.TokenTTL.Milliseconds(); tokenTTL < 1 {
			return buyCall{}, invalid("token_ttl", "must be at least 1ms")
		}
	}
	k := e.keys(r.SaleID)
	orderID := r.OrderID
	if orderID == "" {
		orderID = NewOrderID(r.SaleID)
	} else if sale, err := SaleOfOrder(orderID); err != nil || sale != r.SaleID {
		return buyCall{}, invalid("order_id", "must be an order id of sale %s", r.SaleID)
	}
	args := make([]any, 0, 10+2*len(r.Lines))
	args = append(args, r.UserID, orderID, r.IdempotencyKey, formatLines(r.Lines), th.Rate, th.PeriodUS, th.Capacity,
		r.Token, tokenTTL, len(r.Lines))
	for _, l := range r.Lines {
		args = append(args, l.SKU, l.Qty)
	}
	return buyCall{
		throttle: th,
		keys:     []string{k.sale, k.bought, k.orders, k.idem, k.events, k.throttle, k.token},
		args:     args,
		placed: Order{ID: orderID, SaleID: r.SaleID, UserID: r.UserID, Status: OrderPending,
			Items: r.Lines, IdempotencyKey: r.IdempotencyKey},
		epoch: e.soldOut.epoch.Load(),
	}, nil
}

// batchCall is one buy.lua call running bcs, all of one sale, in order, at
// time now (see scriptNow).
func (e *Engine) batchCall(bcs []buyCall, now any) call {
	n := 2
	for _, bc := range bcs {
		n += len(bc.args)
	}
	args := make([]any, 0, n)
	args = append(args, now, len(bcs))
	for i := range bcs {
		args = append(args, bcs[i].args...)
	}
	return call{s: buyScript, keys: bcs[0].keys, args: args}
}

// buyReplies splits a buy.lua reply into its n buys' replies, each a
// non-empty array led by its integer code. A sale missing from Redis, an
// error or a malformed reply is an error for the whole call.
func buyReplies(reply []any, err error, n int) ([][]any, error) {
	if err != nil {
		return nil, err
	}
	if code(reply) != codeOK || len(reply) != n+1 {
		return nil, unexpected(buyScript, reply)
	}
	out := make([][]any, n)
	for i := range out {
		r, ok := reply[i+1].([]any)
		if !ok || len(r) == 0 {
			return nil, unexpected(buyScript, reply)
		}
		if _, ok := r[0].(int64); !ok {
			return nil, unexpected(buyScript, reply)
		}
		out[i] = r
	}
	return out, nil
}

// runBuys runs bcs, all of one sale, as one buy.lua call: through a rebuild
// of the sale when it is missing from Redis, but with no transport retries
// (a caller retries each buy alone, with finishBuy).
func (e *Engine) runBuys(ctx context.Context, bcs []buyCall) ([][]any, error) {
	c := e.batchCall(bcs, e.scriptNow())
	reply, err := e.runSale(ctx, bcs[0].placed.SaleID, c.s, c.keys, c.args...)
	return buyReplies(reply, err, len(bcs))
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
	for attempt := 1; ; attempt++ {
		var replies [][]any
		_, err := e.retryTransientAfter(ctx, failed, func() ([]any, error) {
			var err error
			replies, err = e.runBuys(ctx, one)
			return nil, err
		})
		if err != nil {
			return Receipt{}, err
		}
		failed = 0
		if code(replies[0]) == codeIDTaken && attempt < maxIDAttempts {
			one[0].placed.ID = NewOrderID(bc.placed.SaleID) // 80 random bits collided
			one[0].args[1] = one[0].placed.ID
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
		return Receipt{}, &ThrottledError{RetryAfter: bc.throttle.Result(false, debt, 1).RetryAfter}
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

// Cancel cancels an order: its units go back to stock and to the buyer's
// quota. Cancelling a cancelled order changes nothing and returns it with
// Receipt.Replayed set. With a non-empty userID the order must be that
// user's (anyone else's is ErrNotFound); an empty userID cancels any order,
// for operators.
func (e *Engine) Cancel(ctx context.Context, orderID, userID string) (Receipt, error) {
	saleID, err := SaleOfOrder(orderID)
	if err != nil {
		return Receipt{}, err
	}
	if userID != "" {
		if err := validateID("user", userID); err != nil {
			return Receipt{}, err
		}
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.bought, k.orders, k.events, k.op(newToken())}
	now := e.nowMs()
	done := e.soldOut.returning()
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.runSale(ctx, saleID, cancelScript, keys, now, orderID, userID, e.StockChannel(), saleID)
	})
	// Even a failed call may have returned stock: never keep refusing it.
	done(saleID)
	if err != nil {
		return Receipt{}, err
	}
	switch code(reply) {
	case codeOK, codeReplay:
		o, err := decodeRecord(orderID, saleID, str(at(reply, 1)))
		if err != nil {
			return Receipt{}, err
		}
		rem, err := ints(from(reply, 2))
		if err != nil || len(rem) != len(o.Items) {
			return Receipt{}, unexpected(cancelScript, reply)
		}
		return Receipt{Order: o, Remaining: rem, Replayed: code(reply) == codeReplay}, nil
	case codeUnknown:
		return Receipt{}, &NotFoundError{Kind: "order", IDs: []string{orderID}}
	}
	return Receipt{}, unexpected(cancelScript, reply)
}

// Restock adds qty units to a limited item and returns its remaining stock.
// Unlimited items cannot be restocked (ErrInvalid).
func (e *Engine) Restock(ctx context.Context, saleID, sku string, qty int64) (int64, error) {
	if err := validateID("sale", saleID); err != nil {
		return 0, err
	}
	if err := validateID("sku", sku); err != nil {
		return 0, err
	}
	if err := validateQty("qty", qty); err != nil {
		return 0, err
	}
	k := e.keys(saleID)
	keys := []string{k.sale, k.events, k.op(newToken())}
	args := []any{e.nowMs(), sku, qty, int64(maxStocked), e.StockChannel(), saleID + "|" + sku}
	done := e.soldOut.returning()
	reply, err := e.retryTransient(ctx, func() ([]any, error) {
		return e.runSale(ctx, saleID, restockScript, keys, args...)
	})
	done(saleID, sku) // even a failed call may have added stock
	if err != nil {
		return 0, err
	}
	switch code(reply) {
	case codeOK, codeReplay:
		if n, ok := at(reply, 1).(int64); ok {
			return n, nil
		}
	case codeUnknown:
		return 0, &NotFoundError{Kind: "sku", IDs: []string{sku}}
	case codeRefused:
		if str(at(reply, 1)) == "unlimited" {
			return 0, invalid("sku", "%s has unlimited stock", sku)
		}
		return 0, invalid("qty", "would stock %s with more than %d units in total", sku, int64(maxStocked))
	}
	return 0, unexpected(restockScript, reply)
}

// Pause stops a sale from selling until Resume; buys answer ErrSaleNotActive.
func (e *Engine) Pause(ctx context.Context, saleID string) error {
	return e.setPaused(ctx, saleID, true)
}

// Resume lets a paused sale sell again.
func (e *Engine) Resume(ctx context.Context, saleID string) error {
	return e.setPaused(ctx, saleID, false)
}

func (e *Engine) setPaused(ctx context.Context, saleID string, paused bool) error {
	if err := validateID("sale", saleID); err != nil {
		return err
	}
	k := e.keys(saleID)
	// The marker makes a resent call (its reply lost) change nothing again.
	keys := []string{k.sale, k.events, k.op(newToken())}
	reply, err := e.runSale(ctx, saleID, pauseScript, keys, e.nowMs(), flag(paused))
	if err != nil {
		return err
	}
	if code(reply) != codeOK {
		return unexpected(pauseScript, reply)
	}
	return nil
}

// Stock returns a sale's definition, status and every item's counters.
func (e *Engine) Stock(ctx context.Context, saleID string) (SaleState, error) {
	if err := validateID("sale", saleID); err != nil {
		return SaleState{}, err
	}
	key := e.keys(saleID).sale
	for attempt := 0; ; attempt++ {
		h, err := e.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return SaleState{}, fmt.Errorf("seckill: read sale %s: %w", saleID, err)
		}
		if len(h) > 0 {
			return e.decodeSale(saleID, h)
		}
		if attempt == missingRetries {
			return SaleState{}, fmt.Errorf("%w: sale %s vanished again after a rebuild", ErrUnavailable, saleID)
		}
		if err := e.rebuild(ctx, saleID); err != nil {
			return SaleState{}, err
		}
	}
}

func (e *Engine) decodeSale(saleID string, h map[string]string) (SaleState, error) {
	bad := func(field string) (SaleState, error) {
		return SaleState{}, fmt.Errorf("%w: sale %s field %q", ErrCorrupt, saleID, field)
	}
	num := func(field string) (int64, bool) {
		n, err := strconv.ParseInt(h[field], 10, 64)
		return n, err == nil
	}
	limit, ok1 := num("limit")
	start, ok2 := num("start")
	end, ok3 := num("end")
	if !ok1 || !ok2 || !ok3 {
		return bad("limit/start/end")
	}
	defined, err := parseLines(h["items"], true)
	if err != nil {
		return bad("items")
	}
	st := SaleState{Sale: Sale{
		ID: saleID, PerUserLimit: limit, Paused: h["paused"] == "1",
		StartsAt: fromUnixMs(start), EndsAt: fromUnixMs(end),
	}}
	st.Status = StatusAt(st.Sale.Paused, st.Sale.StartsAt, st.Sale.EndsAt, e.clock.Now())
	for _, d := range defined {
		it := ItemState{SKU: d.SKU}
		var ok bool
		if it.Remaining, ok = num("r:" + d.SKU); !ok {
			return bad("r:" + d.SKU)
		}
		if it.Stocked, ok = num("t:" + d.SKU); !ok {
			return bad("t:" + d.SKU)
		}
		if it.Stocked == Unlimited {
			if it.Sold, ok = num("s:" + d.SKU); !ok {
				return bad("s:" + d.SKU)
			}
		} else {
			it.Sold = it.Stocked - it.Remaining
		}
		st.Items = append(st.Items, it)
		st.Sale.Items = append(st.Sale.Items, Item{SKU: d.SKU, Stock: it.Stocked})
	}
	return st, nil
}

// Order returns an order as Redis holds it (pending or cancelled).
func (e *Engine) Order(ctx context.Context, orderID string) (Order, error) {
	saleID, err := SaleOfOrder(orderID)
	if err != nil {
		return Order{}, err
	}
	k := e.keys(saleID)
	for attempt := 0; ; attempt++ {
		rec, err := e.rdb.HGet(ctx, k.orders, orderID).Result()
		if err == nil {
			return decodeRecord(orderID, saleID, rec)
		}
		if err != redis.Nil {
			return Order{}, fmt.Errorf("seckill: read order %s: %w", orderID, err)
		}
		// Not there: is the order unknown, or the whole sale missing?
		err = e.rdb.HGet(ctx, k.sale, "limit").Err()
		if err == nil || attempt == missingRetries {
			return Order{}, &NotFoundError{Kind: "order", IDs: []string{orderID}}
		}
		if err != redis.Nil {
			return Order{}, fmt.Errorf("seckill: read sale %s: %w", saleID, err)
		}
		if err := e.rebuild(ctx, saleID); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Order{}, &NotFoundError{Kind: "order", IDs: []string{orderID}}
			}
			return Order{}, err
		}
	}
}

// transientRetries is how many times a call whose script may or may not
// have run (the connection failed after sending it) is sent again. Only calls
// that are idempotent by construction are retried: a buy carries its order
// id, a restock its restock id, a cancel cancels once.
const transientRetries = 2

// retryTransient runs f again when it fails with a transport error (not a
// reply from Redis, not a cancelled context).
func (e *Engine) retryTransient(ctx context.Context, f func() ([]any, error)) ([]any, error) {
	return e.retryTransientAfter(ctx, 0, f)
}

// retryTransientAfter is retryTransient for a call already sent failed
// times (in a coalesced call that failed as a whole, say): it waits, then
// sends it only the attempts left.
func (e *Engine) retryTransientAfter(ctx context.Context, failed int, f func() ([]any, error)) ([]any, error) {
	wait := 10 * time.Millisecond
	for range failed {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait *= 4
	}
	for attempt := failed; ; attempt++ {
		reply, err := f()
		if err == nil || attempt == transientRetries || !transient(ctx, err) {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait *= 4
	}
}

func transient(ctx context.Context, err error) bool {
	var reply redis.Error
	switch {
	case ctx.Err() != nil, errors.As(err, &reply):
		return false
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable), errors.Is(err, ErrCorrupt):
		return false
	}
	return true
}

func unexpected(s *luascript.Script, reply []any) error {
	if code(reply) == codeCorrupt && len(reply) > 1 {
		return fmt.Errorf("%w: %s script found a bad value at %s", ErrCorrupt, s.Name, str(at(reply, 1)))
	}
	return fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, reply)
}

func limitOf(s Sale) int64 {
	if s.PerUserLimit == 0 {
		return 1
	}
	return s.PerUserLimit
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromUnixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func formatItems(items []Item) string {
	lines := make([]Line, len(items))
	for i, it := range items {
		lines[i] = Line{SKU: it.SKU, Qty: it.Stock}
	}
	return formatLines(lines)
}

// at is reply[i], or nil past its end; from is reply[i:], or nothing. A
// reply shorter than its script promises decodes as ErrCorrupt, never panics.
func at(reply []any, i int) any {
	if i < len(reply) {
		return reply[i]
	}
	return nil
}

func from(reply []any, i int) []any {
	if i < len(reply) {
		return reply[i:]
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = str(v)
	}
	return out
}

func ints(vs []any) ([]int64, error) {
	out := make([]int64, len(vs))
	for i, v := range vs {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("not an integer: %v", v)
		}
		out[i] = n
	}
	return out, nil
}

// UnitsInOrders sums, per sku, the units of the sale's live (not cancelled)
// orders as Redis records them: what was sold according to the orders,
// independent of the stock counters. It scans every order (HSCAN), so it
// is for reconciliation, not for a hot path; under load the sum is a
// moving picture.
func (e *Engine) UnitsInOrders(ctx context.Context, saleID string) (map[string]int64, error) {
	if err := validateID("sale", saleID); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	key := e.keys(saleID).orders
	var cursor uint64
	for {
		var (
			kv  []string
			err error
		)
		kv, cursor, err = e.rdb.HScan(ctx, key, cursor, "", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("seckill: scan orders of sale %s: %w", saleID, err)
		}
		page := make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			page[kv[i]] = kv[i+1]
		}
		if err := addUnitsInOrders(out, saleID, page); err != nil {
			return nil, err
		}
		if cursor == 0 {
			return out, nil
		}
	}
}

// addUnitsInOrders adds, per sku, the units of the live order records among
// records (order id -> record) to out; a record that does not decode is an
// error.
func addUnitsInOrders(out map[string]int64, saleID string, records map[string]string) error {
	for id, rec := range records {
		o, err := decodeRecord(id, saleID, rec)
		if err != nil {
			return err
		}
		if o.Status == OrderCancelled {
			continue
		}
		for _, l := range o.Items {
			out[l.SKU] += l.Qty
		}
	}
	return nil
}
