package cost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/internal/bench/http/loadgen"
)

// RoomConfig asks Run for the waiting room's measurement instead of
// rounds of builds: one `serve` process, and per pass (Config.Rounds) the
// phases of roomPhases side by side, each a closed loop of Config.Conns
// connections for Config.Duration (an admitted-buy load ends sooner when
// its admitted buyers have all bought).
type RoomConfig struct {
	// Waiting is how many buyers join the line's room (unmeasured) before
	// its joins are measured: the room the joins, the place reads and the
	// background reads meet holds them and every measured joiner.
	Waiting int
	// Admitted is how many buyers each admitted-buy load has: they join a
	// room that admits at once, and the load starts when every one of them
	// holds an admission.
	Admitted int
	// ReadRate is the background's place reads per second, an open loop
	// over the line's buyers, during the loaded phases.
	ReadRate float64
	// BuyRate, when above 0, adds the open phases: admitted buys and plain
	// buys, each an open loop at BuyRate per second for Config.Duration
	// (a fresh buyer each) beside the background reads. An admitted
	// buyer's buys arrive at the rate the room admits, not as a closed
	// loop saturating the machine: these phases compare the two kinds of
	// buy at one such rate.
	BuyRate float64
}

// The phases of a room pass, in the order they run.
const (
	PhasePlainBuys          = "plain-buys"
	PhaseJoins              = "joins"
	PhasePlaceReads         = "place-reads"
	PhaseAdmittedBuys       = "admitted-buys"
	PhaseAdmittedBuysLoaded = "admitted-buys-loaded"
	PhasePlainBuysLoaded    = "plain-buys-loaded"
	PhaseAdmittedBuysOpen   = "admitted-buys-open"
	PhasePlainBuysOpen      = "plain-buys-open"
)

// roomPhases names each phase and says what it loads.
var roomPhases = []struct{ name, what string }{
	{PhasePlainBuys, "buys of a sale without a room, a fresh buyer each"},
	{PhaseJoins, "POST /queue of the line's room, a fresh buyer each"},
	{PhasePlaceReads, "GET /queue of the line's buyers, round robin"},
	{PhaseAdmittedBuys, "buys with X-Purchase-Token by buyers already admitted"},
	{PhaseAdmittedBuysLoaded, "the same, while place reads of the line run in the background"},
	{PhasePlainBuysLoaded, "buys of a sale without a room, while the same background runs"},
	{PhaseAdmittedBuysOpen, "admitted buys, an open loop at --room-buy-rate, while the same background runs"},
	{PhasePlainBuysOpen, "buys of a sale without a room, the same open loop, while the same background runs"},
}

// ErrNoRooms is the error, wrapped, of a room measurement of a service
// that has no waiting rooms (the admission API of 2026-11-28): it refused
// a sale's "admission", or has no queue endpoints.
var ErrNoRooms = errors.New("the service has no waiting rooms (sales with an \"admission\", POST/GET /v1/sales/{sale}/queue)")

const (
	// admitConns is how many requests at once join the admitted-buy
	// rooms' buyers and read their admissions (not measured).
	admitConns = 32
	// admitWait is how long a room may take to admit its buyers.
	admitWait = 2 * time.Minute
	// warmUp is how long the background reads run before a loaded
	// phase's window opens.
	warmUp = 500 * time.Millisecond
)

// The rooms' admission objects. The line admits one buyer a second, so
// its buyers stay waiting and a place read is a waiting buyer's (a rank);
// the admitted-buy rooms admit as fast as they can, for ten minutes each.
func lineAdmission(maxWaiting int) map[string]any {
	return map[string]any{"rate_per_s": 1, "max_waiting": maxWaiting}
}

func openAdmission(maxWaiting int) map[string]any {
	return map[string]any{"rate_per_s": 0, "capacity_per_s": 1_000_000, "admit_ttl_s": 600, "max_waiting": maxWaiting}
}

// RunRoom measures the room's phases (cfg.Room) side by side in one
// `serve` process of cfg.Builds[0], cfg.Rounds passes. A failed or
// interrupted pass ends the run; the report holds the phases measured
// until then. A service without rooms fails with ErrNoRooms before any
// load.
func RunRoom(ctx context.Context, cfg Config) (RoomReport, error) {
	rc := *cfg.Room
	rep := RoomReport{Bin: cfg.Builds[0], Conns: cfg.Conns, DurationS: cfg.Duration.Seconds(),
		Waiting: rc.Waiting, Admitted: rc.Admitted, ReadRate: rc.ReadRate, BuyRate: rc.BuyRate}
	e, err := open(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer e.close()
	rep.Redis = e.describeRedis()
	r := e.oneServe(&cfg, "room", "")
	rep.Database, rep.KeyPrefix = r.db, r.prefix
	err = r.runRoom(ctx, &rep)
	return rep.summarize(), err
}

// runRoom starts serve and runs the passes; the deferred clean-up runs
// whatever happens, ctx cancelled included.
func (r *round) runRoom(ctx context.Context, rep *RoomReport) (err error) {
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := r.startServe(ctx); err != nil {
		return err
	}
	accepted := 0 // 2xx buys of the run: orders the database must hold
	for pass := 1; pass <= r.cfg.Rounds; pass++ {
		if err := r.roomPass(ctx, pass, &accepted, rep); err != nil {
			return fmt.Errorf("pass %d: %w", pass, err)
		}
	}
	return nil
}

// roomPass creates the pass's sales and measures each phase on them,
// appending each to rep as it is measured.
func (r *round) roomPass(ctx context.Context, pass int, accepted *int, rep *RoomReport) error {
	rc := r.cfg.Room
	tokens := r.env.tokens
	plain, plainLoaded := fmt.Sprintf("plain-%d", pass), fmt.Sprintf("plainload-%d", pass)
	line, admit, admitLoaded := fmt.Sprintf("line-%d", pass), fmt.Sprintf("admit-%d", pass), fmt.Sprintf("admitload-%d", pass)
	admitOpen, plainOpen := fmt.Sprintf("admitopen-%d", pass), fmt.Sprintf("plainopen-%d", pass)
	maxWaiting := max(1_000_000, len(tokens)+1)
	// The rooms first: a service without rooms fails here, before any load.
	for _, s := range []struct {
		id        string
		admission map[string]any
	}{{line, lineAdmission(maxWaiting)}, {admit, openAdmission(maxWaiting)}, {admitLoaded, openAdmission(maxWaiting)},
		{plain, nil}, {plainLoaded, nil}, {admitOpen, openAdmission(maxWaiting)}, {plainOpen, nil}} {
		if (s.id == admitOpen || s.id == plainOpen) && rc.BuyRate <= 0 {
			continue
		}
		if err := r.createSale(ctx, s.id, s.admission); err != nil {
			return err
		}
	}
	if err := r.probeRoom(ctx, line); err != nil {
		return err
	}
	// step keeps a phase that was measured, failed or not, and closes its
	// sale: the service's background work on a sale (its reconciliation
	// every minute scans every order of every live sale) is the cost of
	// the phase that sells in it, not of the phases and passes after it.
	saleOf := map[string]string{PhasePlainBuys: plain, PhaseAdmittedBuys: admit, PhaseAdmittedBuysLoaded: admitLoaded,
		PhasePlainBuysLoaded: plainLoaded, PhaseAdmittedBuysOpen: admitOpen, PhasePlainBuysOpen: plainOpen}
	step := func(p RoomPhase, err error) error {
		if err != nil && p.Sent == 0 {
			return err
		}
		rep.Phases = append(rep.Phases, p)
		r.progress("pass %d %s: %.0f/s, %.1f µs each in all, p99 %.2f ms", pass, p.Phase, p.BuysPerS, p.TotalUS, p.P99MS)
		if sale, ok := saleOf[p.Phase]; ok && err == nil {
			err = r.closeSale(ctx, sale)
		}
		return err
	}

	if rc.Waiting > 0 {
		r.progress("pass %d: joining %d buyers to %s (not measured)", pass, rc.Waiting, line)
		// Every one of them, however long it takes: not a measured load.
		fill := loadgen.Closed{Method: http.MethodPost, URL: r.queueURL(line), Tokens: tokens[:rc.Waiting],
			Conns: r.cfg.Conns, Duration: 24 * time.Hour, Timeout: 30 * time.Second}.Run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fill.Status2xx != rc.Waiting {
			return fmt.Errorf("joining %d buyers to %s before the joins: %s", rc.Waiting, line, outcome(fill))
		}
	}

	if err := step(r.measure(ctx, pass, accepted, window{phase: PhasePlainBuys, buys: true, load: func() loadgen.ClosedReport {
		return r.load(ctx, http.MethodPost, r.buyURLOf(plain), buyBody, tokens, nil)
	}})); err != nil {
		return err
	}

	joins, err := r.measure(ctx, pass, accepted, window{phase: PhaseJoins, load: func() loadgen.ClosedReport {
		return r.load(ctx, http.MethodPost, r.queueURL(line), "", tokens[rc.Waiting:], nil)
	}})
	if err := step(joins, err); err != nil {
		return err
	}
	// The closed loop sends its tokens in order: the first Sent joined.
	readers := tokens[:rc.Waiting+joins.Sent]
	if len(readers) == 0 {
		return fmt.Errorf("no buyer joined %s: no place to read", line)
	}

	if err := step(r.measure(ctx, pass, accepted, window{phase: PhasePlaceReads, load: func() loadgen.ClosedReport {
		return r.load(ctx, http.MethodGet, r.queueURL(line), "", cycle(readers, len(tokens)), nil)
	}})); err != nil {
		return err
	}

	for _, a := range []struct {
		phase, sale, line string
		readers           []string
	}{{PhaseAdmittedBuys, admit, "", nil}, {PhaseAdmittedBuysLoaded, admitLoaded, line, readers}} {
		buyers, extra, err := r.admitted(ctx, pass, a.sale, rc.Admitted)
		if err != nil {
			return err
		}
		if err := step(r.admittedBuys(ctx, pass, accepted, a.phase, a.sale, a.line, a.readers, false, buyers, extra)); err != nil {
			return err
		}
	}

	bg, err := r.background(ctx, line, readers)
	if err != nil {
		return err
	}
	p, err := r.measure(ctx, pass, accepted, window{phase: PhasePlainBuysLoaded, buys: true, load: func() loadgen.ClosedReport {
		rep := r.load(ctx, http.MethodPost, r.buyURLOf(plainLoaded), buyBody, tokens, nil)
		bg.stop()
		return rep
	}})
	p.Background = bg.result()
	p.Problems = append(p.Problems, p.Background.problems()...)
	if err := step(p, err); err != nil || rc.BuyRate <= 0 {
		return err
	}

	// The open phases: both kinds of buy at one rate, beside the reads.
	// The admitted buyers are admitted first, then the two phases run one
	// after the other, in turns (the admitted first in odd passes, the
	// plain first in even ones), so that neither is always the one right
	// after the admissions or after the closed loops' load.
	buyers, extra, err := r.admitted(ctx, pass, admitOpen, r.openRequests())
	if err != nil {
		return err
	}
	admittedOpen := func() error {
		return step(r.admittedBuys(ctx, pass, accepted, PhaseAdmittedBuysOpen, admitOpen, line, readers, true, buyers, extra))
	}
	plainOpenPhase := func() error {
		bg, err := r.background(ctx, line, readers)
		if err != nil {
			return err
		}
		p, err := r.measure(ctx, pass, accepted, window{phase: PhasePlainBuysOpen, buys: true, load: func() loadgen.ClosedReport {
			rep := r.openLoad(ctx, r.buyURLOf(plainOpen), buyBody, tokens[:min(len(tokens), r.openRequests())], nil)
			bg.stop()
			return rep
		}})
		p.Background = bg.result()
		p.Problems = append(p.Problems, p.Background.problems()...)
		return step(p, err)
	}
	first, second := admittedOpen, plainOpenPhase
	if pass%2 == 0 {
		first, second = plainOpenPhase, admittedOpen
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

// openRequests is how many requests an open phase sends.
func (r *round) openRequests() int {
	return loadgen.Attack{Rate: r.cfg.Room.BuyRate, Duration: r.cfg.Duration}.Requests()
}

// openLoad sends an open loop at the room's BuyRate for Config.Duration,
// request i as tokens[i] (with extra[i]); its report as a closed loop's,
// its latencies from each request's scheduled send.
func (r *round) openLoad(ctx context.Context, url, body string, tokens, extra []string) loadgen.ClosedReport {
	a := loadgen.Attack{Method: http.MethodPost, URL: url, Tokens: tokens, Extra: extra, Rate: r.cfg.Room.BuyRate,
		Duration: r.cfg.Duration, Timeout: 30 * time.Second, Conns: r.cfg.Conns, MaxInFlight: 8192}
	if body != "" {
		a.Body, a.Header = []byte(body), http.Header{"Content-Type": {"application/json"}}
	}
	rep := a.Run(ctx)
	out := loadgen.ClosedReport{Conns: a.Conns, DurationS: rep.DurationS, Sent: rep.Sent, Status2xx: rep.Status2xx,
		Non2xx: rep.Non2xx, Non2xxByStatus: rep.Non2xxByStatus, Errors: rep.Errors, ErrorsByKind: rep.ErrorsByKind,
		LatencyMS: rep.LatencyMS}
	if rep.DurationS > 0 {
		out.Rate2xx = float64(rep.Status2xx) / rep.DurationS
	}
	return out
}

// admitted admits n buyers (the first of the run's) to sale's room (not
// measured): the buyers, and the header line of each one's admission.
func (r *round) admitted(ctx context.Context, pass int, sale string, n int) (buyers, extra []string, err error) {
	buyers = r.env.tokens[:min(n, len(r.env.tokens))]
	r.progress("pass %d: admitting %d buyers to %s (not measured)", pass, len(buyers), sale)
	admissions, err := r.admit(ctx, sale, buyers)
	if err != nil {
		return nil, nil, err
	}
	extra = make([]string, len(buyers))
	for i, a := range admissions {
		extra[i] = "X-Purchase-Token: " + a
	}
	return buyers, extra, nil
}

// admittedBuys measures the buys of buyers, admitted to sale's room, each
// with its admission's header line (extra; admitted); with readers, while
// they read their places in line's room at rc.ReadRate. open: the buys are
// an open loop at rc.BuyRate (openLoad).
func (r *round) admittedBuys(ctx context.Context, pass int, accepted *int, phase, sale, line string, readers []string, open bool, buyers, extra []string) (RoomPhase, error) {
	var bg *background
	var err error
	if len(readers) > 0 {
		if bg, err = r.background(ctx, line, readers); err != nil {
			return RoomPhase{Phase: phase}, err
		}
		defer bg.stop()
	}
	p, err := r.measure(ctx, pass, accepted, window{phase: phase, buys: true, finite: true, load: func() loadgen.ClosedReport {
		var rep loadgen.ClosedReport
		if open {
			rep = r.openLoad(ctx, r.buyURLOf(sale), buyBody, buyers, extra)
		} else {
			rep = r.load(ctx, http.MethodPost, r.buyURLOf(sale), buyBody, buyers, extra)
		}
		if bg != nil {
			bg.stop()
		}
		return rep
	}})
	if bg != nil {
		p.Background = bg.result()
		p.Problems = append(p.Problems, p.Background.problems()...)
	}
	return p, err
}

// progress writes a line of what the run does to Config.Progress.
func (r *round) progress(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", a...)
	}
}

// window is one measured load of a pass.
type window struct {
	phase string
	// buys: the requests are buys, and the window lasts until the
	// database holds their orders.
	buys bool
	// finite: the load ends when its tokens do (the admitted buyers), not
	// a problem.
	finite bool
	load   func() loadgen.ClosedReport
}

// measure runs w's load inside a window of the counters, as a round does:
// CPU per 2xx request of the service, Redis and PostgreSQL from the load's
// start until (for buys) the database holds every order.
func (r *round) measure(ctx context.Context, pass int, accepted *int, w window) (RoomPhase, error) {
	p := RoomPhase{Phase: w.phase, Result: Result{Build: r.build, Bin: r.bin, Round: pass, Database: r.db, KeyPrefix: r.prefix, Load: "closed"}}
	res := &p.Result
	quietGenerator()
	r.sampler.procs = nil // this window's processes, from now
	before, err := r.snapshot(ctx, true)
	if err != nil {
		return p, err
	}
	loadBefore, err := readProcStat(os.Getpid())
	if err != nil {
		return p, fmt.Errorf("read the load generator's CPU: %w", err)
	}
	stopSampling := r.sampleDuring(ctx)
	rep := w.load()
	res.Buys, res.Non2xx, res.Errors, res.Sent = rep.Status2xx, rep.Non2xx, rep.Errors, rep.Sent
	res.DurationS, res.BuysPerS = rep.DurationS, rep.Rate2xx
	res.P50MS, res.P99MS, res.MaxMS = rep.LatencyMS.P50, rep.LatencyMS.P99, rep.LatencyMS.Max
	if ctx.Err() != nil {
		stopSampling()
		return p, ctx.Err()
	}
	if loadAfter, err := readProcStat(os.Getpid()); err == nil {
		res.LoadUS = perBuy(ticksToMicros(loadAfter.Ticks-loadBefore.Ticks), res.Sent)
	}
	if w.buys {
		*accepted += res.Buys
		catchUp, err := r.catchUp(ctx, *accepted)
		if err != nil {
			stopSampling()
			return p, err
		}
		res.CatchUpS = catchUp.Seconds()
	}
	stopSampling()
	after, err := r.snapshot(ctx, false)
	if err != nil {
		return p, err
	}
	if w.buys {
		n, err := r.countOrders(ctx)
		if err != nil {
			return p, err
		}
		if n != *accepted {
			res.Problems = append(res.Problems, fmt.Sprintf("%d orders in the database, %d buys accepted in the run", n, *accepted))
		}
		res.OrdersInDB = n - (*accepted - res.Buys)
	}
	if res.Non2xx > 0 || res.Errors > 0 {
		res.Problems = append(res.Problems, outcome(rep))
	}
	if rep.OutOfTokens && !w.finite {
		res.Problems = append(res.Problems, "ran out of pre-signed tokens before --duration: raise --max-rate")
	}
	res.account(before, after, r.sampler.micros)
	return p, nil
}

// load is a closed loop of the run's connections and duration: request i
// carries tokens[i] and, if extra is not nil, the header line extra[i].
func (r *round) load(ctx context.Context, method, url, body string, tokens, extra []string) loadgen.ClosedReport {
	c := loadgen.Closed{Method: method, URL: url, Tokens: tokens, Extra: extra,
		Conns: r.cfg.Conns, Duration: r.cfg.Duration, Timeout: 30 * time.Second}
	if body != "" {
		c.Body, c.Header = []byte(body), http.Header{"Content-Type": {"application/json"}}
	}
	return c.Run(ctx)
}

// outcome says what a load's replies were, when not all 2xx.
func outcome(rep loadgen.ClosedReport) string {
	var parts []string
	for status, n := range rep.Non2xxByStatus {
		parts = append(parts, fmt.Sprintf("%d × %d", n, status))
	}
	for kind, n := range rep.ErrorsByKind {
		parts = append(parts, fmt.Sprintf("%d × %s", n, kind))
	}
	return fmt.Sprintf("%d of %d requests 2xx, %d non-2xx, %d without a reply (%s)", rep.Status2xx, rep.Sent, rep.Non2xx, rep.Errors, strings.Join(parts, ", "))
}

// cycle returns n tokens going round ts (not empty) in order: a closed
// loop's tokens when buyers may repeat.
func cycle(ts []string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ts[i%len(ts)]
	}
	return out
}

func (r *round) buyURLOf(sale string) string { return r.base + "/v1/sales/" + sale + "/orders" }
func (r *round) queueURL(sale string) string { return r.base + "/v1/sales/" + sale + "/queue" }

// createSale creates a sale like the rounds' (per-user limit 1, a stock far
// above what sells) with admission as its room, nil for none.
func (r *round) createSale(ctx context.Context, id string, admission map[string]any) error {
	sale := map[string]any{"id": id, "per_user_limit": 1, "items": []map[string]any{{"sku": "A", "stock": 1_000_000_000}}}
	if admission != nil {
		sale["admission"] = admission
	}
	body, err := json.Marshal(sale)
	if err != nil {
		return err
	}
	status, reply, err := r.adminDo(ctx, http.MethodPost, "/v1/admin/sales", string(body))
	switch {
	case err != nil:
		return fmt.Errorf("create sale %s: %w", id, err)
	case status == http.StatusBadRequest && admission != nil:
		return fmt.Errorf("%w: creating sale %s with a room: %d %s", ErrNoRooms, id, status, reply)
	case status != http.StatusCreated:
		return fmt.Errorf("create sale %s: %d %s", id, status, reply)
	}
	return nil
}

// closeSale ends sale (POST /v1/admin/sales/{sale}/close).
func (r *round) closeSale(ctx context.Context, id string) error {
	status, reply, err := r.adminDo(ctx, http.MethodPost, "/v1/admin/sales/"+id+"/close", "")
	switch {
	case err != nil:
		return fmt.Errorf("close sale %s: %w", id, err)
	case status != http.StatusOK:
		return fmt.Errorf("close sale %s: %d %s", id, status, reply)
	}
	return nil
}

// background is an open loop of place reads running during a loaded
// phase.
type background struct {
	rate    float64
	waiting int64 // the room's waiting buyers when it started; -1 unknown
	cancel  context.CancelFunc
	done    chan struct{}
	rep     loadgen.Report
	stopped sync.Once
}

// background starts reads of readers' places in sale's room at the
// configured rate, and returns once they have run for warmUp.
func (r *round) background(ctx context.Context, sale string, readers []string) (*background, error) {
	b := &background{rate: r.cfg.Room.ReadRate, waiting: -1, done: make(chan struct{})}
	if status, body, err := r.adminDo(ctx, http.MethodGet, "/v1/admin/sales/"+sale+"/queue", ""); err == nil && status == http.StatusOK {
		var stats struct {
			Waiting int64 `json:"waiting"`
		}
		if json.Unmarshal(body, &stats) == nil {
			b.waiting = stats.Waiting
		}
	}
	if b.rate <= 0 {
		close(b.done)
		b.cancel = func() {}
		return b, nil
	}
	var bctx context.Context
	bctx, b.cancel = context.WithCancel(ctx)
	a := loadgen.Attack{Method: http.MethodGet, URL: r.queueURL(sale), Tokens: readers, Rate: b.rate,
		// Longer than any load it runs beside: stop ends it.
		Duration: r.cfg.Duration + warmUp + 5*time.Second,
		Timeout:  30 * time.Second, Conns: 64, MaxInFlight: 8192}
	go func() {
		defer close(b.done)
		b.rep = a.Run(bctx)
	}()
	select {
	case <-ctx.Done():
		b.stop()
		return nil, ctx.Err()
	case <-time.After(warmUp):
	}
	return b, nil
}

// stop ends the background reads and waits for their replies; again, it
// does nothing.
func (b *background) stop() {
	b.stopped.Do(func() {
		b.cancel()
		<-b.done
	})
}

// result is the stopped background's outcome.
func (b *background) result() *Background {
	b.stop()
	return &Background{RateAsked: b.rate, RoomWaiting: b.waiting, Sent: b.rep.Sent, Status2xx: b.rep.Status2xx,
		Non2xx: b.rep.Non2xx, Errors: b.rep.Errors, SendRate: b.rep.SendRate, P50MS: b.rep.LatencyMS.P50, P99MS: b.rep.LatencyMS.P99,
		LagP99MS: b.rep.SendLagMS.P99}
}
