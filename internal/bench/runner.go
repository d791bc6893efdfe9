package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/inventory"
)

const (
	// calibrationStock stocks a calibration item: far more than any
	// approach sells in a calibration run, and within the engine's bounds.
	calibrationStock = inventory.MaxQty
	// minStock is the least stock a calibrated approach gets.
	minStock = 100
	// maxErrorStreak: a client that gets this many errors in a row gives up
	// (the store is down, say), so a broken approach ends instead of
	// spinning until its time limit.
	maxErrorStreak = 100
	// grace bounds how long a buy may still take after the time limit
	// before its context ends.
	grace = 30 * time.Second
)

// measure runs one approach: a calibration run on an item of its own
// (unless the stock is fixed), then the measured run on a fresh item,
// then counts what the store recorded.
func measure(ctx context.Context, s *Stores, a approach, cfg Config, label string) (Result, error) {
	res := Result{Name: a.name, DB: a.db, Atomic: a.atomic, What: describe(a, cfg)}
	batch := 1
	if a.batched {
		batch = cfg.Batch
	}
	show := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(label+"  "+fmt.Sprintf(format, args...), false)
		}
	}
	stock, limit := cfg.Stock, cfg.Duration
	if stock == 0 {
		show("calibrating")
		r, err := onItem(ctx, s, a, cfg, calibrationStock, func(item hotItem) (run, error) {
			return drive(ctx, item, cfg.Concurrency, batch, cfg.Calibration, nil), nil
		})
		if err != nil {
			return res, err
		}
		if r.ops == 0 { // every buy failed: report the errors, measure nothing
			res.record(r)
			return res, ctx.Err()
		}
		res.CalibratedRate = float64(r.ops) / r.elapsed.Seconds()
		stock = int64(math.Ceil(res.CalibratedRate * cfg.Duration.Seconds()))
		stock = min(max(stock, minStock), calibrationStock)
		limit = 2*cfg.Duration + time.Second
	}
	res.Stock = stock
	var t tally
	r, err := onItem(ctx, s, a, cfg, stock, func(item hotItem) (run, error) {
		r := drive(ctx, item, cfg.Concurrency, batch, limit, func(elapsed time.Duration, acked int64) {
			show("%5.1fs  sold %s of %s  %s ops/s", elapsed.Seconds(), thousands(acked), thousands(stock),
				thousands(int64(float64(acked)/elapsed.Seconds())))
		})
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		var err error
		if t, err = item.count(cctx); err != nil {
			return r, fmt.Errorf("count sales in the store: %w", err)
		}
		return r, nil
	})
	if err != nil {
		return res, err
	}
	res.record(r)
	res.Sold, res.Remaining = t.sold, t.remaining
	if cfg.Progress != nil {
		cfg.Progress(fmt.Sprintf("%s  %s ops/s, sold %s of %s in %.1fs", label, thousands(int64(res.OpsPerSec())),
			thousands(res.Sold), thousands(res.Stock), res.Elapsed.Seconds()), true)
	}
	return res, ctx.Err()
}

// record sets what the clients of r saw.
func (res *Result) record(r run) {
	res.Ops, res.Acked, res.Errors, res.Retries = r.ops, r.acked, r.errors, r.retries
	res.Elapsed, res.SoldOut = r.elapsed, r.soldOut
	res.P50, res.P99, res.Max = r.hist.percentile(0.50), r.hist.percentile(0.99), r.hist.max
	if r.firstErr != nil {
		res.FirstError = r.firstErr.Error()
	}
}

// onItem prepares a fresh item of a, runs f on it and drops the item, even
// when ctx has ended.
func onItem(ctx context.Context, s *Stores, a approach, cfg Config, stock int64, f func(hotItem) (run, error)) (run, error) {
	item, err := a.prepare(ctx, s, cfg, stock)
	if err != nil {
		return run{}, fmt.Errorf("prepare the hot item: %w", err)
	}
	r, err := f(item)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if derr := item.drop(dctx); derr != nil && err == nil {
		err = fmt.Errorf("drop the hot item: %w", derr)
	}
	return r, err
}

// run is what the clients of one run saw.
type run struct {
	ops, acked, errors, retries int64
	elapsed                     time.Duration
	soldOut                     bool
	hist                        histogram
	firstErr                    error
}

// drive lets clients buy from item, each batch buys per call with distinct
// buyers, until one of them is told the item is sold out, limit has
// passed, or ctx ends. Calls in flight then finish. tick, if not nil, is
// called every 200ms with the time since the start and the buys acked.
func drive(ctx context.Context, item hotItem, clients, batch int, limit time.Duration, tick func(time.Duration, int64)) run {
	bctx, cancel := context.WithTimeout(ctx, limit+grace)
	defer cancel()
	var (
		stop    atomic.Bool
		acked   atomic.Int64
		mu      sync.Mutex
		total   run
		wg      sync.WaitGroup
		start   = time.Now()
		endTime = start.Add(limit)
	)
	for c := range clients {
		wg.Go(func() {
			var (
				mine    run
				streak  int
				buyers  = make([]string, batch)
				out     = make([]outcome, batch)
				prefix  = "c" + strconv.Itoa(c) + "-"
				next    int
				soldOut bool
			)
			for !stop.Load() && ctx.Err() == nil && time.Now().Before(endTime) {
				for i := range buyers {
					buyers[i] = prefix + strconv.Itoa(next)
					next++
				}
				clear(out)
				t0 := time.Now()
				item.buy(bctx, buyers, out)
				took := time.Since(t0)
				failed, sold := 0, 0
				for _, o := range out {
					mine.hist.record(took)
					mine.retries += o.retries
					switch {
					case o.err != nil:
						failed++
						if mine.firstErr == nil {
							mine.firstErr = o.err
						}
					case o.sold:
						sold++
					case o.soldOut:
						mine.ops++
						soldOut = true
					}
				}
				mine.errors += int64(failed)
				mine.ops += int64(sold)
				mine.acked += int64(sold)
				acked.Add(int64(sold))
				if soldOut {
					stop.Store(true)
					break
				}
				if failed == batch {
					if streak++; streak == maxErrorStreak {
						break
					}
				} else {
					streak = 0
				}
			}
			mu.Lock()
			defer mu.Unlock()
			total.ops += mine.ops
			total.acked += mine.acked
			total.errors += mine.errors
			total.retries += mine.retries
			total.soldOut = total.soldOut || soldOut
			total.hist.merge(&mine.hist)
			if total.firstErr == nil {
				total.firstErr = mine.firstErr
			}
		})
	}
	if tick != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		t := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				tick(time.Since(start), acked.Load())
			}
		}
		t.Stop()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total
}
