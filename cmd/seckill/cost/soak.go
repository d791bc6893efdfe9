package cost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill/internal/bench/http/loadgen"
)

// SoakConfig asks RunSoak for one long open loop on one sale of one
// `serve` of Builds[0], sampled window by window.
type SoakConfig struct {
	Length time.Duration // the open loop's length
	Window time.Duration // one sample's window (the loop runs as back-to-back windows)
	// Buyers is how many distinct buyers the load cycles through, each
	// with a token of its own; a buyer buys again once every Buyers
	// requests, so the sale's per-user limit is raised to let every buy of
	// the run through (soakLimit).
	Buyers int
	// Early is the window (1-based) the last one is compared with: the
	// flat-over-time targets hold each figure of the last window within
	// ±FlatBand of this one's.
	Early int
}

// FlatBand is how far the last window of a soak may be from its early
// window in service RSS, Redis bytes per live order and buy p99 (the
// targets' ±10%).
const FlatBand = 0.10

// soakLimit is the soak sale's per-user limit: above what any buyer of a
// run buys (a run of 40 million buys over a million buyers buys 40 each).
const soakLimit = 100_000

// SoakWindow is one window of a soak: its load, its costs, and the state
// of the service and of Redis at its end.
type SoakWindow struct {
	N         int     `json:"n"` // 1-based
	EndS      float64 `json:"end_s"`
	Sent      int     `json:"sent"`
	Buys      int     `json:"buys"`
	Non2xx    int     `json:"non_2xx"`
	Errors    int     `json:"errors"`
	BuysPerS  float64 `json:"buys_per_s"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
	ServiceUS float64 `json:"service_us_per_buy"`
	RedisUS   float64 `json:"redis_us_per_buy"`
	// PostgresUS is the round database's backends and the server's
	// background processes, as a round's.
	PostgresUS float64 `json:"postgres_us_per_buy"`
	// ServiceRSS is the service's resident memory at the window's end
	// (VmRSS); RedisBytes Redis's used_memory less what it used before
	// the sale was created.
	ServiceRSS int64 `json:"service_rss_bytes"`
	RedisBytes int64 `json:"redis_bytes"`
	// LiveOrders is every order the sale accepted until the window's end
	// (the run's before the loop included): none is cancelled or archived
	// while the sale lives, so all of them are live.
	LiveOrders     int     `json:"live_orders"`
	BytesPerOrder  float64 `json:"redis_bytes_per_live_order"`
	DistinctBuyers int     `json:"distinct_buyers"` // who has bought by the window's end
}

// SoakReport is one soak.
type SoakReport struct {
	Bin        string       `json:"bin"`
	Redis      string       `json:"redis"`
	Database   string       `json:"database"`
	KeyPrefix  string       `json:"key_prefix"`
	Conns      int          `json:"conns"`
	Buyers     int          `json:"buyers"`
	ClosedRate float64      `json:"closed_loop_buys_per_s"` // the calibration's
	Fraction   float64      `json:"open_fraction"`
	RateAsked  float64      `json:"rate_asked"`
	WindowS    float64      `json:"window_s"`
	Windows    []SoakWindow `json:"windows"`
	// After the load: how long the database took to hold every accepted
	// order, how many it holds, and the sale's reconciliation.
	CatchUpS   float64 `json:"catch_up_s"`
	Accepted   int     `json:"accepted"`
	OrdersInDB int     `json:"orders_in_db"`
	Consistent bool    `json:"reconcile_consistent"`
	Reconcile  string  `json:"reconcile,omitempty"` // its reply, when not consistent
	// Flat compares the last window with the early one (nil before both
	// ran).
	Flat     *SoakFlat `json:"flat,omitempty"`
	Problems []string  `json:"problems,omitempty"`
}

// SoakFlat is the flat-over-time targets: each figure of the last window
// over the early window's, met when within 1 ± FlatBand.
type SoakFlat struct {
	Early, Last   int
	RSS           float64 `json:"service_rss_ratio"`
	BytesPerOrder float64 `json:"redis_bytes_per_order_ratio"`
	P99           float64 `json:"p99_ratio"`
}

// Met reports whether every ratio is within the band.
func (f SoakFlat) Met() bool {
	return flat(f.RSS) && flat(f.BytesPerOrder) && flat(f.P99)
}

func flat(ratio float64) bool { return ratio >= 1-FlatBand && ratio <= 1+FlatBand }

// Passed reports whether the soak met every target: flat, every accepted
// order in the database, reconcile consistent, every request a 2xx.
func (rep SoakReport) Passed() bool {
	return rep.Flat != nil && rep.Flat.Met() && rep.Accepted > 0 && rep.OrdersInDB == rep.Accepted &&
		rep.Consistent && len(rep.Problems) == 0
}

// RunSoak runs `seckill bench --cost --soak`: one serve of cfg.Builds[0] on
// its own database and key prefix, one sale, a closed loop of cfg.Duration
// to find the rate it sustains, then an open loop at cfg.OpenFraction of
// that rate for cfg.Soak.Length over cfg.Soak.Buyers buyers, as windows of
// cfg.Soak.Window; then it waits for the database to hold every accepted
// order and reconciles the sale. An interrupted run reports the windows it
// measured.
func RunSoak(ctx context.Context, cfg Config) (SoakReport, error) {
	sc := *cfg.Soak
	rep := SoakReport{Bin: cfg.Builds[0], Conns: cfg.Conns, Buyers: sc.Buyers, Fraction: cfg.OpenFraction,
		WindowS: sc.Window.Seconds()}
	e, err := open(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer e.close()
	rep.Redis = e.describeRedis()
	r := e.oneServe(&cfg, "soak", soakSaleJSON)
	rep.Database, rep.KeyPrefix = r.db, r.prefix
	err = r.runSoak(ctx, &rep)
	rep.compare(sc.Early)
	return rep, err
}

var soakSaleJSON = `{"id":"` + saleID + `","per_user_limit":` + strconv.Itoa(soakLimit) +
	`,"items":[{"sku":"A","stock":1000000000}]}`

func (r *round) runSoak(ctx context.Context, rep *SoakReport) (err error) {
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	sc := r.cfg.Soak
	base, err := redisUsedMemory(ctx, r.env)
	if err != nil {
		return err
	}
	if err := r.start(ctx); err != nil {
		return err
	}
	tokens := r.env.tokens[:sc.Buyers]
	quietGenerator()
	// The closed loop goes round the buyers too, for as many requests as
	// --max-rate allows.
	cal := r.closed(ctx, cycle(tokens, int(r.cfg.Duration.Seconds()*r.cfg.MaxRate)+r.cfg.Conns))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cal.OutOfTokens {
		rep.Problems = append(rep.Problems, "the closed loop ran out of requests before --duration: raise --max-rate")
	}
	if cal.Non2xx > 0 || cal.Errors > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the closed loop: %d non-2xx replies, %d requests without a reply", cal.Non2xx, cal.Errors))
	}
	rep.ClosedRate = cal.Rate2xx
	rep.RateAsked = r.cfg.OpenFraction * cal.Rate2xx
	if rep.RateAsked <= 0 {
		return fmt.Errorf("the closed loop accepted no buy (non-2xx %d, errors %d)", cal.Non2xx, cal.Errors)
	}
	accepted, next := cal.Status2xx, cal.Sent // next: the buyer (place in tokens) of the next request
	if _, err := r.catchUp(ctx, accepted); err != nil {
		return err
	}
	quietGenerator()
	prev, err := r.snapshot(ctx, true)
	if err != nil {
		return err
	}
	prevPG, _ := r.sampler.micros()
	start := time.Now()
	windows := int((sc.Length + sc.Window - 1) / sc.Window)
	for n := 1; n <= windows; n++ {
		length := min(sc.Window, sc.Length-time.Duration(n-1)*sc.Window)
		// Request i of the window is buyer next+i (mod Buyers): the run
		// goes on through the buyers where the last window stopped.
		at := next % len(tokens)
		a := loadgen.Attack{Method: http.MethodPost, URL: r.buyURL(), Body: []byte(buyBody),
			Header: http.Header{"Content-Type": {"application/json"}}, Tokens: slices.Concat(tokens[at:], tokens[:at]),
			Rate: rep.RateAsked, Duration: length, Timeout: 30 * time.Second, Conns: r.cfg.Conns, MaxInFlight: 8192}
		ar := a.Run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		next += ar.Sent
		accepted += ar.Status2xx
		w := SoakWindow{N: n, EndS: time.Since(start).Seconds(), Sent: ar.Sent, Buys: ar.Status2xx, Non2xx: ar.Non2xx,
			Errors: ar.Errors, BuysPerS: ar.ReplyRate * float64(ar.Status2xx) / float64(max(ar.Completed, 1)),
			P50MS: ar.LatencyMS.P50, P99MS: ar.LatencyMS.P99, MaxMS: ar.LatencyMS.Max,
			LiveOrders: accepted, DistinctBuyers: min(next, len(tokens))}
		if ar.Sent < ar.Scheduled {
			rep.Problems = append(rep.Problems, fmt.Sprintf("window %d: %d of %d scheduled requests not sent", n, ar.Scheduled-ar.Sent, ar.Scheduled))
		}
		if ar.Non2xx > 0 || ar.Errors > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("window %d: %d non-2xx replies, %d requests without a reply", n, ar.Non2xx, ar.Errors))
		}
		cur, err := r.snapshot(ctx, false)
		if err != nil {
			return err
		}
		if err := r.sampleState(ctx, base, &w); err != nil {
			return err
		}
		w.ServiceUS = perBuy(ticksToMicros(cur.serviceTicks-prev.serviceTicks), w.Buys)
		w.RedisUS = perBuy(cur.redis.CPUMicros-prev.redis.CPUMicros, w.Buys)
		pg, _ := r.sampler.micros()
		w.PostgresUS = perBuy(pg-prevPG, w.Buys)
		prev, prevPG = cur, pg
		rep.Windows = append(rep.Windows, w)
		if r.cfg.Progress != nil {
			fmt.Fprintf(r.cfg.Progress, "soak window %d/%d: %.0f buys/s, p99 %.1f ms, RSS %.0f MB, Redis %.1f B per live order\n",
				n, windows, w.BuysPerS, w.P99MS, float64(w.ServiceRSS)/1e6, w.BytesPerOrder)
		}
	}
	rep.Accepted = accepted
	catchUp, err := r.catchUp(ctx, accepted)
	if err != nil {
		return err
	}
	rep.CatchUpS = catchUp.Seconds()
	if rep.OrdersInDB, err = r.countOrders(ctx); err != nil {
		return err
	}
	if rep.OrdersInDB != accepted {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d orders in the database, %d buys accepted", rep.OrdersInDB, accepted))
	}
	return r.reconcile(ctx, rep)
}

// sampleState reads the service's RSS and Redis's memory into w.
func (r *round) sampleState(ctx context.Context, base int64, w *SoakWindow) error {
	rss, err := readRSS(r.serve.Process.Pid)
	if err != nil {
		return fmt.Errorf("read the service's RSS: %w", err)
	}
	used, err := redisUsedMemory(ctx, r.env)
	if err != nil {
		return err
	}
	w.ServiceRSS, w.RedisBytes = rss, used-base
	if w.LiveOrders > 0 {
		w.BytesPerOrder = float64(w.RedisBytes) / float64(w.LiveOrders)
	}
	return nil
}

// reconcile asks the service to reconcile the sale: Redis's stock and the
// database's orders must add up.
func (r *round) reconcile(ctx context.Context, rep *SoakReport) error {
	status, body, err := r.adminDo(ctx, http.MethodGet, "/v1/admin/sales/"+saleID+"/reconcile", "")
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var rec struct {
		Consistent bool `json:"consistent"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &rec) != nil {
		return fmt.Errorf("reconcile: %d %s", status, body)
	}
	rep.Consistent = rec.Consistent
	if !rec.Consistent {
		rep.Reconcile = string(body)
		rep.Problems = append(rep.Problems, "reconcile: not consistent")
	}
	return nil
}

// compare fills rep.Flat from the early window and the last, when both ran
// and differ.
func (rep *SoakReport) compare(early int) {
	n := len(rep.Windows)
	if early < 1 || n <= early {
		return
	}
	e, l := rep.Windows[early-1], rep.Windows[n-1]
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	rep.Flat = &SoakFlat{Early: early, Last: n, RSS: ratio(float64(l.ServiceRSS), float64(e.ServiceRSS)),
		BytesPerOrder: ratio(l.BytesPerOrder, e.BytesPerOrder), P99: ratio(l.P99MS, e.P99MS)}
}

// readRSS reads a process's resident set size (VmRSS of /proc/PID/status)
// in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return parseRSS(string(b))
}

// parseRSS finds "VmRSS:  1234 kB" in a /proc/PID/status text.
func parseRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb >= 0 {
					return kb << 10, nil
				}
			}
			return 0, fmt.Errorf("bad VmRSS line %q", strings.TrimSpace(line))
		}
	}
	return 0, errors.New("no VmRSS line")
}

// redisUsedMemory reads used_memory of INFO memory.
func redisUsedMemory(ctx context.Context, e *env) (int64, error) {
	text, err := e.redis.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("redis INFO: bad used_memory %q", v)
			}
			return n, nil
		}
	}
	return 0, errors.New("redis INFO memory: no used_memory")
}
