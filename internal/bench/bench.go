// Package bench measures every way of deducting the stock of a hot item
// that the seeds compare — database locks, a Redis lock, a naive Redis
// read-check-write, the engine's Lua scripts (EVAL, EVALSHA, pipelined
// batches) and segmented stock — side by side, on the same workload, in one
// run: one hot item, C concurrent clients, each buy one unit by a distinct
// buyer, until the item sells out.
//
// What each approach sold is counted from the store afterwards (rows of a
// sales log table, sold counters Redis kept, the engine's order stream),
// never from the replies the clients got, so an approach that oversells
// shows it. It is what `seckill bench` runs.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

// The approaches, in the order a run measures them.
const (
	DBPessimisticLock   = "db-pessimistic-lock"
	DBConditionalUpdate = "db-conditional-update"
	DBOptimisticLock    = "db-optimistic-lock"
	RedisLock           = "redis-lock"
	RedisNaive          = "redis-naive"
	RedisLuaEval        = "redis-lua-eval"
	RedisLuaEvalSHA     = "redis-lua-evalsha"
	RedisSegmented      = "redis-segmented"
	RedisCoalesced      = "redis-coalesced"
	RedisBatched        = "redis-batched"
)

// approach is one way of deducting stock.
type approach struct {
	name string
	what string // one line for the output; {K}, {B}, {W}: see describe
	db   bool   // runs on the database (else on Redis)
	// atomic approaches must never oversell; only redis-naive may.
	atomic bool
	// batched approaches send Config.Batch buys per call.
	batched bool
	// prepare creates a fresh hot item holding stock units.
	prepare func(ctx context.Context, s *Stores, cfg Config, stock int64) (hotItem, error)
}

// hotItem is one fresh hot item of one approach: its own keys or tables.
type hotItem interface {
	// buy tries to buy one unit for each buyer and sets out[i] to the
	// outcome of buyers[i]. len(out) == len(buyers).
	buy(ctx context.Context, buyers []string, out []outcome)
	// count reads from the store what was sold and what is left.
	count(ctx context.Context) (tally, error)
	// drop removes the item's keys or tables.
	drop(ctx context.Context) error
}

// outcome is what one buy did, as its client saw it.
type outcome struct {
	sold    bool
	soldOut bool
	// retries counts the attempts a buy made before its outcome: version
	// conflicts, refused lock acquisitions, empty segments passed over.
	retries int64
	err     error
}

// tally is what the store says after a run.
type tally struct {
	sold      int64 // units recorded as sold: log rows, sold counters, order events
	remaining int64 // the stock counter (negative: it went below zero)
}

var approaches = []approach{
	{name: DBPessimisticLock, db: true, atomic: true, prepare: prepareDB(pessimistic),
		what: "BEGIN; SELECT stock ... FOR UPDATE (SQLite: BEGIN IMMEDIATE); check in Go; UPDATE; INSERT the sale; COMMIT"},
	{name: DBConditionalUpdate, db: true, atomic: true, prepare: prepareDB(conditional),
		what: "UPDATE ... SET stock = stock - 1 WHERE id = 1 AND stock >= 1 and the sale's INSERT as one statement (PostgreSQL: WITH ... INSERT; SQLite: one transaction)"},
	{name: DBOptimisticLock, db: true, atomic: true, prepare: prepareDB(optimistic),
		what: "SELECT stock, version; check in Go; UPDATE ... WHERE version = ? with the sale's INSERT; on a conflict read again"},
	{name: RedisLock, atomic: true, prepare: prepareLock,
		what: "the lock package: SET NX PX with an owner token and a fence (waiters pause ~{W}); GET, check in Go, DECRBY + INCR sold in MULTI; compare-and-delete release"},
	{name: RedisNaive, prepare: prepareNaive,
		what: "GET, check in Go, then DECRBY + INCR sold in MULTI: nothing holds the stock in between"},
	{name: RedisLuaEval, atomic: true, prepare: prepareEngine(singleCalls(true), false),
		what: "the engine's Buy with EvalEveryCall, one buy per call: buy.lua sent in full (EVAL) every call"},
	{name: RedisLuaEvalSHA, atomic: true, prepare: prepareEngine(singleCalls(false), false),
		what: "the engine's Buy, one buy per call: EVALSHA of buy.lua (checks, deducts, records the order and its stream event)"},
	{name: RedisSegmented, atomic: true, prepare: prepareSegmented,
		what: "the segment package: stock over {K} segment sales of the engine; each buy a full engine buy in the buyer's home segment, falling through by moving units from the fullest segments"},
	{name: RedisCoalesced, atomic: true, prepare: prepareEngine(inventory.Options{}, false),
		what: "the engine's Buy as it comes: concurrent buys coalesced into one buy.lua call, sold-out flags"},
	{name: RedisBatched, atomic: true, batched: true, prepare: prepareEngine(singleCalls(false), true),
		what: "the engine's BuyMany: {B} buys per call, one buy.lua run for the batch"},
}

// singleCalls are engine options that send every Buy as its own script
// call and ask Redis even after a sell-out: the script alone.
func singleCalls(evalEveryCall bool) inventory.Options {
	return inventory.Options{EvalEveryCall: evalEveryCall, Coalesce: inventory.Coalesce{Off: true},
		SoldOut: inventory.SoldOut{Off: true}}
}

// Names returns the names of every approach, in the order a run measures them.
func Names() []string {
	out := make([]string, len(approaches))
	for i, a := range approaches {
		out[i] = a.name
	}
	return out
}

func lookup(name string) (approach, bool) {
	for _, a := range approaches {
		if a.name == name {
			return a, true
		}
	}
	return approach{}, false
}

// Select returns the approaches named in a comma-separated list, in run
// order, or an error naming every unknown one. An empty list selects all.
func Select(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return Names(), nil
	}
	want := map[string]bool{}
	var unknown []string
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		if _, ok := lookup(n); !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		want[n] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown approach %s; known: %s", strings.Join(unknown, ", "), strings.Join(Names(), ", "))
	}
	var out []string
	for _, n := range Names() {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// Needs reports which stores the named approaches use.
func Needs(names []string) (redis, db bool) {
	for _, n := range names {
		if a, ok := lookup(n); ok {
			db = db || a.db
			redis = redis || !a.db
		}
	}
	return redis, db
}

// describe returns what an approach does, with cfg's numbers.
func describe(a approach, cfg Config) string {
	return strings.NewReplacer("{K}", strconv.Itoa(cfg.Segments), "{B}", strconv.Itoa(cfg.Batch),
		"{W}", lockWait.String()).Replace(a.what)
}

// Config shapes a run. The zero value of every field but Approaches is usable.
type Config struct {
	// Approaches to measure (Names() or a subset, see Select); nil: all.
	Approaches []string
	// Concurrency is the number of clients buying at once. Default 64.
	Concurrency int
	// Stock is the hot item's stock, the same for every approach; each runs
	// until it sells out or Duration passes. 0 (the default) sizes it per
	// approach instead: a calibration run of Calibration measures the
	// approach's rate, the stock is that rate times Duration, and the
	// approach runs until it sells out (at most 2 x Duration + 1s).
	Stock int64
	// Duration is how long each approach should take. Default 5s.
	Duration time.Duration
	// Calibration is how long the calibration run of each approach takes.
	// Default Duration/10, at least 250ms.
	Calibration time.Duration
	// Segments is redis-segmented's number of segments (K). Default 8.
	Segments int
	// Batch is redis-batched's buys per call. Default 16.
	Batch int
	// Rounds measures every approach this many times, interleaved (all
	// approaches, then all again), and reports each approach's median
	// round: a burst of noise on a shared machine then moves one round,
	// not the ratios. Default 1.
	Rounds int
	// Progress, if not nil, gets a progress line per approach (for a terminal).
	Progress func(line string, final bool)
}

func (c *Config) defaults() {
	if c.Approaches == nil {
		c.Approaches = Names()
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Calibration <= 0 {
		c.Calibration = max(c.Duration/10, 250*time.Millisecond)
	}
	if c.Segments <= 0 {
		c.Segments = 8
	}
	if c.Batch <= 0 {
		c.Batch = 16
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
}

// Result is one approach's measurement.
type Result struct {
	Name   string
	DB     bool // a database approach (the ratio's denominator is the best of these)
	Atomic bool // must not oversell
	What   string
	// Stock is the units the hot item started with.
	Stock int64
	// Ops counts the buys answered: sold, or refused as sold out.
	Ops int64
	// Acked counts the buys whose client was told they sold. Only for
	// comparison: Sold is what counts.
	Acked   int64
	Errors  int64
	Retries int64 // see outcome.retries
	// Elapsed is from the first buy sent to the last answered.
	Elapsed time.Duration
	// SoldOut: the run ended because the item sold out, not at the time limit.
	SoldOut bool
	// Latency of each buy, from sending its call to the answer (a batched
	// buy's is its batch's).
	P50, P99, Max time.Duration
	// Sold and Remaining are read from the store after the run.
	Sold, Remaining int64
	// CalibratedRate is the ops/s of the calibration run, when there was one.
	CalibratedRate float64
	FirstError     string
	// RoundOps is the ops/s of every round, in run order, when there were
	// several; the rest of the Result is the median round's.
	RoundOps []float64
}

// OpsPerSec is the rate of answered buys.
func (r Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Oversold is the units the store recorded as sold beyond the stock.
func (r Result) Oversold() int64 { return max(r.Sold-r.Stock, 0) }

// Consistent reports whether the store's stock counter and its record of
// sales agree: remaining + sold == stock.
func (r Result) Consistent() bool { return r.Remaining+r.Sold == r.Stock }

// Report is a whole run.
type Report struct {
	Machine Machine
	Config  Config
	// Results has one Result per approach: its median round.
	Results []Result
	// Rounds holds every round's results when there were several.
	Rounds [][]Result
}

// BestDB returns the highest ops/s of the database approaches measured,
// or 0 if none was.
func (r Report) BestDB() float64 {
	best := 0.0
	for _, res := range r.Results {
		if res.DB {
			best = max(best, res.OpsPerSec())
		}
	}
	return best
}

// Ratio is an approach's ops/s divided by the best database approach's, or
// 0 when no database approach was measured.
func (r Report) Ratio(res Result) float64 {
	best := r.BestDB()
	if best == 0 {
		return 0
	}
	return res.OpsPerSec() / best
}

// Broken returns a line for every result that broke an invariant (an
// atomic approach that oversold, a store whose counter and record of sales
// disagree) or measured nothing. redis-naive overselling is no surprise
// and not listed.
func (r Report) Broken() []string {
	var out []string
	all := r.Results
	if len(r.Rounds) > 1 { // an invariant broken in any round counts
		all = nil
		for _, round := range r.Rounds {
			all = append(all, round...)
		}
	}
	for _, res := range all {
		if res.Ops == 0 {
			out = append(out, fmt.Sprintf("%s sold nothing (%d errors)", res.Name, res.Errors))
		}
		if res.Atomic && res.Oversold() > 0 {
			out = append(out, fmt.Sprintf("%s oversold %d units", res.Name, res.Oversold()))
		}
		if !res.Consistent() {
			out = append(out, fmt.Sprintf("%s: the store's remaining stock (%d) + units sold (%d) != stock (%d)",
				res.Name, res.Remaining, res.Sold, res.Stock))
		}
	}
	return out
}

// Run measures every approach of cfg, one after another, each on a fresh
// hot item, Config.Rounds times over. It stops at the first approach that
// fails to set up or count (returning what was measured so far) or when ctx
// ends.
func Run(ctx context.Context, s *Stores, cfg Config) (Report, error) {
	cfg.defaults()
	rep := Report{Machine: s.machine(), Config: cfg}
	for _, name := range cfg.Approaches {
		a, ok := lookup(name)
		if !ok {
			return rep, fmt.Errorf("bench: unknown approach %q", name)
		}
		if a.db && s.DB == nil || !a.db && s.Redis == nil {
			return rep, fmt.Errorf("bench: %s needs a store that was not opened", name)
		}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		var results []Result
		for i, name := range cfg.Approaches {
			a, _ := lookup(name)
			label := fmt.Sprintf("[%d/%d] %-22s", i+1, len(cfg.Approaches), name)
			if cfg.Rounds > 1 {
				label = fmt.Sprintf("round %d/%d ", round, cfg.Rounds) + label
			}
			res, err := measure(ctx, s, a, cfg, label)
			if err != nil {
				rep.Results = results
				return rep, fmt.Errorf("bench: %s: %w", name, err)
			}
			results = append(results, res)
		}
		rep.Rounds = append(rep.Rounds, results)
	}
	rep.Results = medians(rep.Rounds)
	if cfg.Rounds == 1 {
		rep.Rounds = nil
	}
	return rep, nil
}

// medians picks each approach's median round by ops/s (the lower middle of
// an even count), with every round's ops/s in RoundOps.
func medians(rounds [][]Result) []Result {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := make([]Result, len(rounds[0]))
	for i := range out {
		byOps := make([]Result, len(rounds))
		ops := make([]float64, len(rounds))
		for r := range rounds {
			byOps[r], ops[r] = rounds[r][i], rounds[r][i].OpsPerSec()
		}
		slices.SortStableFunc(byOps, func(a, b Result) int { return cmp.Compare(a.OpsPerSec(), b.OpsPerSec()) })
		out[i] = byOps[(len(byOps)-1)/2]
		out[i].RoundOps = ops
	}
	return out
}
