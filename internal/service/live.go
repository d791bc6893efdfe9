package service

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
)

// The live view: every sale as it stands, sampled once a period (default a
// second) from Redis, the stream and the database. Only sales that can
// still change are read (not ended and drained); the others keep their
// latest sample. It feeds the dashboard's
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
	// Confirmed orders are in the database, neither cancelled nor expired;
	// pending ones are accepted and not in the database yet.
	Confirmed int64 `json:"orders_confirmed"`
	Pending   int64 `json:"orders_pending"`
	// PaymentStep: the sale's orders are reservations. Of its confirmed
	// orders in the database, Paid are paid and Awaiting await payment;
	// Expired ones were not paid by their deadline (not confirmed). All
	// three are 0 for a sale without a payment step.
	PaymentStep bool  `json:"payment_step,omitempty"`
	Paid        int64 `json:"orders_paid"`
	Awaiting    int64 `json:"orders_awaiting_payment"`
	Expired     int64 `json:"orders_expired"`
	// Backlog is the order stream's entries not yet stored; LagSeconds the
	// age of the oldest of them.
	Backlog    int64   `json:"stream_backlog"`
	LagSeconds float64 `json:"consumer_lag_seconds"`
	Error      string  `json:"error,omitempty"` // the sale could not be read
	// OtherItems sums the items the streamed sample leaves out of Items
	// (a wide sale's, see live_bounds.go); nil when it shows every item.
	OtherItems *liveItemsSum `json:"other_items,omitempty"`
}

type liveItem struct {
	SKU        string `json:"sku"`
	Remaining  int64  `json:"remaining"` // -1: unlimited
	Stocked    int64  `json:"stocked"`   // -1: unlimited
	Sold       int64  `json:"sold"`
	SoldOut    bool   `json:"sold_out"`
	Awaiting   int64  `json:"awaiting_payment"` // sold units held by orders awaiting payment
	Drift      int64  `json:"drift"`            // from the last reconciliation pass
	StockDrift int64  `json:"stock_drift"`      // likewise
}

// live keeps the newest sample and the dashboard's subscribers.
type live struct {
	mu      sync.Mutex
	view    liveView
	encoded []byte // view as streams get it (liveView.streamed), as JSON
	subs    map[chan []byte]struct{}

	latency latencyWindow
	drift   sync.Map // "sale|sku" -> [2]int64{drift, stock drift}
	// dirty holds the sales this process repaired since the sampler last
	// read them (a repair does not move the sale's stream).
	dirty sync.Map // sale -> struct{}
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
	b, err := json.Marshal(v.streamed()) // live_bounds.go: a wide sale's items bounded
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
	st := newSamplerState()
	prevAt := time.Now()
	for {
		now := time.Now()
		v := s.sample(ctx, st, now.Sub(prevAt))
		prevAt = now
		s.live.publish(v)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// samplerState is what the sampler carries from one sample to the next.
type samplerState struct {
	prev    map[string]int64         // sale -> orders at the previous sample
	skipped map[string]time.Duration // sale -> time since prev, over samples that did not read it (see fullReadsPerSample)
	last    map[string]liveSale      // sale -> its latest sample
	read    map[string]saleRead      // sale -> when and as of what its state was last read
	marked  map[string]time.Time     // sale -> when its stream's mark was last read (see sampleMarks)
	final   map[string]int           // sale no longer live -> its final reads (finalTries: its sample is final)
}

// finalTries bounds the samples that read a sale no longer live whose read
// fails or shows a backlog (see sample).
const finalTries = 3

// saleRead is a sale's last full read: its stream's position then (see
// streamMarks), its definition (for its status, which moves with the
// clock), when it is read again all the same, and when it was read.
type saleRead struct {
	mark    string
	sale    inventory.Sale
	due, at time.Time
}

// recountEvery: a sale whose stream stands still is read in full again
// this often all the same (orders the database sold itself, in degraded
// mode, leave no trace in Redis; a repair by another process neither);
// with many live sales, every live sales ÷ recountsPerSecond seconds
// (recountOf): 10,000 live sales, about every 8 minutes, so that these
// reads (a few Redis commands and a database tally each) cost a sample
// the same whatever the number of sales.
const recountEvery = 30 * time.Second

// recountsPerSecond bounds the recounts of sales whose streams stand still.
var recountsPerSecond = 20

// recountOf is how often each of n live sales is recounted.
func recountOf(n int) time.Duration {
	return max(recountEvery, time.Duration(n)*time.Second/time.Duration(recountsPerSecond))
}

func newSamplerState() *samplerState {
	return &samplerState{prev: map[string]int64{}, skipped: map[string]time.Duration{}, last: map[string]liveSale{},
		read: map[string]saleRead{}, marked: map[string]time.Time{}, final: map[string]int{}}
}

// liveSaleIDs are the sales whose numbers can still change: the ones the
// order consumer still reads (not ended and drained).
func (s *Service) liveSaleIDs(ctx context.Context) ([]string, error) {
	if s.orders != nil {
		return s.orders.Live(), nil
	}
	return s.db.SaleIDs(ctx)
}

// sample reads every live sale once, in a few batches: their state, order
// counts and stream lags in one pipeline or transaction each, and their
// orders in the database in one query, for the sales whose numbers moved.
// Sales that can no longer change keep their latest sample.
func (s *Service) sample(ctx context.Context, st *samplerState, since time.Duration) liveView {
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
	ids, err := s.liveSaleIDs(ctx)
	if err != nil {
		return v
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
		delete(st.final, id)
	}
	// A sale that left the live set (ended and drained, or archived) is
	// sampled until a sample reads it as it stands then: a change its last
	// read missed (skipped for the bound on full reads, a buy just before
	// its end) would otherwise never show, nor its status "ended".
	ids = slices.Clip(ids)
	for _, id := range slices.Sorted(maps.Keys(st.last)) {
		if !live[id] && st.final[id] < finalTries {
			ids = append(ids, id)
		}
	}
	samples, skipped := s.sampleSales(ctx, st, ids, live)
	for i, ls := range samples {
		id := ids[i]
		if !live[id] && !skipped[i] {
			if ls.Error == "" && ls.Backlog == 0 {
				st.final[id] = finalTries
			} else {
				st.final[id]++ // tried again next sample, a few times at most
			}
			if ls.Error != "" {
				continue // its last figures stand: a failed read shows nothing of a sale that no longer moves
			}
		}
		if skipped[i] {
			// Changed but not read this time: its last rate stands, and
			// the next read's rate spans the samples it missed.
			st.skipped[id] += since
			st.last[id] = ls
			continue
		}
		span := since + st.skipped[id]
		delete(st.skipped, id)
		if old, ok := st.prev[id]; ok && span > 0 && ls.Orders >= old {
			ls.OrdersPerSecond = float64(ls.Orders-old) / span.Seconds()
		}
		if ls.Error == "" {
			st.prev[id] = ls.Orders
		} else {
			st.skipped[id] = span // a failed read is a sample missed: the next rate spans it
		}
		st.last[id] = ls
	}
	s.dropGone(ctx, st, live) // live_bounds.go: archived sales leave the view
	v.Sales = make([]liveSale, 0, len(st.last))
	for _, id := range slices.Sorted(maps.Keys(st.last)) {
		ls := st.last[id]
		if !live[id] {
			ls.OrdersPerSecond = 0 // ended and drained: nothing moves
		}
		v.Sales = append(v.Sales, ls)
	}
	v.Sales = s.asOneSale(ctx, v.Sales) // segments_live.go: a segmented sale shows once
	return v
}

// sampleSales reads the samples of the sales ids (live[id]: still live).
// A sale is read in full (its state, orders, stream lag and, when they
// moved, its orders in the database) only when something may have changed
// since its last full read: its stream's position moved (every script that
// changes a sale appends to its stream), its last read had a backlog or an
// error, this process's reconcile loop repaired it, or recountEvery has
// passed (a repair by another process, orders the database sold in
// degraded mode). Otherwise its last sample stands, with its status at the
// present time and the latest drift. A sample reads the position of the
// sales that may have moved and of a share of the others (see
// sampleMarks): one command each, in one pipeline, instead of six.
// A sample reads at most fullReadsPerSample sales in full that have a
// sample already (the ones read longest ago first); the others that
// changed keep their last sample until a later one reads them, so that a
// sample costs no more when a thousand sales are bought from at once.
// skipped[i] says sale ids[i] is one of those.
func (s *Service) sampleSales(ctx context.Context, st *samplerState, ids []string, live map[string]bool) (out []liveSale, skipped []bool) {
	out, skipped = make([]liveSale, len(ids)), make([]bool, len(ids))
	now := time.Now()
	marks := s.sampleMarks(ctx, st, ids, live, now)
	var full []string
	var at []int    // out's index of full[j]
	var moved []int // ids' index of sales with a sample that may have changed
	for i, id := range ids {
		r, ok := st.read[id]
		last, seen := st.last[id]
		mark, looked := marks[id] // not looked at: unmoved, this sample
		switch {
		case !ok || !seen:
			s.live.dirty.Delete(id)
			full, at = append(full, id), append(at, i)
		case looked && mark != r.mark || !now.Before(r.due) || last.Error != "" || last.Backlog != 0:
			moved = append(moved, i)
		default:
			if _, dirty := s.live.dirty.Load(id); dirty {
				moved = append(moved, i)
				continue
			}
			out[i] = s.standing(id, last, r, now)
		}
	}
	if room := max(fullReadsPerSample-len(full), 0); len(moved) > room {
		slices.SortStableFunc(moved, func(a, b int) int { return st.read[ids[a]].at.Compare(st.read[ids[b]].at) })
		for _, i := range moved[room:] {
			out[i], skipped[i] = s.standing(ids[i], st.last[ids[i]], st.read[ids[i]], now), true
		}
		moved = moved[:room]
	}
	for _, i := range moved {
		s.live.dirty.Delete(ids[i]) // before the read: a repair after it marks the sale again
		full, at = append(full, ids[i]), append(at, i)
	}
	if len(full) == 0 {
		return out, skipped
	}
	read, sales := s.readSales(ctx, st, full)
	for j, id := range full {
		out[at[j]] = read[j]
		if read[j].Error != "" || marks[id] == unknownMark {
			// Read again in its turn among the sales that changed (due
			// now, read now): as a sale never read, it would be read
			// first every sample, and a failure lasting starve the others.
			st.read[id] = saleRead{sale: st.read[id].sale, due: now, at: now}
			continue
		}
		every := recountOf(len(ids))
		due := now.Add(every)
		if _, ok := st.read[id]; !ok {
			// The first read: the next ones spread over the period, so
			// that a thousand sales are not all read in full in one sample.
			due = now.Add(time.Duration(fnv32(id)%uint32(every/time.Millisecond)) * time.Millisecond)
		}
		st.read[id] = saleRead{mark: marks[id], sale: sales[j], due: due, at: now}
	}
	return out, skipped
}

// fullReadsPerSample bounds the sales a sample reads in full, past the
// ones it reads for the first time (see sampleSales).
var fullReadsPerSample = 256

// sampleMarks reads the stream marks a sample looks at: of the sales that
// may have moved as far as this instance knows (markReader.moving: bought,
// cancelled, paid... through this instance, or read by its order
// consumer); of the ones it reads in full whatever their mark says (never
// read, last read failed or showed a backlog, repaired by this instance,
// due by recountEvery, changed but left unread by fullReadsPerSample, or
// no longer live); and of at most quietMarksPerSample of the others, the
// ones whose marks were read longest ago first. A sale whose mark is not
// read counts as unmoved this sample. So a change this instance does not
// hear of (a buy through another instance, whose order another
// instance's consumer stored) shows within ⌈quiet sales /
// quietMarksPerSample⌉ samples: at once with up to 500 live sales, within
// about 20 s with 10,000.
func (s *Service) sampleMarks(ctx context.Context, st *samplerState, ids []string, live map[string]bool, now time.Time) map[string]string {
	m := s.marks(ctx)
	var want, quiet []string
	for _, id := range ids {
		r, read := st.read[id]
		last, seen := st.last[id]
		_, dirty := s.live.dirty.Load(id)
		_, late := st.skipped[id]
		if m.moving(id) || !live[id] || !read || !seen || last.Error != "" || last.Backlog != 0 || dirty || late || !now.Before(r.due) {
			want = append(want, id)
		} else {
			quiet = append(quiet, id)
		}
	}
	slices.SortStableFunc(quiet, func(a, b string) int { return st.marked[a].Compare(st.marked[b]) })
	want = append(want, quiet[:min(len(quiet), quietMarksPerSample)]...)
	marks, err := m.read(ctx, want)
	if err == nil {
		for _, id := range want {
			st.marked[id] = now
		}
	}
	return marks
}

// quietMarksPerSample bounds the marks a sample reads of sales that did
// not move as far as this instance knows (see sampleMarks).
var quietMarksPerSample = 500

// standing is a sale's last sample, with its status at now and the latest
// drift.
func (s *Service) standing(id string, last liveSale, r saleRead, now time.Time) liveSale {
	last.Status = string(inventory.StatusAt(r.sale.Paused, r.sale.StartsAt, r.sale.EndsAt, now))
	last.Items = slices.Clone(last.Items)
	for j := range last.Items {
		if d, ok := s.live.drift.Load(id + "|" + last.Items[j].SKU); ok {
			last.Items[j].Drift, last.Items[j].StockDrift = d.([2]int64)[0], d.([2]int64)[1]
		}
	}
	return last
}

// readSales reads the sales' samples in full; sales[i] is sale ids[i]'s
// definition.
func (s *Service) readSales(ctx context.Context, st *samplerState, ids []string) (out []liveSale, sales []inventory.Sale) {
	out = make([]liveSale, len(ids))
	sales = make([]inventory.Sale, len(ids))
	states, errs := s.eng.Stocks(ctx, ids)
	for i, id := range ids {
		ls := liveSale{ID: id}
		// Every sale's dead-letter count exists from 0, so an alert on its
		// increase sees the first one.
		s.metrics.deadLetters.WithLabelValues(id)
		if errs[i] != nil {
			ls.Error = toAPI(errs[i]).Message
			out[i] = ls
			continue
		}
		ls.Status, sales[i] = string(states[i].Status), states[i].Sale
		for _, it := range states[i].Items {
			li := liveItem{SKU: it.SKU, Remaining: it.Remaining, Stocked: it.Stocked, Sold: it.Sold, Awaiting: it.Awaiting,
				SoldOut: it.Stocked >= 0 && it.Remaining == 0}
			if d, ok := s.live.drift.Load(id + "|" + it.SKU); ok {
				li.Drift, li.StockDrift = d.([2]int64)[0], d.([2]int64)[1]
			}
			ls.Items = append(ls.Items, li)
		}
		out[i] = ls
	}
	// Redis's counts first, then the database's: an order stored in between
	// is then counted as pending, never as missing.
	orders, orderErrs := s.eng.OrderCounts(ctx, ids)
	lags, lagErr := pipeline.ReadLags(ctx, s.rdb, s.eng, ids)
	now := time.Now()
	var counted []string
	for i := range ids {
		ls := &out[i]
		if ls.Error != "" {
			continue
		}
		if orderErrs[i] != nil {
			ls.Error = "redis unreachable"
			continue
		}
		ls.Orders = orders[i]
		if lagErr == nil {
			ls.Backlog = lags[i].Entries
			if !lags[i].Oldest.IsZero() {
				ls.LagSeconds = max(now.Sub(lags[i].Oldest).Seconds(), 0)
			}
		}
		counted = append(counted, ids[i])
	}
	// The database's figures of every sale read: whatever moved its stream
	// (a pay, an expiry, a cancel, a close) may have been stored before
	// this read, with no count of Redis's changed, and a sale that leaves
	// the live set is read a last time.
	if len(counted) == 0 {
		return out, sales
	}
	tallies, err := s.db.OrderTalliesOf(ctx, counted)
	for i := range ids {
		ls := &out[i]
		if ls.Error != "" {
			continue
		}
		if err != nil {
			ls.Error = "database unreachable"
			continue
		}
		c := tallies[ids[i]]
		ls.Confirmed, ls.Pending = c.Confirmed, max(ls.Orders-c.Confirmed-c.Cancelled, 0)
		if ls.PaymentStep = sales[i].PaymentTimeout > 0; ls.PaymentStep {
			ls.Paid, ls.Awaiting, ls.Expired = c.Paid, c.Unpaid, c.Expired
		}
	}
	return out, sales
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
