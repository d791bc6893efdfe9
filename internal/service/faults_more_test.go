package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/dbtest"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/reconcile"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/waitfor"
)

// The fault tests here lose acknowledged writes in Redis on purpose — the
// way AOF everysec loses them when the machine dies, and the way a
// failover to an asynchronous replica loses them — and check what the
// service makes of it:
//
//   - every acknowledged order is confirmed in the database, also the ones
//     Redis lost before the order consumer had read them: the instance that
//     acknowledged them is alive and hands them over (failover's ack ring)
//     before the restarted or promoted Redis sells again;
//   - the reconciliation loop repairs Redis from the database, so that its
//     counters, order records and buyers' counts equal the database's;
//   - the rest of the stock sells without selling a unit twice: confirmed
//     orders never exceed the stock.
//
// Each runs two ways. In both, the crowd of buyers is held while Redis is
// down (no buy can succeed then) and the lost orders are counted as soon as
// Redis is back. recover-then-sell keeps the crowd held until Redis has
// been repaired from the database and agrees with it, then sells the rest:
// the path the Durability section of the README describes. sell-through
// releases the crowd at once, as a real crowd does not wait: then only the
// service's own guard — no buys from a Redis that restarted or was
// promoted until it has been repaired — keeps Redis from selling again the
// units of the orders it lost that the database already holds.

// crash is one way of losing Redis's recent acknowledged writes.
type crash struct {
	// window starts the window whose writes the crash will lose (copies the
	// fsynced AOF; cuts the replica off).
	window func(t *testing.T)
	// kill kills Redis (the machine dies; the master dies).
	kill func(t *testing.T)
	// revive brings Redis back with the state of the window's start
	// (restores the fsynced AOF and restarts; resumes the replica and waits
	// for its promotion).
	revive func(t *testing.T)
	// redis inspects Redis after the crash.
	redis func() redis.UniversalClient
}

// crashNumbers is what one run measured.
type crashNumbers struct {
	stock         int
	ackedAtWindow int // acknowledged when the window began
	ackedAtCrash  int // acknowledged when Redis was killed
	windowMs      int64
	lost          int   // acknowledged, missing from Redis after the crash
	lostInDB      int   // of those, stored by the consumer before Redis died
	lostRecovered int   // of those, not stored then, and confirmed in the database by the end
	lostForGood   int   // of those, never confirmed in the database
	counterDrift  int64 // Redis's remaining after the crash minus what the acknowledged orders leave
	repairs       int   // changes journaled in the repairs table
	ackedTotal    int
	confirmed     int
	oversold      int
	statuses      map[int]int
	// recoverSeconds is the time from the crash to a repaired Redis that
	// agrees with the database (recover-then-sell).
	recoverSeconds float64
}

func (n crashNumbers) String() string {
	return fmt.Sprintf("stock %d; acked at window start %d, at the crash %d (window %d acks, %d ms); "+
		"lost in Redis %d: %d already in the database at the crash, %d in flight (%d of them confirmed later, %d lost for good); "+
		"stock counter drift after the crash %+d; repair changes journaled %d; acked in all %d; confirmed %d; oversold %d; replies %v; "+
		"repaired and consistent %.1fs after the crash (0: not waited for)",
		n.stock, n.ackedAtWindow, n.ackedAtCrash, n.ackedAtCrash-n.ackedAtWindow, n.windowMs,
		n.lost, n.lostInDB, n.lost-n.lostInDB, n.lostRecovered, n.lostForGood,
		n.counterDrift, n.repairs, n.ackedTotal, n.confirmed, n.oversold, n.statuses, n.recoverSeconds)
}

// TestRedisKilledMidSaleAOFEverysec: the service's Redis (a private
// redis-server, AOF with appendfsync everysec) loses its last unsynced
// moment, as when the machine dies: the AOF as fsynced is copied a third of
// the way through a sell-out, buys go on being acknowledged, then Redis is
// SIGKILLed, the older AOF put back, and Redis restarted. (A SIGKILL alone
// loses nothing under everysec: the writes are in the kernel's page cache.)
func TestRedisKilledMidSaleAOFEverysec(t *testing.T) {
	for _, sellThrough := range []bool{false, true} {
		t.Run(map[bool]string{false: "recover-then-sell", true: "sell-through"}[sellThrough], func(t *testing.T) {
			srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
			rc := srv.Client(t)
			dir := configGet(t, rc, "dir")
			aofDir := filepath.Join(dir, configGet(t, rc, "appenddirname"))
			var synced map[string][]byte
			c := crash{
				window: func(t *testing.T) { synced = readDir(t, aofDir) },
				kill: func(t *testing.T) {
					if err := srv.Kill(); err != nil {
						t.Fatal(err)
					}
				},
				revive: func(t *testing.T) {
					writeDir(t, aofDir, synced)
					if err := srv.Restart(); err != nil {
						t.Fatal(err)
					}
				},
				redis: func() redis.UniversalClient { return rc },
			}
			a := startAppReconciling(t, service.Config{RedisURL: "redis://" + srv.Addr() + "/0", DatabaseURL: dbtest.PostgresURL(t),
				RateLimitUser: "off"})
			n := crashMidSale(t, a, c, sellThrough)
			t.Logf("AOF everysec, %s: %v", t.Name(), n)
		})
	}
}

// TestClusterMasterKilledMidSale: the service runs on a 3-master,
// 3-replica Redis Cluster; the master owning the sale's slot is SIGKILLed
// a third of the way through a sell-out and its replica promoted.
// Replication is asynchronous: what the replica had not received when the
// master died is lost, acknowledged or not. On loopback a replica is
// rarely more than a millisecond behind, so the test makes the lag it
// would have on a busy network: the replica is stopped (SIGSTOP) and its
// link dropped on the master, buys go on being acknowledged by the master
// alone, then the master is killed and the replica resumed (SIGCONT): it
// has everything up to the moment its link was dropped.
func TestClusterMasterKilledMidSale(t *testing.T) {
	for _, sellThrough := range []bool{false, true} {
		t.Run(map[bool]string{false: "recover-then-sell", true: "sell-through"}[sellThrough], func(t *testing.T) {
			began := time.Now()
			cluster, err := redistest.StartCluster(3, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cluster.Stop() })
			t.Logf("cluster of 3+3 started in %v", time.Since(began).Round(time.Millisecond))

			a := startAppReconciling(t, service.Config{RedisClusterAddrs: cluster.Addrs(), DatabaseURL: dbtest.PostgresURL(t),
				RateLimitUser: "off"})
			ctx := context.Background()
			key := a.svc.Engine().Key("s1", "sale")
			master, replica := ownerOf(t, cluster.Addrs(), key)
			t.Logf("%s: master %s, replica %s", key, master, replica)
			replicaPID := processID(t, replica)
			stopped := false
			t.Cleanup(func() {
				if stopped {
					_ = syscall.Kill(replicaPID, syscall.SIGCONT)
				}
			})
			var promoted *redis.Client
			c := crash{
				window: func(t *testing.T) {
					if err := syscall.Kill(replicaPID, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					stopped = true
					m := redis.NewClient(&redis.Options{Addr: master})
					defer m.Close()
					if n, err := m.ClientKillByFilter(ctx, "TYPE", "replica").Result(); err != nil || n != 1 {
						t.Fatalf("drop the replica's link on the master: %d, %v", n, err)
					}
				},
				kill: func(t *testing.T) {
					if err := cluster.Kill(master); err != nil {
						t.Fatal(err)
					}
				},
				revive: func(t *testing.T) {
					if err := syscall.Kill(replicaPID, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
					stopped = false
					if err := cluster.WaitFailover(context.Background(), master); err != nil {
						t.Fatal(err)
					}
					waitPromoted(t, replica, redistest.FailoverTimeout) // the replica is the one promoted
					promoted = redis.NewClient(&redis.Options{Addr: replica})
					t.Cleanup(func() { _ = promoted.Close() })
				},
				redis: func() redis.UniversalClient { return promoted },
			}
			n := crashMidSale(t, a, c, sellThrough)
			t.Logf("cluster failover, %s: %v", t.Name(), n)
		})
	}
}

// crashMidSale sells a sale of 300 to a crowd of 8 concurrent buyers
// (one unit each), starts the crash's window a third of the way through,
// lets another sixth be acknowledged, crashes Redis, counts what it lost,
// waits for the consumer and the repair (recover-then-sell only), and sells
// the rest; it checks everything the file's comment promises and returns
// what it measured.
func crashMidSale(t *testing.T, a *app, c crash, sellThrough bool) crashNumbers {
	const stock = 300
	n := crashNumbers{stock: stock}
	a.createSale("s1", 1, "A", stock)
	// Only a bound for a sale that never ends: a cluster's failover alone
	// may take up to redistest.FailoverTimeout on a loaded machine.
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	buyers := newCrowd(a, "s1")
	buyers.start(ctx, 8)
	defer buyers.stopAndWait(stop)
	db, eng := a.svc.Store(), a.svc.Engine()

	if !buyers.waitAcked(ctx, stock/3) {
		t.Fatalf("a third was not sold in time: %v", buyers.replies())
	}
	n.ackedAtWindow = buyers.ackedCount()
	c.window(t)
	windowed := time.Now()
	if !buyers.waitAcked(ctx, n.ackedAtWindow+stock/6) {
		t.Fatalf("the window did not fill in time: %v", buyers.replies())
	}
	// A crash loses whatever the consumer had not stored yet too; make sure
	// it had stored some of the window, or nothing Redis loses could be
	// sold twice and the test would prove little. The crowd buys on
	// meanwhile (and holds itself at two thirds, before the sale runs out).
	// (At most a few seconds: a cluster's replica is stopped meanwhile.)
	buyers.holdAt(2 * stock / 3)
	want, deadline := n.ackedAtWindow+stock/12, time.Now().Add(5*time.Second)
	for ; ; time.Sleep(5 * time.Millisecond) {
		counts, err := db.CountOrders(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if counts[inventory.OrderConfirmed] >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("the consumer has stored %d orders, not yet %d: crashing anyway", counts[inventory.OrderConfirmed], want)
			break
		}
	}
	crashed := time.Now()
	n.windowMs = crashed.Sub(windowed).Milliseconds()
	// The buys in flight at the crash fail, wait through the client's
	// retries, or are answered by the revived Redis; the crowd is held
	// once they are answered, until Redis is back and measured.
	held := make(chan struct{})
	go func() { buyers.hold(); close(held) }()
	c.kill(t)
	n.ackedAtCrash = buyers.ackedCount() // about: replies of buys Redis ran just before may still be on their way
	if n.ackedAtCrash >= stock*3/4 {
		t.Fatalf("Redis was killed too late: %d of %d units were acknowledged", n.ackedAtCrash, stock)
	}
	// What the consumer had stored when Redis died (a batch it read just
	// before may still be committing: give it a moment).
	time.Sleep(100 * time.Millisecond)
	atKill := confirmedOrders(t, a)
	c.revive(t)
	<-held
	// Every 201 was answered by Redis before it was killed, or by the
	// revived Redis: the orders missing now were lost with the crash.
	acked := buyers.ackedList()
	rdb := c.redis()
	lost := missingOrders(t, rdb, eng.Key("s1", "orders"), acked)
	n.lost = len(lost)
	for _, id := range lost {
		if atKill[id] {
			n.lostInDB++
		}
	}
	if r, err := rdb.HGet(ctx, eng.Key("s1", "sale"), "r:A").Int64(); err == nil {
		// Units the counter holds beyond what the acknowledged orders
		// left (buys whose reply the crash lost may take a few more).
		n.counterDrift = r - int64(stock-len(acked))
	}
	if r, err := db.Repairs(ctx, "s1"); err != nil || len(r) > 0 {
		// A repair needs the reconciliation loop's second pass, or the
		// service's recovery of a restarted Redis: not normally this fast.
		t.Logf("Redis was repaired before the lost orders were counted: %d is a lower bound (%v)", n.lost, err)
	}
	t.Logf("after the crash: %d of the %d orders acknowledged are missing from Redis; %d of them were in the database when Redis died",
		n.lost, len(acked), n.lostInDB)

	if !sellThrough {
		// The consumer stores what the restored stream still holds, Redis
		// is repaired from the database; nothing is sold meanwhile.
		rep, since := waitReconciled(t, a, 25*time.Second, 2*time.Second)
		n.recoverSeconds = since.Sub(crashed).Seconds()
		// Redis agrees with the database before a single unit more is sold.
		counts, err := db.CountOrders(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		st, err := eng.Stock(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		inRedis, err := redisOrders(ctx, rdb, eng.Key("s1", "orders"))
		if err != nil {
			t.Fatal(err)
		}
		if it := st.Items[0]; it.Remaining != int64(stock-counts[inventory.OrderConfirmed]) || len(inRedis) != counts[inventory.OrderConfirmed] {
			t.Errorf("after the repair: Redis remaining %d and %d order records, the database %d confirmed orders of %d: %+v",
				it.Remaining, len(inRedis), counts[inventory.OrderConfirmed], stock, rep)
		}
		if it := rep.Items[0]; !rep.Consistent || it.Drift != 0 || it.StockDrift != 0 || it.HeldDrift != 0 {
			t.Errorf("after the repair: %+v", rep)
		}
	}
	buyers.release()

	// Sell the rest.
	buyers.wait()
	if ctx.Err() != nil {
		t.Fatalf("the sale did not sell out: %v", buyers.replies())
	}
	n.statuses = buyers.replies()
	all := buyers.ackedList()
	n.ackedTotal = len(all)
	waitDrained(t, a, 20*time.Second)
	counts, err := db.CountOrders(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	n.confirmed = counts[inventory.OrderConfirmed]
	n.oversold = max(0, n.confirmed-stock)
	if n.oversold > 0 {
		// Let the reconciliation loop do what it can (several passes), and show it.
		time.Sleep(1500 * time.Millisecond)
		repairs, _ := db.Repairs(ctx, "s1")
		t.Logf("oversold; the repairs journaled: %+v; the last reconciliation: %s", repairs,
			a.admin("GET", "/v1/admin/sales/s1/reconcile", nil).body)
	} else {
		// The books balance: whatever Redis still lacks is repaired.
		waitReconciled(t, a, 25*time.Second, 0)
	}
	repairs, err := db.Repairs(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	n.repairs = len(repairs)
	atEnd := confirmedOrders(t, a)
	for _, id := range lost {
		switch {
		case atKill[id]:
		case atEnd[id]:
			n.lostRecovered++
		default:
			n.lostForGood++
		}
	}
	t.Logf("numbers: %v", n)
	if dl, err := db.DeadLetters(ctx, "s1"); err != nil || len(dl) > 0 {
		t.Errorf("dead letters: %+v %v", dl, err)
	}

	// Every acknowledged order is confirmed, the ones lost with Redis before
	// the database had them too: the service that acknowledged them lives.
	var (
		inRedis map[string]string // the orders in Redis, read at the first order not confirmed
		rerr    error
	)
	for _, id := range all {
		o, err := db.Order(ctx, id)
		switch {
		case err == nil && o.Status == inventory.OrderConfirmed:
		default:
			if inRedis == nil {
				inRedis, rerr = redisOrders(ctx, rdb, eng.Key("s1", "orders"))
			}
			rec, found := inRedis[id]
			t.Errorf("acknowledged order %s (answer %d of %d, %d at the crash) is not confirmed: %+v, %v; in Redis: %q (found %v, %v)",
				id, slices.Index(all, id)+1, len(all), n.ackedAtCrash, o, err, rec, found, rerr)
		}
	}
	// No unit is sold twice.
	if n.confirmed > stock {
		t.Errorf("OVERSOLD: %d confirmed orders of %d units (%d of the orders Redis lost were in the database already, %d acknowledged in all)",
			n.confirmed, stock, n.lostInDB, n.ackedTotal)
	}
	if n.confirmed < n.ackedTotal || n.lostForGood > 0 {
		t.Errorf("%d confirmed orders, %d acknowledged, %d lost for good", n.confirmed, n.ackedTotal, n.lostForGood)
	}
	if n.oversold == 0 {
		rep, _ := waitReconciled(t, a, 25*time.Second, 0)
		if it := rep.Items[0]; it.Remaining != 0 || it.Sold != int64(n.confirmed) || n.confirmed != stock {
			t.Errorf("after the sell-out: %+v, %d confirmed orders of %d units", rep, n.confirmed, stock)
		}
	}
	return n
}

// confirmedOrders is the set of the sale's confirmed orders in the database.
func confirmedOrders(t *testing.T, a *app) map[string]bool {
	t.Helper()
	snap, err := a.svc.Store().Snapshot(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, o := range snap.Orders {
		if o.Status == inventory.OrderConfirmed {
			ids[o.ID] = true
		}
	}
	return ids
}

// missingOrders returns the ids among ids that the orders hash lacks.
func missingOrders(t *testing.T, rdb redis.UniversalClient, key string, ids []string) []string {
	t.Helper()
	recs, err := redisOrders(context.Background(), rdb, key)
	if err != nil {
		t.Fatalf("read the orders after the crash: %v", err)
	}
	var missing []string
	for _, id := range ids {
		if _, ok := recs[id]; !ok {
			missing = append(missing, id)
		}
	}
	return missing
}

// waitReconciled waits until a reconciliation pass (the admin endpoint)
// finds the sale consistent, nothing in flight, no buyer's count astray,
// and the same numbers for at least stable (the service may still be
// recovering: handing orders to the database, repairing Redis), and
// returns that pass.
func waitReconciled(t *testing.T, a *app, within, stable time.Duration) (rep reconcile.Report, since time.Time) {
	t.Helper()
	var (
		last  reply
		first reconcile.Report
	)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		last = a.admin("GET", "/v1/admin/sales/s1/reconcile", nil)
		if last.status != http.StatusOK {
			since = time.Time{}
			continue
		}
		var rep reconcile.Report
		if err := json.Unmarshal(last.body, &rep); err != nil {
			t.Fatalf("reconcile: %v: %s", err, last.body)
		}
		ok := rep.Consistent
		for _, it := range rep.Items {
			ok = ok && it.InFlight == 0 && it.HeldDrift == 0
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero() || !slices.Equal(rep.Items, first.Items):
			first, since = rep, time.Now()
		}
		if ok && time.Since(since) >= stable {
			return rep, since
		}
	}
	t.Fatalf("the sale was not reconciled (and stable for %v) within %v: %d %s", stable, within, last.status, last.body)
	return reconcile.Report{}, time.Time{}
}

// waitDrained waits until the consumer has stored everything of the sale
// (nothing in flight), consistent or not.
func waitDrained(t *testing.T, a *app, within time.Duration) {
	t.Helper()
	var last reply
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		last = a.admin("GET", "/v1/admin/sales/s1/reconcile", nil)
		if last.status != http.StatusOK {
			continue
		}
		var rep reconcile.Report
		if err := json.Unmarshal(last.body, &rep); err != nil {
			t.Fatalf("reconcile: %v: %s", err, last.body)
		}
		if len(rep.Items) > 0 && rep.Items[0].InFlight == 0 {
			return
		}
	}
	t.Fatalf("the consumer did not drain the sale within %v: %d %s", within, last.status, last.body)
}

// startAppReconciling is startApp with the reconciliation loop on, every
// 250 ms (startApp turns it off), so that it repairs drift that two passes
// in a row find within about half a second.
func startAppReconciling(t *testing.T, cfg service.Config) *app {
	t.Helper()
	cfg.ReconcileEvery = 250 * time.Millisecond
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() { // what the service said about Redis going and coming back
			var lines []string
			for line := range strings.Lines(logs.String()) {
				// Not the requests' failures either: the 503s of a test polling
				// while Redis is held back fill the lines before the warnings
				// that say why it is.
				if !strings.Contains(line, "order pipeline") && !strings.Contains(line, "request failed") && len(lines) < 40 {
					lines = append(lines, line)
				}
			}
			t.Logf("the service's warnings (first %d, the order pipeline's and the requests' failures left out):\n%s", len(lines), strings.Join(lines, ""))
		}
	})
	return startApp(t, cfg)
}

// ---- the crowd

// crowd is buyers buying one unit of A each, each request a new user, from
// several goroutines, until each is told the sale is sold out. It can be
// held (no request in flight) and released.
type crowd struct {
	a      *app
	sale   string
	client *http.Client

	held     atomic.Bool
	holdAtN  atomic.Int64 // hold once this many are acknowledged (0: never)
	inflight atomic.Int64
	users    atomic.Int64
	wg       sync.WaitGroup

	mu       sync.Mutex
	acked    []string // order ids answered 201, in answer order
	statuses map[int]int
}

func newCrowd(a *app, sale string) *crowd {
	return &crowd{a: a, sale: sale, statuses: map[int]int{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
}

func (c *crowd) start(ctx context.Context, n int) {
	for range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for ctx.Err() == nil {
				c.inflight.Add(1) // before looking at held: see hold
				if c.held.Load() {
					c.inflight.Add(-1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				status, id, code := c.buy(ctx, "b"+strconv.FormatInt(c.users.Add(1), 10))
				c.mu.Lock()
				c.statuses[status]++
				if status == http.StatusCreated {
					c.acked = append(c.acked, id)
					if h := c.holdAtN.Load(); h > 0 && int64(len(c.acked)) >= h {
						c.held.Store(true)
					}
				}
				c.mu.Unlock()
				c.inflight.Add(-1)
				switch {
				case status == http.StatusConflict && code == "sold_out":
					return
				case status != http.StatusCreated:
					time.Sleep(10 * time.Millisecond) // an outage: do not spin
				}
			}
		}()
	}
}

// buy sends one buy; status 0 is a transport error.
func (c *crowd) buy(ctx context.Context, user string) (status int, orderID, code string) {
	tok, err := service.SignUser(c.a.svc.JWTSecret(), user, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		return 0, "", err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.a.svc.URL()+"/v1/sales/"+c.sale+"/orders",
		strings.NewReader(`{"items":[{"sku":"A","qty":1}]}`))
	if err != nil {
		return 0, "", err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		OrderID string `json:"order_id"`
		Error   struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body.OrderID, body.Error.Code
}

// hold stops new buys and returns once none is in flight.
func (c *crowd) hold() {
	c.held.Store(true)
	for c.inflight.Load() != 0 {
		time.Sleep(2 * time.Millisecond)
	}
}

// holdAt makes the crowd hold itself once n buys are acknowledged.
func (c *crowd) holdAt(n int) { c.holdAtN.Store(int64(n)) }

// release lets the crowd buy again, and forgets holdAt.
func (c *crowd) release() {
	c.holdAtN.Store(0)
	c.held.Store(false)
}

// wait returns once every buyer was told the sale is sold out (or the
// crowd's context ended).
func (c *crowd) wait() { c.wg.Wait() }

func (c *crowd) stopAndWait(stop context.CancelFunc) {
	stop()
	c.release()
	c.wg.Wait()
}

func (c *crowd) waitAcked(ctx context.Context, n int) bool {
	for c.ackedCount() < n {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func (c *crowd) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked)
}

func (c *crowd) ackedList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.acked)
}

func (c *crowd) replies() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int, len(c.statuses))
	for k, v := range c.statuses {
		out[k] = v
	}
	return out
}

// ---- Redis helpers

func configGet(t *testing.T, rdb *redis.Client, name string) string {
	t.Helper()
	v, err := rdb.ConfigGet(context.Background(), name).Result()
	if err != nil || v[name] == "" {
		t.Fatalf("CONFIG GET %s: %v %v", name, v, err)
	}
	return v[name]
}

// readDir reads every file of a directory (an AOF directory: flat).
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	if len(files) == 0 {
		t.Fatalf("no AOF files in %s", dir)
	}
	return files
}

// writeDir replaces the directory's files with files.
func writeDir(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ownerOf returns the master owning key's slot (the node whose own line
// in CLUSTER NODES lists the slot) and that master's replica (from its
// INFO replication: other nodes' views of who replicates whom may still be
// converging by gossip).
func ownerOf(t *testing.T, addrs []string, key string) (master, replica string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(waitfor.Patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, addr := range addrs {
			c := redis.NewClient(&redis.Options{Addr: addr})
			slot, err := c.ClusterKeySlot(ctx, key).Result()
			nodes, err2 := c.ClusterNodes(ctx).Result()
			repl, err3 := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil || err2 != nil || err3 != nil {
				continue
			}
			if !ownsSlot(nodes, slot) {
				continue
			}
			// slave0:ip=127.0.0.1,port=18636,state=online,offset=...,lag=0
			var host, port, state string
			for kv := range strings.SplitSeq(infoField(repl, "slave0"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "ip":
					host = v
				case "port":
					port = v
				case "state":
					state = v
				}
			}
			if state == "online" && infoField(repl, "connected_slaves") == "1" && streaming(addr, key) {
				t.Logf("%s is in slot %d", key, slot)
				return addr, host + ":" + port
			}
		}
	}
	t.Fatalf("no master with an online replica owns the slot of %s", key)
	return "", ""
}

// streaming reports whether the master at addr's replica acknowledges its
// writes. Right after a full sync a replica may be "online" and its link
// "up" while the master does not stream to it yet (it waits for the
// replica's first REPLCONF ACK): killed then, the master leaves an empty
// replica. A write of a probe key next to key, and WAIT for the replica.
func streaming(addr, key string) bool {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	probe := key + ":replication-probe"
	if c.Set(ctx, probe, "1", 0).Err() != nil || c.Del(ctx, probe).Err() != nil {
		return false
	}
	n, err := c.Wait(ctx, 1, time.Second).Result()
	return err == nil && n == 1
}

// ownsSlot: the "myself" line of CLUSTER NODES is a master serving slot.
func ownsSlot(nodes string, slot int64) bool {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.ParseInt(lo, 10, 64)
			h, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				return true
			}
		}
	}
	return false
}

// processID is the pid of the redis-server at addr (one of the test's own).
func processID(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no process_id in INFO of %s", addr)
	return 0
}

// waitPromoted waits until the node at addr is a master and the cluster
// state it sees is ok.
func waitPromoted(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	began := time.Now()
	var role, state string
	for time.Since(began) < within {
		repl, _ := c.Info(ctx, "replication").Result()
		ci, _ := c.ClusterInfo(ctx).Result()
		role, state = infoField(repl, "role"), infoField(ci, "cluster_state")
		if role == "master" && state == "ok" {
			t.Logf("replica %s promoted and the cluster ok after %v", addr, time.Since(began).Round(time.Millisecond))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("replica %s not promoted within %v: role %q, cluster_state %q", addr, within, role, state)
}

func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
