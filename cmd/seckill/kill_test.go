//go:build unix

package main

// Fault tests that SIGKILL a real `seckill serve` process: the binary is
// built once per test run (go build, without the race detector), started
// with exec.Command on a free loopback port with its configuration in the
// environment, and killed with cmd.Process.Kill().

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/pipeline"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
	"github.com/seckill/seckill/internal/waitfor"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// seckillBinary builds ./cmd/seckill (the working directory of this
// package's tests) once per test binary and returns its path.
func seckillBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "seckill-kill-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "seckill")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/seckill: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freeAddr returns 127.0.0.1:<a port that was free a moment ago>.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serveProc is one `seckill serve` process.
type serveProc struct {
	cmd  *exec.Cmd
	addr string
	log  *lockedBuffer // its stdout and stderr
	done chan struct{} // closed once it has exited and been waited for
}

// serveEnv is the process environment of a seckill child: this process's,
// without any SECKILL_ variable, plus env.
func serveEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_") {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// startServe starts `seckill serve` on addr with env (SECKILL_ADDR is set
// from addr) and returns without waiting for it to be ready. The process is
// killed at the end of the test if it still runs.
func startServe(t *testing.T, env map[string]string, addr string) *serveProc {
	t.Helper()
	e := map[string]string{"SECKILL_ADDR": addr}
	for k, v := range env {
		if k != "SECKILL_ADDR" {
			e[k] = v
		}
	}
	p := &serveProc{addr: addr, log: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(seckillBinary(t), "serve")
	p.cmd.Env = serveEnv(e)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start seckill serve: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *serveProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *serveProc) base() string { return "http://" + p.addr }

// waitReady polls GET /readyz until it answers 200.
func (p *serveProc) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(timeout); ; {
		if !p.running() {
			return fmt.Errorf("seckill serve on %s exited before it was ready (%v):\n%s", p.addr, p.cmd.ProcessState, logTail(p.log.String(), 20))
		}
		if resp, err := client.Get(p.base() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("seckill serve on %s not ready after %v:\n%s", p.addr, timeout, logTail(p.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process, waits for it, and checks it died of SIGKILL.
func (p *serveProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill seckill serve: %v", err)
	}
	<-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("seckill serve was not killed by SIGKILL: %v\n%s", p.cmd.ProcessState, logTail(p.log.String(), 20))
	}
}

// freeze stops the process (SIGSTOP) where it is; thaw lets it go on.
func (p *serveProc) freeze(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP seckill serve: %v", err)
	}
}

func (p *serveProc) thaw(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT seckill serve: %v", err)
	}
}

// stop sends SIGTERM and expects a graceful exit 0.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM seckill serve: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(25 * time.Second):
		t.Fatalf("seckill serve did not exit within 25s of SIGTERM:\n%s", logTail(p.log.String(), 20))
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("seckill serve exited %d after SIGTERM, want 0:\n%s", code, logTail(p.log.String(), 20))
	}
}

// startReady starts serve on addr and waits until it is ready; if it cannot
// come up there (the port was taken meanwhile) it tries a new free port. It
// returns the ready process.
func startReady(t *testing.T, env map[string]string, addr string) *serveProc {
	t.Helper()
	var errs []string
	for attempt := 0; attempt < 3; attempt++ {
		p := startServe(t, env, addr)
		err := p.waitReady(30 * time.Second)
		if err == nil {
			return p
		}
		errs = append(errs, err.Error())
		if p.running() {
			p.kill(t)
		}
		if !strings.Contains(p.log.String(), "listen on") {
			break
		}
		addr = freeAddr(t)
	}
	t.Fatalf("seckill serve did not come up:\n%s", strings.Join(errs, "\n---\n"))
	return nil
}

func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pipelineLog is the lines of a process's log that the order pipeline and
// degraded mode wrote.
func pipelineLog(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "order pipeline") || strings.Contains(l, "degraded mode") {
			keep = append(keep, l)
		}
	}
	return logTail(strings.Join(keep, "\n"), 40)
}

// apiReply is an HTTP answer.
type apiReply struct {
	status int
	body   []byte
}

func (r apiReply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("status %d, body is not a JSON object: %q", r.status, r.body)
	}
	return m
}

func (r apiReply) errorCode() string {
	var m struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &m)
	return m.Error.Code
}

// call sends one request; a transport error (connection refused, reset,
// EOF, timeout) comes back as err.
func call(ctx context.Context, client *http.Client, method, url, bearer string, header map[string]string, body any) (apiReply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return apiReply{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return apiReply{}, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return apiReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiReply{}, err
	}
	return apiReply{status: resp.StatusCode, body: b}, nil
}

// connErrorKind names a transport error for the report.
func connErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other: " + err.Error()
}

// reconcileState is GET /v1/admin/sales/{sale}/reconcile, reduced.
type reconcileState struct {
	ok         bool // 200
	consistent bool
	inFlight   int64
	body       string
}

func readReconcile(client *http.Client, base, admin, sale string) reconcileState {
	r, err := call(context.Background(), client, "GET", base+"/v1/admin/sales/"+sale+"/reconcile", admin, nil, nil)
	if err != nil || r.status != http.StatusOK {
		return reconcileState{body: fmt.Sprintf("%d %s %v", r.status, r.body, err)}
	}
	var rep struct {
		Consistent bool `json:"consistent"`
		Items      []struct {
			InFlight int64 `json:"in_flight"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &rep); err != nil {
		return reconcileState{body: string(r.body)}
	}
	st := reconcileState{ok: true, consistent: rep.Consistent, body: string(r.body)}
	for _, it := range rep.Items {
		st.inFlight += it.InFlight
	}
	return st
}

// settle polls the reconcile endpoint until the sale is consistent with
// nothing in flight, and returns how long that took.
func settle(t *testing.T, client *http.Client, base, admin, sale string, timeout time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	var last reconcileState
	for time.Since(began) < timeout {
		last = readReconcile(client, base, admin, sale)
		if last.ok && last.consistent && last.inFlight == 0 {
			return time.Since(began)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("sale %s did not settle within %v (consistent with in_flight 0); last reconcile: %s", sale, timeout, last.body)
	return 0
}

// pendingCount is XPENDING's count of the order consumer group: entries
// delivered to a consumer and not yet acknowledged. It is 0 while the group
// does not exist yet (the consumer looks for new sales once a second).
func pendingCount(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), key, pipeline.Group).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return 0
		}
		t.Fatalf("XPENDING %s: %v", key, err)
	}
	return p.Count
}

// waitConsumed waits until the sale's consumer group exists and every
// entry of its stream (the created event) is stored.
func waitConsumed(t *testing.T, rdb *redis.Client, eng *inventory.Engine, sale string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(waitfor.Patience); ; time.Sleep(20 * time.Millisecond) {
		lag, err := pipeline.ReadLag(ctx, rdb, eng, sale)
		if err == nil && lag.Entries == 0 && lag.Oldest.IsZero() {
			if g, err := rdb.XInfoGroups(ctx, eng.EventsKey(sale)).Result(); err == nil && len(g) == 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the created event of sale %s was not consumed: %+v %v", sale, lag, err)
		}
	}
}

// pendingCommitted returns how many entries are pending in the sale's
// consumer group, and how many of those the journal already holds
// (committed but not acknowledged: they will be applied again).
func pendingCommitted(t *testing.T, rdb *redis.Client, sqldb *sql.DB, stream, sale string) (pending, committed int) {
	t.Helper()
	n := pendingCount(t, rdb, stream)
	if n == 0 {
		return 0, 0
	}
	ps, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: pipeline.Group, Start: "-", End: "+", Count: n}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	if err := sqldb.QueryRow(appliedEventsSQL, sale, ids).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	return len(ids), committed
}

// liveBatch returns the ids of the entries pending in a consumer of the
// sale's group that is not in dead, or nil.
func liveBatch(t *testing.T, rdb *redis.Client, stream string, dead map[string]bool) []string {
	t.Helper()
	ctx := context.Background()
	cs, err := rdb.XInfoConsumers(ctx, stream, pipeline.Group).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if dead[c.Name] || c.Pending == 0 {
			continue
		}
		ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: pipeline.Group, Start: "-", End: "+", Count: 10000, Consumer: c.Name}).Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		return ids
	}
	return nil
}

// runReconcileCmd runs `seckill reconcile --sale sale` with env and checks
// it exits 0 and reports the sale consistent.
func runReconcileCmd(t *testing.T, env map[string]string, sale string) {
	t.Helper()
	cmd := exec.Command(seckillBinary(t), "reconcile", "--sale", sale)
	cmd.Env = serveEnv(env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code <= 0 {
		t.Fatalf("seckill reconcile: %v", err)
	}
	if code != 0 || !strings.HasPrefix(out.String(), "sale "+sale+": consistent\n") {
		t.Errorf("seckill reconcile --sale %s: exit %d\n%s%s", sale, code, out.String(), errOut.String())
	} else {
		t.Logf("seckill reconcile --sale %s: exit 0\n%s", sale, out.String())
	}
}

// journalBoughtOnce checks, with store.Journal, that every order of want
// has exactly one bought row per sku (each of these orders is one unit of
// sku), and that the journal has no other bought row.
func journalBoughtOnce(t *testing.T, db *store.Store, sale, sku string, want map[string]bool) {
	t.Helper()
	rows, err := db.Journal(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{} // order|sku -> bought rows
	var bought int
	for _, r := range rows {
		if r.Type != inventory.EventBought {
			continue
		}
		bought++
		seen[r.OrderID+"|"+r.SKU]++
		if !want[r.OrderID] {
			t.Errorf("journal: a bought row of order %s, which no buyer was given", r.OrderID)
		}
	}
	var twice, missing int
	for k, n := range seen {
		if n != 1 {
			twice++
			if twice <= 5 {
				t.Errorf("journal: %d bought rows of %s", n, k)
			}
		}
	}
	for id := range want {
		if seen[id+"|"+sku] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("journal: no bought row of order %s", id)
			}
		}
	}
	if bought != len(want) || twice > 0 || missing > 0 {
		t.Errorf("journal: %d bought rows for %d orders (%d keys journaled more than once, %d orders missing)", bought, len(want), twice, missing)
	}
}

// dbOrders returns id -> status of every order of the sale, read directly
// with SQL, failing on an id listed twice.
func dbOrders(t *testing.T, sqldb *sql.DB, sale string) map[string]string {
	t.Helper()
	rows, err := sqldb.Query("SELECT id, status FROM orders WHERE sale_id = $1", sale)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[id]; dup {
			t.Errorf("order %s is in the database twice", id)
		}
		out[id] = status
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countOrders(sqldb *sql.DB, sale string) (int, error) {
	var n int
	err := sqldb.QueryRow("SELECT COUNT(*) FROM orders WHERE sale_id = $1", sale).Scan(&n)
	return n, err
}

// noDegradedSwitch sets degraded mode's setting to off (kept in the
// database, so for every process of the test). Redis stays up in these
// tests, but the short grace period they set (for the consumers' takeover
// of a killed one's entries) is three ticks of 100 ms pings: a process
// starved of CPU on a loaded machine can miss them and switch the database
// to selling on its own, and the recovery that ends that episode repairs
// Redis from the database — by design, yet not the "nothing repaired" these
// tests check. Under load that switch was seen.
func noDegradedSwitch(t *testing.T, client *http.Client, base, admin string) {
	t.Helper()
	r, err := call(context.Background(), client, "PUT", base+"/v1/admin/degraded", admin, nil, map[string]any{"setting": "off"})
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("PUT /v1/admin/degraded off: %d %s %v", r.status, r.body, err)
	}
}

// buyerStats is what the crowd of buyers saw.
type buyerStats struct {
	mu         sync.Mutex
	requests   int
	statuses   map[string]int // "201", "409 sold_out", ...
	connErrs   map[string]int // by kind
	acked      []string       // order ids of 201s
	replayed   []string       // order ids of 200s: a retry after a lost reply found the order
	unexpected []string
}

func (s *buyerStats) connErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.connErrs[connErrorKind(err)]++
}

// TestServiceKilledTwiceDuringSellOut SIGKILLs `seckill serve` twice in the
// middle of a sell-out over HTTP (its Redis a server of the test's own, AOF
// appendfsync always; PostgreSQL a fresh schema), after about a third and
// about two thirds are sold, preferably while its consumer holds a batch it
// has not acknowledged, and restarts it, first on the same port and then on
// a new one that the buyers follow. Each buyer is
// a distinct user with an Idempotency-Key, and a request whose answer was
// lost (a transport error) is sent again with the same key until it gets an
// HTTP answer. After the sell-out settles: every 201 (and every 200 replay)
// names an order that is confirmed in the database; no order id was given
// twice; confirmed orders == stock (sold out, nothing oversold), each one
// known to a buyer; the journal holds exactly one bought row per order; no
// entry is pending in the stream; nothing was dead-lettered or repaired;
// `seckill reconcile` exits 0, consistent.
func TestServiceKilledTwiceDuringSellOut(t *testing.T) {
	t.Parallel()
	seckillBinary(t)
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	dbURL := dbtest.PostgresURL(t)
	const (
		sale    = "kill2"
		sku     = "A"
		stock   = 400
		buyers  = 12
		admin   = "kill-admin-token"
		secret  = "kill-jwt-secret"
		timeout = 15 * time.Second
	)
	env := map[string]string{
		"SECKILL_REDIS_URL":       "redis://" + srv.Addr() + "/0",
		"SECKILL_DATABASE_URL":    dbURL,
		"SECKILL_ADMIN_TOKEN":     admin,
		"SECKILL_JWT_SECRET":      secret,
		"SECKILL_KEY_PREFIX":      "killtest",
		"SECKILL_RECONCILE_EVERY": "1s", // the loop runs through the kills; it must find nothing to repair
		// A killed process's consumer stops ticking: the next one takes its
		// pending entries over after three grace periods, not the 30 s reclaim.
		"SECKILL_DEGRADED_GRACE": "300ms",
	}
	rdb := srv.Client(t)
	eng := inventory.New(rdb, inventory.Options{Prefix: "killtest"})
	stream := eng.EventsKey(sale)
	sqldb, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()

	client := &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * buyers, DisableCompression: true}}
	defer client.CloseIdleConnections()

	proc := startReady(t, env, freeAddr(t))
	noDegradedSwitch(t, client, proc.base(), admin)
	var base atomic.Pointer[string]
	setBase := func(p *serveProc) { b := p.base(); base.Store(&b) }
	setBase(proc)

	r, err := call(context.Background(), client, "POST", proc.base()+"/v1/admin/sales", admin, nil, map[string]any{
		"id": sale, "per_user_limit": 1, "items": []map[string]any{{"sku": sku, "stock": stock}}})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create sale: %d %s %v", r.status, r.body, err)
	}
	waitConsumed(t, rdb, eng, sale) // so the consumer is reading the sale's stream when the first kill comes

	stats := &buyerStats{statuses: map[string]int{}, connErrs: map[string]int{}}
	var ackedN atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	began := time.Now()
	for g := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"items": []map[string]any{{"sku": sku, "qty": 1}}}
			for i := 0; ctx.Err() == nil; i++ {
				user := fmt.Sprintf("g%02d-u%04d", g, i)
				tok, err := service.SignUser(secret, user, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
				if err != nil {
					panic(err)
				}
				hdr := map[string]string{"Idempotency-Key": "buy-" + user}
				for ctx.Err() == nil { // the same buy until it gets an HTTP answer
					r, err := call(ctx, client, "POST", *base.Load()+"/v1/sales/"+sale+"/orders", tok, hdr, body)
					if err != nil {
						stats.connErr(err)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					label := strconv.Itoa(r.status)
					if c := r.errorCode(); c != "" {
						label += " " + c
					}
					var id string
					if r.status == http.StatusCreated || r.status == http.StatusOK {
						var b struct {
							OrderID string `json:"order_id"`
						}
						_ = json.Unmarshal(r.body, &b)
						id = b.OrderID
					}
					stats.mu.Lock()
					stats.requests++
					stats.statuses[label]++
					switch {
					case r.status == http.StatusCreated:
						stats.acked = append(stats.acked, id)
						ackedN.Add(1)
					case r.status == http.StatusOK:
						stats.replayed = append(stats.replayed, id)
					case r.status == http.StatusConflict && r.errorCode() == "sold_out":
					case r.status == http.StatusTooManyRequests || r.status >= 500:
					default:
						stats.unexpected = append(stats.unexpected, fmt.Sprintf("%s: %s %s", user, label, r.body))
					}
					stats.mu.Unlock()
					switch {
					case r.status == http.StatusConflict && r.errorCode() == "sold_out":
						return
					case r.status == http.StatusTooManyRequests || r.status >= 500: // outcome unknown: same key again
						time.Sleep(20 * time.Millisecond)
						continue
					}
					break
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	waitAcked := func(n int64) int64 {
		t.Helper()
		for {
			if got := ackedN.Load(); got >= n {
				return got
			}
			select {
			case <-allDone:
				t.Fatalf("the buyers stopped with %d acknowledged, before %d: %v", ackedN.Load(), n, stats.statuses)
			case <-ctx.Done():
				t.Fatalf("%d acknowledged after %v, waiting for %d", ackedN.Load(), time.Since(began), n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	type killRecord struct {
		acked              int64
		pending, committed int // stream entries left pending by the killed consumer; of those, already in the database
		down               time.Duration
	}
	var kills []killRecord
	var lastRestart time.Time
	killAndRestart := func(at int64, addr string) *serveProc {
		t.Helper()
		// About at acknowledged, and preferably while the consumer holds a
		// batch it has not acknowledged (else up to stock/10 later).
		waitAcked(at)
		for ackedN.Load() < at+stock/10 && pendingCount(t, rdb, stream) == 0 && ctx.Err() == nil {
			select {
			case <-allDone:
			case <-time.After(200 * time.Microsecond):
				continue
			}
			break
		}
		k := killRecord{}
		proc.kill(t)
		killedAt := time.Now()
		k.acked = ackedN.Load()
		// Group-wide counts; earlier dead consumers' entries are still
		// pending (reclaimed only after 30s idle): count this kill's alone.
		k.pending, k.committed = pendingCommitted(t, rdb, sqldb, stream, sale)
		for _, prev := range kills {
			k.pending, k.committed = k.pending-prev.pending, k.committed-prev.committed
		}
		p := startReady(t, env, addr)
		setBase(p)
		lastRestart = time.Now()
		k.down = lastRestart.Sub(killedAt)
		kills = append(kills, k)
		return p
	}
	proc = killAndRestart(stock/3, proc.addr)     // the same port
	proc = killAndRestart(2*stock/3, freeAddr(t)) // a new port: the buyers follow
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Fatalf("the sale did not sell out: %d acknowledged; %v; connection errors %v", ackedN.Load(), stats.statuses, stats.connErrs)
	}
	soldIn := time.Since(began)
	for i, k := range kills {
		if k.acked >= stock {
			t.Fatalf("kill %d came after the sell-out (%d acknowledged): it tested nothing", i+1, k.acked)
		}
	}
	settled := settle(t, client, proc.base(), admin, sale, 45*time.Second)
	settledAfterRestart := time.Since(lastRestart)

	stats.mu.Lock()
	defer stats.mu.Unlock()
	for i, k := range kills {
		t.Logf("kill %d: after %d acknowledged (201s); %d stream entries left pending by the killed consumer (%d of them already committed); down for %v",
			i+1, k.acked, k.pending, k.committed, k.down.Round(time.Millisecond))
	}
	t.Logf("sold out in %v: %d requests; HTTP statuses %v; connection errors (no HTTP answer) %v, %d in all",
		soldIn.Round(time.Millisecond), stats.requests, stats.statuses, stats.connErrs, func() int {
			n := 0
			for _, c := range stats.connErrs {
				n += c
			}
			return n
		}())
	t.Logf("%d acknowledged (201), %d recovered by a retry with the same key (200); settled (consistent, in_flight 0) %v after the sell-out, %v after the last restart",
		len(stats.acked), len(stats.replayed), settled.Round(time.Millisecond), settledAfterRestart.Round(time.Millisecond))

	if len(stats.unexpected) > 0 {
		t.Errorf("%d unexpected answers, e.g. %v", len(stats.unexpected), stats.unexpected[:min(5, len(stats.unexpected))])
	}
	given := map[string]bool{} // every order id a buyer was given
	for _, ids := range [][]string{stats.acked, stats.replayed} {
		for _, id := range ids {
			if id == "" {
				t.Errorf("a 201/200 without an order id")
				continue
			}
			if given[id] {
				t.Errorf("order id %s was given to two requests", id)
			}
			given[id] = true
		}
	}
	if len(stats.acked) > stock {
		t.Errorf("%d buys acknowledged (201) of %d units", len(stats.acked), stock)
	}

	db, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	notConfirmed := 0
	for id := range given {
		o, err := db.Order(context.Background(), id)
		if err != nil || o.Status != inventory.OrderConfirmed {
			if notConfirmed++; notConfirmed <= 5 {
				t.Errorf("order %s given to a buyer: %+v, %v", id, o, err)
			}
		}
	}
	if notConfirmed > 0 {
		t.Errorf("%d of %d orders given to buyers are not confirmed in the database", notConfirmed, len(given))
	}
	orders := dbOrders(t, sqldb, sale)
	confirmed := 0
	for id, status := range orders {
		if status == string(inventory.OrderConfirmed) {
			confirmed++
		}
		if !given[id] {
			t.Errorf("order %s (%s) is in the database but no buyer was given it, though every lost answer was asked again", id, status)
		}
	}
	t.Logf("%d orders confirmed in the database, stock %d", confirmed, stock)
	if confirmed > stock || confirmed < len(stats.acked) || confirmed != stock || len(orders) != confirmed {
		t.Errorf("%d confirmed orders (%d in all) in the database; %d acknowledged; stock %d, sold out", confirmed, len(orders), len(stats.acked), stock)
	}
	st, err := eng.Stock(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	if it := st.Items[0]; it.Remaining != 0 || it.Sold != int64(confirmed) || it.Stocked != stock {
		t.Errorf("Redis after the sell-out: %+v; %d confirmed orders", it, confirmed)
	}
	journalBoughtOnce(t, db, sale, sku, given)
	// Entries the killed consumers left pending are in the database already
	// (settled says so) and are acknowledged at the restarted consumer's
	// next claim round: wait for that, not for a moment.
	waitfor.Until(t, waitfor.Patience, "every stream entry acknowledged", func() error {
		if n := pendingCount(t, rdb, stream); n != 0 {
			return fmt.Errorf("%d stream entries still pending", n)
		}
		return nil
	})
	if dls, err := db.DeadLetters(context.Background(), sale); err != nil || len(dls) != 0 {
		t.Errorf("dead letters: %+v, %v", dls, err)
	}
	if reps, err := db.Repairs(context.Background(), sale); err != nil || len(reps) != 0 {
		t.Errorf("the reconciliation loop repaired a sale that had no drift: %+v, %v", reps, err)
	}
	runReconcileCmd(t, env, sale)
	proc.stop(t)
}

// TestConsumerKilledMidBatch builds a backlog of thousands of orders in a
// sale's stream while no consumer runs (the sale is created through a
// running `seckill serve`, which is then stopped with SIGTERM; the orders
// are bought with the library straight into Redis), starts `seckill serve`
// so its consumer applies the backlog in batches of 500, and SIGKILLs it
// once the database holds some of the orders but not all and a batch is
// delivered and unacknowledged. It restarts it and SIGKILLs it again
// between the commit of a batch and its XACK (Redis writes paused with
// CLIENT PAUSE WRITE while the consumer commits), so that batch is applied
// twice. After a last restart, and the reclaim of the dead consumers'
// pending entries: every bought order is in the database exactly once,
// confirmed, and no other; the journal has exactly one bought row per order
// and sku; nothing is pending or undelivered in the stream, dead-lettered
// or repaired; `seckill reconcile` exits 0, consistent.
// appliedEventsSQL counts the events of sale $1 among ids $2 the database
// applied: in the journal, or the bought events its orders carry (store
// migration 015).
const appliedEventsSQL = `SELECT COUNT(DISTINCT event_id) FROM (
	SELECT event_id FROM journal WHERE sale_id = $1 AND event_id = ANY($2)
	UNION ALL SELECT event_id FROM orders WHERE sale_id = $1 AND event_id = ANY($2)) e`

func TestConsumerKilledMidBatch(t *testing.T) {
	t.Parallel()
	seckillBinary(t)
	srv := redistest.StartServer(t) // not killed here: no persistence needed
	dbURL := dbtest.PostgresURL(t)
	const (
		sale   = "backlog"
		sku    = "A"
		total  = 6000
		admin  = "kill-admin-token"
		prefix = "killtest"
	)
	env := map[string]string{
		"SECKILL_REDIS_URL":       "redis://" + srv.Addr() + "/0",
		"SECKILL_DATABASE_URL":    dbURL,
		"SECKILL_ADMIN_TOKEN":     admin,
		"SECKILL_JWT_SECRET":      "kill-jwt-secret",
		"SECKILL_KEY_PREFIX":      prefix,
		"SECKILL_RECONCILE_EVERY": "1s",
		"SECKILL_DEGRADED_GRACE":  "300ms",
	}
	ctx := context.Background()
	rdb := srv.Client(t)
	// One stream entry per order (the backlog's calls of 250 buys would
	// otherwise be 24 entries, which one batch of the consumer holds).
	eng := inventory.New(rdb, inventory.Options{Prefix: prefix, EntryPerOrder: true})
	stream := eng.EventsKey(sale)
	client := &http.Client{Timeout: 15 * time.Second}
	defer client.CloseIdleConnections()
	sqldb, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()

	// The sale, through the service; wait until its created event is stored.
	proc := startReady(t, env, freeAddr(t))
	noDegradedSwitch(t, client, proc.base(), admin)
	r, err := call(context.Background(), client, "POST", proc.base()+"/v1/admin/sales", admin, nil, map[string]any{
		"id": sale, "per_user_limit": 1, "items": []map[string]any{{"sku": sku, "stock": total}}})
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create sale: %d %s %v", r.status, r.body, err)
	}
	waitConsumed(t, rdb, eng, sale)
	proc.stop(t)

	// The backlog: bought straight into Redis with no consumer running.
	bought := map[string]bool{}
	const chunk = 250
	for from := 0; from < total; from += chunk {
		reqs := make([]inventory.BuyRequest, 0, chunk)
		for i := from; i < from+chunk && i < total; i++ {
			user := fmt.Sprintf("b%05d", i)
			reqs = append(reqs, inventory.BuyRequest{SaleID: sale, UserID: user, Lines: []inventory.Line{{SKU: sku, Qty: 1}}, IdempotencyKey: "k-" + user})
		}
		for i, res := range eng.BuyMany(ctx, reqs) {
			if res.Err != nil {
				t.Fatalf("buy %s: %v", reqs[i].UserID, res.Err)
			}
			if bought[res.Receipt.Order.ID] {
				t.Fatalf("order id %s twice", res.Receipt.Order.ID)
			}
			bought[res.Receipt.Order.ID] = true
		}
	}
	if n, _ := countOrders(sqldb, sale); n != 0 {
		t.Fatalf("%d orders in the database before the consumer ran", n)
	}
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil || len(groups) != 1 || groups[0].Lag < total || groups[0].Pending != 0 {
		t.Fatalf("backlog: groups %+v, %v; want lag >= %d, nothing pending", groups, err, total)
	}

	// The consumer applies the backlog; SIGKILL it halfway, while it holds
	// a batch it has not acknowledged: the database has some of the
	// orders, not all, and entries are pending in the consumer group.
	proc = startServe(t, env, freeAddr(t))
	started := time.Now()
	var before int
	var pendingBefore int64
	for {
		n, err := countOrders(sqldb, sale)
		if err != nil {
			t.Fatal(err)
		}
		if n >= total {
			t.Fatalf("the consumer applied all %d orders before the test could kill it with 0 < orders < %d: make the backlog bigger", total, total)
		}
		if n > 0 {
			p := pendingCount(t, rdb, stream)
			if p > 0 {
				// Freeze it first, and kill it only if a batch is still
				// unacknowledged in the frozen state: a batch seen pending
				// can be acknowledged in the millisecond before a kill,
				// and what is pending once it is frozen is what is
				// pending at its death.
				proc.freeze(t)
				if p = pendingCount(t, rdb, stream); p > 0 {
					before, pendingBefore = n, p
					break
				}
				proc.thaw(t)
			} else if n >= total/2 { // half stored and never a batch seen unacknowledged: kill anyway, and see what is lost
				before, pendingBefore = n, p
				break
			}
		}
		if !proc.running() {
			t.Fatalf("seckill serve exited: %v\n%s", proc.cmd.ProcessState, logTail(proc.log.String(), 20))
		}
		if time.Since(started) > 30*time.Second {
			t.Fatalf("the consumer stored nothing within 30s:\n%s", logTail(proc.log.String(), 20))
		}
		time.Sleep(time.Millisecond)
	}
	proc.kill(t)
	killedAfter := time.Since(started)
	atDeath, err := countOrders(sqldb, sale)
	if err != nil {
		t.Fatal(err)
	}
	pending := pendingCount(t, rdb, stream)
	batches := strings.Count(proc.log.String(), "order pipeline: batch stored")
	t.Logf("killed %v after start: the test saw %d orders of %d in the database and %d entries pending; once it was dead %d orders, %d pending (%d batches logged as stored)",
		killedAfter.Round(time.Millisecond), before, total, pendingBefore, atDeath, pending, batches)
	if pending == 0 {
		t.Errorf("no entry was pending once the consumer was dead: the kill did not land in a batch")
	} else {
		// Was the pending batch committed (killed between the commit and
		// XACK: it will be applied twice) or not (killed before the commit)?
		_, committed := pendingCommitted(t, rdb, sqldb, stream, sale)
		t.Logf("of the %d pending entries, %d were already committed to the database when the consumer died", pending, committed)
	}
	if atDeath >= total {
		t.Logf("note: every order was committed before the kill landed; the pending entries (%d) are a committed, unacknowledged batch", pending)
	}

	// A second SIGKILL, between a batch's commit and its XACK: once the
	// restarted consumer holds a batch, writes to Redis are paused (CLIENT
	// PAUSE WRITE), so the consumer commits the batch to PostgreSQL and then
	// waits on its XACK; the test sees the batch in the journal and kills
	// it there. That batch is applied a second time after the reclaim.
	dead := map[string]bool{}
	cs, err := rdb.XInfoConsumers(ctx, stream, pipeline.Group).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		dead[c.Name] = true // every consumer so far: the stopped process's and the killed one's
	}
	proc = startServe(t, env, freeAddr(t))
	unpause := func() { _ = rdb.Do(ctx, "CLIENT", "UNPAUSE").Err() }
	t.Cleanup(unpause)
	started = time.Now()
	var held []string // ids of the committed, unacknowledged batch
	for held == nil {
		if time.Since(started) > 30*time.Second {
			t.Errorf("no batch of the restarted consumer was caught between commit and XACK within 30s:\n%s", logTail(proc.log.String(), 20))
			break
		}
		if n, err := countOrders(sqldb, sale); err != nil || n >= total {
			t.Errorf("the restarted consumer stored everything (%d, %v) before a batch could be caught between commit and XACK (unacknowledged)", n, err)
			break
		}
		live := liveBatch(t, rdb, stream, dead)
		if len(live) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		if err := rdb.Do(ctx, "CLIENT", "PAUSE", 10000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		live = liveBatch(t, rdb, stream, dead) // it may have acknowledged it just before the pause
		if len(live) == 0 {
			unpause()
			continue
		}
		for deadline := time.Now().Add(8 * time.Second); ; time.Sleep(time.Millisecond) {
			var in int
			if err := sqldb.QueryRow(appliedEventsSQL, sale, live).Scan(&in); err != nil {
				unpause()
				t.Fatal(err)
			}
			if in == len(live) {
				held = live
				break
			}
			if time.Now().After(deadline) {
				unpause()
				t.Fatalf("the batch of %d entries held by the restarted consumer was not committed within 8s (%d in the journal):\n%s", len(live), in, logTail(proc.log.String(), 20))
			}
		}
	}
	proc.kill(t)
	unpause()
	allPending, committed := pendingCommitted(t, rdb, sqldb, stream, sale)
	atDeath, err = countOrders(sqldb, sale)
	if err != nil {
		t.Fatal(err)
	}
	what := fmt.Sprintf("between the commit of a batch of %d and its XACK", len(held))
	if held == nil {
		what = "with no batch caught between commit and XACK"
	}
	t.Logf("second kill %v after start, %s: %d orders in the database; %d entries pending in dead consumers, %d of them committed",
		time.Since(started).Round(time.Millisecond), what, atDeath, allPending, committed)
	// Every consumer that died holding entries was named by a heartbeat
	// before it read them: the next process takes them over at once
	// instead of after the reclaim's idle time (30 s, longer than this
	// test waits).
	if sum, err := rdb.XPending(ctx, stream, pipeline.Group).Result(); err == nil {
		for name, n := range sum.Consumers {
			var beats int
			if err := sqldb.QueryRow(`SELECT COUNT(*) FROM instances WHERE consumer = $1`, name).Scan(&beats); err != nil {
				t.Fatal(err)
			}
			if n > 0 && beats == 0 {
				t.Errorf("consumer %s died holding %d entries and no heartbeat ever named it", name, n)
			}
		}
	}
	if held != nil && (committed < len(held) || atDeath >= total) {
		t.Errorf("second kill: %d of the %d held entries committed, %d of %d orders stored: not a kill between commit and XACK with work left", committed, len(held), atDeath, total)
	}

	// Restart; the new process (a new consumer name) applies the rest and
	// reclaims the dead consumers' pending entries once they are idle.
	proc = startReady(t, env, freeAddr(t))
	settledIn := settle(t, client, proc.base(), admin, sale, 45*time.Second)
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, err = countOrders(sqldb, sale); err != nil {
			t.Fatal(err)
		}
		if (n == total && pendingCount(t, rdb, stream) == 0) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the last restart: settled (consistent, in_flight 0) in %v; %d orders in the database; reclaims logged: %d idle, %d of stopped consumers",
		settledIn.Round(time.Millisecond), n, strings.Count(proc.log.String(), "reclaimed entries of a dead consumer"),
		strings.Count(proc.log.String(), "took over a stopped consumer's entries"))

	orders := dbOrders(t, sqldb, sale)
	lost := 0
	for id := range bought {
		if status, ok := orders[id]; !ok || status != string(inventory.OrderConfirmed) {
			if lost++; lost <= 5 {
				t.Errorf("bought order %s: in the database %v, status %q", id, ok, status)
			}
		}
	}
	for id := range orders {
		if !bought[id] {
			t.Errorf("order %s in the database was never bought", id)
		}
	}
	if lost > 0 || len(orders) != len(bought) {
		t.Errorf("%d orders bought, %d in the database, %d of the bought missing or not confirmed", len(bought), len(orders), lost)
	}
	var lines, units int64
	// An order's lines: its one line in its own row, or rows of order_items
	// (store migration 014).
	if err := sqldb.QueryRow(`SELECT COUNT(*), COALESCE(SUM(qty), 0) FROM (
		SELECT o.qty FROM orders o WHERE o.sale_id = $1 AND o.sku <> ''
		UNION ALL SELECT oi.qty FROM order_items oi JOIN orders o ON o.id = oi.order_id WHERE o.sale_id = $1) l`, sale).Scan(&lines, &units); err != nil {
		t.Fatal(err)
	}
	if lines != total || units != total {
		t.Errorf("order lines: %d lines, %d units; want %d of each", lines, units, total)
	}
	db, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	journalBoughtOnce(t, db, sale, sku, bought)
	if p := pendingCount(t, rdb, stream); p != 0 {
		sum, err := rdb.XPending(ctx, stream, pipeline.Group).Result()
		t.Errorf("%d stream entries still pending: %+v, %v; the last process's pipeline log:\n%s", p, sum, err, pipelineLog(proc.log.String()))
	}
	if g, err := rdb.XInfoGroups(ctx, stream).Result(); err != nil || len(g) != 1 || g[0].Lag != 0 || g[0].Pending != 0 {
		t.Errorf("consumer group at the end: %+v, %v; want lag 0, nothing pending", g, err)
	}
	if cs, err := rdb.XInfoConsumers(ctx, stream, pipeline.Group).Result(); err == nil {
		t.Logf("consumers registered in the group at the end: %d (one per process that ran; dead ones are never removed)", len(cs))
	}
	if dls, err := db.DeadLetters(ctx, sale); err != nil || len(dls) != 0 {
		t.Errorf("dead letters: %+v, %v", dls, err)
	}
	if reps, err := db.Repairs(ctx, sale); err != nil || len(reps) != 0 {
		t.Errorf("the reconciliation loop repaired a sale that had no drift: %+v, %v", reps, err)
	}
	runReconcileCmd(t, env, sale)
	proc.stop(t)
}
