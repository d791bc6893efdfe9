package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/luascript"
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
	// The index of pending moves (pending.go).
	ZAddNX(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	ZRangeByScoreWithScores(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.ZSliceCmd
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
	// Moves, if set, is told of every half of a move that changes a
	// sale's stock, before and after it is sent (MoveWatch).
	Moves MoveWatch
	// EntryPerOrder makes a buy script call append one stream entry per
	// order it buys, as before 2026-11-26, instead of one for all of them
	// (see buy.lua and ParseEntry). The embedded server gets one per order
	// whatever this says (it lacks XSETID); this is for tests and
	// measurements.
	EntryPerOrder bool
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
	pipes      pipeliners
	soldOut    *soldOutFlags
	streamMode string // buy.lua's stream mode: "1" one entry a call, "0" one an order
	moves      MoveWatch
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
		streamMode:  "1",
		moves:       opts.Moves,
	}
	if opts.EntryPerOrder {
		e.streamMode = "0"
	}
	e.pipes.one.e = e
	if f, ok := rdb.(masterFinder); ok {
		e.pipes.finder = f
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
	codeSame       = 16 // create: the same sale is there, untouched
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
