package cost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill/seckill/internal/bench/http/loadgen"
	"github.com/seckill/seckill/internal/store"
)

// The sale every round sells from: per-user limit 1 and a stock far above
// what sells, so every fresh buyer's buy is accepted.
const (
	saleID   = "cost"
	saleJSON = `{"id":"` + saleID + `","per_user_limit":1,"items":[{"sku":"A","stock":1000000000}]}`
	buyBody  = `{"items":[{"sku":"A","qty":1}]}`
)

// round is one build's run in one round: its own database, key prefix and
// `serve` process, all removed at its end.
type round struct {
	cfg    *Config
	env    *env
	build  string // "A" or "B"
	bin    string
	n      int // 1-based
	db     string
	prefix string
	sale   string // the sale's JSON; "" for saleJSON

	serve   *exec.Cmd
	served  chan struct{} // closed when serve has exited
	log     *tailBuffer
	base    string // http://addr
	orders  *pgx.Conn
	sampler pgSampler
}

// oneServe is the one round of a run that measures one serve of
// cfg.Builds[0] throughout (--room, --soak): name tells its database and
// key prefix from other runs', sale is its sale's JSON ("" for saleJSON).
func (e *env) oneServe(cfg *Config, name, sale string) *round {
	tag := e.runID + name
	r := &round{cfg: cfg, env: e, build: "A", bin: cfg.Builds[0], n: 1, sale: sale,
		db: "seckill_cost_" + tag, prefix: "costbench-" + tag, sampler: pgSampler{postmaster: e.postmaster}}
	r.sampler.db = r.db
	return r
}

// run measures the round; the deferred clean-up runs whatever happens,
// ctx cancelled included.
func (r *round) run(ctx context.Context) (res Result, err error) {
	res = Result{Build: r.build, Bin: r.bin, Round: r.n, Database: r.db, KeyPrefix: r.prefix, Load: "closed"}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := r.start(ctx); err != nil {
		return res, err
	}
	tokens := r.env.tokens
	accepted := 0 // 2xx replies of the round, the calibration's included
	rate := r.cfg.OpenRate
	if r.cfg.OpenFraction > 0 {
		// The closed loop that sets the rate is measured as a round of its
		// own, for the open loop's cost to be read against it (the ratio
		// OpenOverClosed).
		quietGenerator()
		calBefore, err := r.snapshot(ctx, true)
		if err != nil {
			return res, err
		}
		stopCal := r.sampleDuring(ctx)
		cal := r.closed(ctx, tokens)
		if ctx.Err() != nil {
			stopCal()
			return res, ctx.Err()
		}
		accepted += cal.Status2xx
		tokens = tokens[min(cal.Sent, len(tokens)):]
		_, err = r.catchUp(ctx, accepted)
		stopCal()
		if err != nil {
			return res, err
		}
		calAfter, err := r.snapshot(ctx, false)
		if err != nil {
			return res, err
		}
		closed := Result{Build: res.Build, Bin: res.Bin, Round: res.Round, Load: "closed", Sent: cal.Sent,
			Buys: cal.Status2xx, Non2xx: cal.Non2xx, Errors: cal.Errors, DurationS: cal.DurationS, BuysPerS: cal.Rate2xx,
			P50MS: cal.LatencyMS.P50, P99MS: cal.LatencyMS.P99, MaxMS: cal.LatencyMS.Max}
		closed.account(calBefore, calAfter, r.sampler.micros)
		res.Closed = &closed
		r.sampler.procs = nil // the open loop's processes, from its start
		rate = r.cfg.OpenFraction * cal.Rate2xx
		if rate <= 0 {
			return res, fmt.Errorf("the calibration run accepted no buy (non-2xx %d, errors %d)", cal.Non2xx, cal.Errors)
		}
	}

	quietGenerator()
	before, err := r.snapshot(ctx, true)
	if err != nil {
		return res, err
	}
	loadBefore, err := readProcStat(os.Getpid())
	if err != nil {
		return res, fmt.Errorf("read the load generator's CPU: %w", err)
	}
	stopSampling := r.sampleDuring(ctx)

	if rate > 0 {
		res.Load, res.RateAsked = "open", rate
		a := loadgen.Attack{Method: http.MethodPost, URL: r.buyURL(), Body: []byte(buyBody),
			Header: http.Header{"Content-Type": {"application/json"}}, Tokens: tokens, Rate: rate,
			Duration: r.cfg.Duration, Timeout: 30 * time.Second, Conns: r.cfg.Conns, MaxInFlight: 8192}
		if n := a.Requests(); n > len(tokens) {
			stopSampling()
			return res, fmt.Errorf("the open loop needs %d tokens, %d are signed: raise --max-rate", n, len(tokens))
		}
		if r.cfg.TimelineDir != "" {
			f, err := os.Create(filepath.Join(r.cfg.TimelineDir, fmt.Sprintf("round%d%s.csv", r.n, strings.ToLower(r.build))))
			if err != nil {
				stopSampling()
				return res, fmt.Errorf("timeline: %w", err)
			}
			defer f.Close()
			a.Timeline = f
		}
		rep := a.Run(ctx)
		res.Buys, res.Non2xx, res.Errors, res.Sent = rep.Status2xx, rep.Non2xx, rep.Errors, rep.Sent
		res.DurationS, res.BuysPerS = rep.DurationS, rep.ReplyRate*float64(rep.Status2xx)/float64(max(rep.Completed, 1))
		res.P50MS, res.P99MS, res.MaxMS = rep.LatencyMS.P50, rep.LatencyMS.P99, rep.LatencyMS.Max
		res.LagP99MS, res.WaitP99MS = rep.SendLagMS.P99, rep.ConnWaitMS.P99
		if rep.Sent < rep.Scheduled {
			res.Problems = append(res.Problems, fmt.Sprintf("%d of %d scheduled requests not sent", rep.Scheduled-rep.Sent, rep.Scheduled))
		}
	} else {
		rep := r.closed(ctx, tokens)
		res.Buys, res.Non2xx, res.Errors, res.Sent = rep.Status2xx, rep.Non2xx, rep.Errors, rep.Sent
		res.DurationS, res.BuysPerS = rep.DurationS, rep.Rate2xx
		res.P50MS, res.P99MS, res.MaxMS = rep.LatencyMS.P50, rep.LatencyMS.P99, rep.LatencyMS.Max
		if rep.OutOfTokens {
			res.Problems = append(res.Problems, "ran out of pre-signed tokens before --duration: raise --max-rate")
		}
	}
	if ctx.Err() != nil {
		stopSampling()
		return res, ctx.Err()
	}
	if loadAfter, err := readProcStat(os.Getpid()); err == nil {
		res.LoadUS = perBuy(ticksToMicros(loadAfter.Ticks-loadBefore.Ticks), res.Sent)
	}
	accepted += res.Buys

	// The cost of a buy includes writing its order: the window ends when
	// the consumer has caught up.
	catchUp, err := r.catchUp(ctx, accepted)
	stopSampling()
	if err != nil {
		return res, err
	}
	res.CatchUpS = catchUp.Seconds()
	after, err := r.snapshot(ctx, false)
	if err != nil {
		return res, err
	}
	if res.OrdersInDB, err = r.countOrders(ctx); err != nil {
		return res, err
	}
	if res.OrdersInDB != accepted {
		res.Problems = append(res.Problems, fmt.Sprintf("%d orders in the database, %d buys accepted", res.OrdersInDB, accepted))
	}
	res.OrdersInDB -= accepted - res.Buys // the calibration's
	if res.Non2xx > 0 || res.Errors > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d non-2xx replies, %d requests without a reply", res.Non2xx, res.Errors))
	}
	res.account(before, after, r.sampler.micros)
	if res.Closed != nil {
		res.ClosedTotalUS = res.Closed.TotalUS
		res.OpenOverClosed = ratioOf(res.TotalUS, res.Closed.TotalUS)
	}
	return res, nil
}

// sampleDuring samples PostgreSQL's processes every 200 ms until the
// returned stop is called (which waits for the sampling to end), so that
// backends that exit inside a window still count.
func (r *round) sampleDuring(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = r.sampler.sample(false)
			}
		}
	}()
	return func() { cancel(); <-sampled }
}

// quietGenerator collects this process's garbage before a load, so that
// the load generator's collector does not run a cycle inside the load.
// Its heap is the pre-signed tokens (1.6 million, ~230 MB live at
// --max-rate 80000 with --open-fraction) and what signing them and the
// previous load left: left to itself, it collected inside 3 of 12 open
// loops measured on 2026-11-26 (0.4-1.3 s of wall each, its idle mark
// workers running on the generator's idle Ps on the cores the service
// and its stores share), and the latency bursts lined up with two of
// those cycles. A load allocates little (a result per request, made
// before it starts): after this, with that many tokens the next cycle is
// due only hundreds of MB later, and with few tokens the heap is small and
// its cycles short. The latencies still count from each request's scheduled
// send.
func quietGenerator() { runtime.GC() }

// snapshot is the counters at one instant.
type snapshot struct {
	serviceTicks int64
	redis        redisStats
	machine      machineTimes
}

func (r *round) snapshot(ctx context.Context, first bool) (snapshot, error) {
	st, err := readProcStat(r.serve.Process.Pid)
	if err != nil {
		return snapshot{}, fmt.Errorf("read the service's CPU: %w", err)
	}
	rs, err := readRedisStats(ctx, r.env.redis)
	if err != nil {
		return snapshot{}, err
	}
	if err := r.sampler.sample(first); err != nil {
		return snapshot{}, fmt.Errorf("read PostgreSQL's CPU: %w", err)
	}
	m, err := readMachineTimes()
	if err != nil {
		return snapshot{}, fmt.Errorf("read the machine's CPU: %w", err)
	}
	return snapshot{serviceTicks: st.Ticks, redis: rs, machine: m}, nil
}

func (r *round) buyURL() string { return r.base + "/v1/sales/" + saleID + "/orders" }

func (r *round) closed(ctx context.Context, tokens []string) loadgen.ClosedReport {
	return r.load(ctx, http.MethodPost, r.buyURL(), buyBody, tokens, nil)
}

// start creates the round's database, starts `serve` on it and creates the
// sale.
func (r *round) start(ctx context.Context) error {
	if err := r.startServe(ctx); err != nil {
		return err
	}
	sale := r.sale
	if sale == "" {
		sale = saleJSON
	}
	if status, body, err := r.adminDo(ctx, http.MethodPost, "/v1/admin/sales", sale); err != nil || status != http.StatusCreated {
		return fmt.Errorf("create the sale: %d %s %v", status, body, err)
	}
	return nil
}

// startServe creates the round's database, starts `serve` on it and opens
// the connection that counts its orders.
func (r *round) startServe(ctx context.Context) error {
	if err := r.env.adminExec(ctx, "CREATE DATABASE "+r.db); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	r.base = "http://" + addr
	r.log = &tailBuffer{max: 8 << 10}
	r.serve = exec.Command(r.bin, "serve")
	r.serve.Env = append(withoutSeckill(os.Environ()),
		"SECKILL_ADDR="+addr, "SECKILL_REDIS_URL="+r.env.redisURL, "SECKILL_DATABASE_URL="+r.env.dbURL(r.db),
		"SECKILL_KEY_PREFIX="+r.prefix, "SECKILL_ADMIN_TOKEN="+r.env.adminToken,
		"SECKILL_JWT_SECRET="+r.env.secret, "SECKILL_LOG_LEVEL=warn")
	r.serve.Stdout, r.serve.Stderr = r.log, r.log
	if err := r.serve.Start(); err != nil {
		r.serve = nil
		return fmt.Errorf("start %s serve: %w", r.bin, err)
	}
	r.served = make(chan struct{})
	go func() { _ = r.serve.Wait(); close(r.served) }()
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	cc, err := pgx.ParseConfig(r.env.dbURL(r.db))
	if err != nil {
		return fmt.Errorf("the round's database: %w", err)
	}
	if cc.RuntimeParams["search_path"] == "" {
		// Where serve keeps its tables, or "public" for a build from
		// before they had a schema of their own.
		cc.RuntimeParams["search_path"] = store.DefaultSchema + ", public"
	}
	if r.orders, err = pgx.ConnectConfig(ctx, cc); err != nil {
		return fmt.Errorf("connect to the round's database: %w", err)
	}
	return nil
}

// adminDo sends an operator's request with body ("" for none) and returns
// the reply's status and body (its first 64 KiB).
func (r *round) adminDo(ctx context.Context, method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.env.adminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, bytes.TrimSpace(b), err
}

// waitReady polls GET /readyz until 200, or serve exits.
func (r *round) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case <-r.served:
			return fmt.Errorf("%s serve exited before it was ready (%v):\n%s", r.bin, r.serve.ProcessState, r.log.String())
		default:
		}
		if resp, err := client.Get(r.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s serve not ready after 60s:\n%s", r.bin, r.log.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// catchUp waits until the database holds at least want orders, and returns
// how long that took.
func (r *round) catchUp(ctx context.Context, want int) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := r.countOrders(ctx)
		if err != nil {
			return 0, err
		}
		if n >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > r.cfg.CatchUpTimeout {
			return 0, fmt.Errorf("the database holds %d of %d accepted orders %v after the load", n, want, r.cfg.CatchUpTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *round) countOrders(ctx context.Context) (int, error) {
	var n int
	if err := r.orders.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		return 0, fmt.Errorf("count orders: %w", err)
	}
	return n, nil
}

// cleanup stops serve and removes the database and the keys, even when the
// round's ctx was cancelled.
func (r *round) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	if r.orders != nil {
		_ = r.orders.Close(ctx)
	}
	if r.serve != nil {
		_ = r.serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.served:
		case <-time.After(15 * time.Second):
			_ = r.serve.Process.Kill()
			<-r.served
		}
	}
	if r.db != "" {
		if err := r.env.adminExec(ctx, "DROP DATABASE IF EXISTS "+r.db+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", r.db, err))
		}
	}
	if err := unlinkPrefixed(ctx, r.env.redis, r.prefix); err != nil {
		errs = append(errs, fmt.Errorf("remove keys of prefix %s: %w", r.prefix, err))
	}
	return errors.Join(errs...)
}

// withoutSeckill drops every SECKILL_ variable from an environment, so the
// child's configuration is only what the round sets.
func withoutSeckill(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "SECKILL_") {
			out = append(out, kv)
		}
	}
	return out
}

// freeAddr returns 127.0.0.1:<a port that was free a moment ago>.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// dbURL is the server URL with its database set to db.
func (e *env) dbURL(db string) string {
	u := *e.pgURL
	u.Path = "/" + db
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// tailBuffer keeps the last max bytes written to it (a child's log).
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
