package service

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/pipeline"
)

// The live view: every sale as it stands, sampled once a period (default a
// second) from Redis, the stream and the database. It feeds the dashboard's
// server-sent events and the per-sale gauges of /metrics, so both show the
// same numbers and a scrape costs nothing.

// liveView is one sample, as the dashboard receives it.
type liveView struct {
	At       time.Time `json:"at"`
	Redis    string    `json:"redis"`    // "ok" or "unreachable"
	Database string    `json:"database"` // "ok" or "unreachable"
	// RateLimitDegraded: the rate limiter answered from its in-process
	// fallback within the last period (Redis could not be asked).
	RateLimitDegraded bool `json:"rate_limit_degraded"`
	// This instance's buy requests: rate and latency over the last period.
	BuysPerSecond float64    `json:"buys_per_second"`
	BuyP50Ms      float64    `json:"buy_p50_ms"`
	BuyP99Ms      float64    `json:"buy_p99_ms"`
	Sales         []liveSale `json:"sales"`
}

type liveSale struct {
	ID     string     `json:"id"`
	Status string     `json:"status"`
	Items  []liveItem `json:"items"`
	// Orders accepted by Redis (every instance), ever, cancelled included.
	Orders int64 `json:"orders"`
	// OrdersPerSecond: orders accepted over the last period.
	OrdersPerSecond float64 `json:"orders_per_second"`
	// Confirmed orders are in the database and not cancelled; pending ones
	// are accepted and not in the database yet.
	Confirmed int64 `json:"orders_confirmed"`
	Pending   int64 `json:"orders_pending"`
	// Backlog is the order stream's entries not yet stored; LagSeconds the
	// age of the oldest of them.
	Backlog    int64   `json:"stream_backlog"`
	LagSeconds float64 `json:"consumer_lag_seconds"`
	Error      string  `json:"error,omitempty"` // the sale could not be read
}

type liveItem struct {
	SKU        string `json:"sku"`
	Remaining  int64  `json:"remaining"` // -1: unlimited
	Stocked    int64  `json:"stocked"`   // -1: unlimited
	Sold       int64  `json:"sold"`
	SoldOut    bool   `json:"sold_out"`
	Drift      int64  `json:"drift"`       // from the last reconciliation pass
	StockDrift int64  `json:"stock_drift"` // likewise
}

// live keeps the newest sample and the dashboard's subscribers.
type live struct {
	mu      sync.Mutex
	view    liveView
	encoded []byte // view as JSON
	subs    map[chan []byte]struct{}

	latency latencyWindow
	drift   sync.Map // "sale|sku" -> [2]int64{drift, stock drift}
	// lastFallback is when the rate limiter last fell back (unix ns).
	lastFallback atomic.Int64
}

func newLive() *live {
	l := &live{subs: map[chan []byte]struct{}{}}
	l.encoded, _ = json.Marshal(l.view)
	return l
}

// current returns the newest sample.
func (l *live) current() (liveView, []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view, l.encoded
}

// subscribe returns a channel that receives every new sample as JSON; the
// newest one first. A subscriber too slow to take one misses it.
func (l *live) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	ch <- l.encoded
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}
}

func (l *live) publish(v liveView) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.view, l.encoded = v, b
	for ch := range l.subs {
		select {
		case ch <- b:
		default: // still holds the previous sample: it will get the next
		}
	}
}

// sampleLoop takes a sample every period until ctx ends.
func (s *Service) sampleLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	prev := map[string]int64{} // sale -> orders at the previous sample
	prevAt := time.Now()
	for {
		now := time.Now()
		v := s.sample(ctx, prev, now.Sub(prevAt))
		prevAt = now
		s.live.publish(v)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads every sale once. prev carries order counts between samples.
func (s *Service) sample(ctx context.Context, prev map[string]int64, since time.Duration) liveView {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := liveView{At: time.Now().UTC(), Redis: "ok", Database: "ok"}
	if s.rdb.Ping(ctx).Err() != nil {
		v.Redis = "unreachable"
	}
	if s.db.Ping(ctx) != nil {
		v.Database = "unreachable"
	}
	n, p50, p99 := s.live.latency.drain()
	if since > 0 {
		v.BuysPerSecond = float64(n) / since.Seconds()
	}
	v.BuyP50Ms, v.BuyP99Ms = p50*1000, p99*1000
	v.RateLimitDegraded = time.Since(time.Unix(0, s.live.lastFallback.Load())) < max(since, time.Second)
	ids, err := s.db.SaleIDs(ctx)
	if err != nil {
		return v
	}
	v.Sales = make([]liveSale, 0, len(ids))
	for _, id := range ids {
		ls := s.sampleSale(ctx, id)
		if old, ok := prev[id]; ok && since > 0 && ls.Orders >= old {
			ls.OrdersPerSecond = float64(ls.Orders-old) / since.Seconds()
		}
		if ls.Error == "" {
			prev[id] = ls.Orders
		}
		v.Sales = append(v.Sales, ls)
	}
	return v
}

func (s *Service) sampleSale(ctx context.Context, id string) liveSale {
	ls := liveSale{ID: id}
	// Every sale's dead-letter count exists from 0, so an alert on its
	// increase sees the first one.
	s.metrics.deadLetters.WithLabelValues(id)
	st, err := s.eng.Stock(ctx, id)
	if err != nil {
		ls.Error = toAPI(err).Message
		return ls
	}
	ls.Status = string(st.Status)
	for _, it := range st.Items {
		li := liveItem{SKU: it.SKU, Remaining: it.Remaining, Stocked: it.Stocked, Sold: it.Sold,
			SoldOut: it.Stocked >= 0 && it.Remaining == 0}
		if d, ok := s.live.drift.Load(id + "|" + it.SKU); ok {
			li.Drift, li.StockDrift = d.([2]int64)[0], d.([2]int64)[1]
		}
		ls.Items = append(ls.Items, li)
	}
	// Redis's count first, then the database's: an order stored in between
	// is then counted as pending, never as missing.
	ls.Orders, err = s.rdb.HLen(ctx, s.eng.Key(id, "orders")).Result()
	if err != nil {
		ls.Error = "redis unreachable"
		return ls
	}
	if lag, err := pipeline.ReadLag(ctx, s.rdb, s.eng, id); err == nil {
		ls.Backlog = lag.Entries
		if !lag.Oldest.IsZero() {
			ls.LagSeconds = max(time.Since(lag.Oldest).Seconds(), 0)
		}
	}
	counts, err := s.db.CountOrders(ctx, id)
	if err != nil {
		ls.Error = "database unreachable"
		return ls
	}
	ls.Confirmed = int64(counts["confirmed"])
	ls.Pending = max(ls.Orders-int64(counts["confirmed"]+counts["cancelled"]), 0)
	return ls
}

// latencyWindow keeps buy latencies between two samples: every one up to
// its capacity, then a uniform sample of them (reservoir sampling).
type latencyWindow struct {
	mu   sync.Mutex
	n    int64
	vals []float64 // seconds
}

const latencySamples = 4096

func (w *latencyWindow) observe(seconds float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if len(w.vals) < latencySamples {
		w.vals = append(w.vals, seconds)
		return
	}
	// Keep each of the n seen with probability latencySamples/n.
	if j := rand.Int64N(w.n); j < latencySamples {
		w.vals[j] = seconds
	}
}

// drain returns how many were observed, their p50 and p99, and starts over.
func (w *latencyWindow) drain() (n int64, p50, p99 float64) {
	w.mu.Lock()
	n, vals := w.n, w.vals
	w.n, w.vals = 0, make([]float64, 0, min(len(vals), latencySamples))
	w.mu.Unlock()
	if len(vals) == 0 {
		return n, 0, 0
	}
	slices.Sort(vals)
	at := func(q float64) float64 { return vals[min(int(q*float64(len(vals))), len(vals)-1)] }
	return n, at(0.50), at(0.99)
}
