package redistest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testCluster is shared by the cluster tests; started in TestMain to show that
// StartCluster works without a testing.TB.
var testCluster *Cluster

func TestMain(m *testing.M) {
	start := time.Now()
	c, err := StartCluster(3, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "StartCluster:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "cluster %v up in %v\n", c.Addrs(), time.Since(start).Round(time.Millisecond))
	testCluster = c
	code := m.Run()

	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "Stop:", err)
		code = 1
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "second Stop:", err)
		code = 1
	}
	for _, p := range c.nodes {
		if p.running() || !canBind(p.port) {
			fmt.Fprintf(os.Stderr, "node %s still running after Stop\n", p.addr())
			code = 1
		}
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		fmt.Fprintf(os.Stderr, "cluster dir %s not removed (%v)\n", c.dir, err)
		code = 1
	}
	os.Exit(code)
}

// clusterClient returns a client for testCluster that stays open until the
// test's Prefix cleanups have run (a defer would close it too early).
func clusterClient(t *testing.T) *redis.ClusterClient {
	cc := testCluster.Client()
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return c
}

// settleCtx bounds a wait for a disturbed cluster to settle as StartCluster
// bounds the first one.
func settleCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), clusterWait)
	t.Cleanup(cancel)
	return c
}

func TestClusterHealthy(t *testing.T) {
	if n := len(testCluster.Addrs()); n != 3 {
		t.Fatalf("Addrs: %d nodes, want 3", n)
	}
	for _, addr := range testCluster.Addrs() {
		nc := redis.NewClient(&redis.Options{Addr: addr})
		info, err := nc.ClusterInfo(ctx(t)).Result()
		nc.Close()
		if err != nil {
			t.Fatalf("%s: CLUSTER INFO: %v", addr, err)
		}
		f := fields(info)
		if f["cluster_state"] != "ok" || f["cluster_slots_assigned"] != "16384" {
			t.Errorf("%s: cluster_state=%q cluster_slots_assigned=%q, want ok/16384",
				addr, f["cluster_state"], f["cluster_slots_assigned"])
		}
	}
	cc := clusterClient(t)
	var mu sync.Mutex
	masters := 0
	err := cc.ForEachMaster(ctx(t), func(context.Context, *redis.Client) error {
		mu.Lock()
		masters++
		mu.Unlock()
		return nil
	})
	if err != nil || masters != 3 {
		t.Fatalf("ForEachMaster: %d masters, err %v; want 3", masters, err)
	}
}

// masterKeyCounts returns DBSIZE of every master that holds at least one key.
func masterKeyCounts(t *testing.T, cc *redis.ClusterClient) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int64{}
	err := cc.ForEachMaster(ctx(t), func(ctx context.Context, n *redis.Client) error {
		size, err := n.DBSize(ctx).Result()
		if size > 0 {
			mu.Lock()
			counts[n.Options().Addr] = size
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

func TestClusterKeys(t *testing.T) {
	cc := clusterClient(t)
	p := Prefix(t, cc)
	want := map[string]string{}
	for i := range 12 {
		want[fmt.Sprintf("{%s:sale%d}:stock", p, i)] = fmt.Sprint(i * 7)
	}
	for k, v := range want {
		if err := cc.Set(ctx(t), k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for k, v := range want {
		if got, err := cc.Get(ctx(t), k).Result(); err != nil || got != v {
			t.Fatalf("GET %s = %q, %v; want %q", k, got, err, v)
		}
	}
	if n := len(masterKeyCounts(t, cc)); n < 2 {
		t.Fatalf("keys with different hash tags landed on %d master(s); want them spread", n)
	}
}

// checkPrefixCleanup writes keys under a prefix plus control keys that must
// survive, runs the cleanup, and checks the result.
func checkPrefixCleanup(t *testing.T, c redis.UniversalClient) {
	p := Prefix(t, c)
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("{%s:sale%d}:stock", p, i), fmt.Sprintf("{%s:sale%d}:orders", p, i))
	}
	other := Prefix(t, c)
	controls := []string{"{" + other + ":sale1}:stock", other + ":" + p, "{" + p + "}:no-colon"}
	for _, k := range append(keys, controls...) {
		if err := c.Set(ctx(t), k, "1", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	n, err := deletePrefixed(ctx(t), c, p)
	if err != nil || n != int64(len(keys)) {
		t.Fatalf("deletePrefixed = %d, %v; want %d, nil", n, err, len(keys))
	}
	for _, k := range keys {
		if c.Exists(ctx(t), k).Val() != 0 {
			t.Fatalf("%s survived the cleanup", k)
		}
	}
	for _, k := range controls {
		if c.Exists(ctx(t), k).Val() != 1 {
			t.Fatalf("control key %s was deleted", k)
		}
	}
	// Clean up the controls; the "{other:" one is the registered cleanup's job.
	c.Del(ctx(t), controls[1])
	c.Del(ctx(t), controls[2])
}

func TestPrefixCleanupCluster(t *testing.T) {
	cc := clusterClient(t)
	checkPrefixCleanup(t, cc)
}

func TestPrefixCleanupStandalone(t *testing.T) {
	checkPrefixCleanup(t, Standalone(t))
}

func TestPrefixCleanupMini(t *testing.T) {
	c, _ := Mini(t)
	checkPrefixCleanup(t, c)
}

// The cleanup registered by Prefix really runs at the end of a (sub)test.
func TestPrefixRegisteredCleanup(t *testing.T) {
	c := Standalone(t)
	var key string
	t.Run("inner", func(t *testing.T) {
		key = "{" + Prefix(t, c) + ":s}:stock"
		if err := c.Set(ctx(t), key, "5", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if c.Exists(ctx(t), key).Val() != 0 {
		t.Fatalf("%s still exists after the subtest's cleanup", key)
	}
}

func TestPrefixFormat(t *testing.T) {
	c, _ := Mini(t)
	valid := regexp.MustCompile(`^t[a-z0-9]{10}$`)
	seen := map[string]bool{}
	for range 200 {
		p := Prefix(t, c)
		if !valid.MatchString(p) || strings.ContainsAny(p, "{}*?[") {
			t.Fatalf("bad prefix %q", p)
		}
		if seen[p] {
			t.Fatalf("prefix %q returned twice", p)
		}
		seen[p] = true
	}
}

func TestMini(t *testing.T) {
	c, m := Mini(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get("k"); err != nil || got != "v" {
		t.Fatalf("miniredis has k = %q, %v", got, err)
	}
	m.Set("k2", "v2")
	if got := c.Get(ctx(t), "k2").Val(); got != "v2" {
		t.Fatalf("GET k2 = %q", got)
	}
}

func TestServerKillRestartAOF(t *testing.T) {
	s := StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := s.Client(t)
	addr := s.Addr()
	if err := c.Set(ctx(t), "durable", "42", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	if s.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, s.Addr())
	}
	if got, err := c.Get(ctx(t), "durable").Result(); err != nil || got != "42" {
		t.Fatalf("after restart GET durable = %q, %v; want 42", got, err)
	}
}

func TestStartServerBadConfig(t *testing.T) {
	_, err := startProc(t.TempDir(), []string{"--no-such-directive", "x"})
	if err == nil || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("want an error quoting the log tail, got %v", err)
	}
}

func TestStartClusterTooSmall(t *testing.T) {
	if c, err := StartCluster(2, 0); err == nil {
		c.Stop()
		t.Fatal("StartCluster(2, 0) succeeded")
	}
}

// fakeTB records Fatalf; any other TB method it is not meant to see (e.g.
// Skip) panics through the nil embedded interface.
type fakeTB struct {
	testing.TB
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStandaloneUnreachableIsFatal(t *testing.T) {
	port, err := freePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(URLEnv, fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Standalone(f)
		t.Error("Standalone returned for an unreachable server")
	}()
	<-done
	if f.fatal == "" || strings.Contains(f.fatal, "\n") || !strings.Contains(f.fatal, URLEnv) {
		t.Fatalf("want a one-line Fatalf naming %s, got %q", URLEnv, f.fatal)
	}
	t.Log(f.fatal)
}

// TestClusterKillRestart runs last: it disturbs the shared cluster, then
// waits for it to be healthy again.
func TestClusterKillRestart(t *testing.T) {
	addr := testCluster.Addrs()[1]
	if err := testCluster.Kill(addr); err != nil {
		t.Fatal(err)
	}
	nc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer nc.Close()
	if nc.Ping(ctx(t)).Err() == nil {
		t.Fatal("killed node answers PING")
	}
	// No replica, so no failover: WaitFailover must not report one, also
	// once the others have marked the node as failed.
	wctx, cancel := context.WithTimeout(t.Context(), 3*NodeTimeout)
	defer cancel()
	if err := testCluster.WaitFailover(wctx, addr); err == nil {
		t.Fatal("WaitFailover reported a failover of a master without replicas")
	} else {
		t.Log(err)
	}
	if err := testCluster.WaitFailover(t.Context(), testCluster.Addrs()[0]); err == nil {
		t.Fatal("WaitFailover of a running node succeeded")
	}
	if err := testCluster.Restart(addr); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.waitHealthy(settleCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Kill("127.0.0.1:1"); err == nil {
		t.Fatal("Kill of an unknown address succeeded")
	}
	cc := clusterClient(t)
	p := Prefix(t, cc)
	for i := range 6 {
		k := fmt.Sprintf("{%s:%d}:stock", p, i)
		if err := cc.Set(ctx(t), k, "1", 0).Err(); err != nil {
			t.Fatalf("SET %s after restart: %v", k, err)
		}
	}
}

// TestClusterFailover shows that Cluster.Client rides out a master's death:
// with one replica per master, once the cluster has promoted the replica
// (WaitFailover, bounded by the node timeout), a GET through the client whose
// slot map still names the dead master returns the value from the promoted
// replica, and the restarted node rejoins as a replica.
func TestClusterFailover(t *testing.T) {
	c, err := StartCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("Addrs: %d nodes, want 6", n)
	}
	cc := c.Client()
	t.Cleanup(func() { cc.Close() })
	key := "{" + Prefix(t, cc) + ":sale}:stock"
	if err := cc.Set(ctx(t), key, "100", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var victim string
	err = cc.ForEachMaster(ctx(t), func(ctx context.Context, n *redis.Client) error {
		if n.Exists(ctx, key).Val() == 1 {
			victim = n.Options().Addr
			return n.Wait(ctx, 1, 5*time.Second).Err() // replica has the key
		}
		return nil
	})
	if err != nil || victim == "" {
		t.Fatalf("finding the key's master: %q, %v", victim, err)
	}

	start := time.Now()
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFailover(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start).Round(time.Millisecond))
	owner := slotOwner(t, c, key)
	if owner == victim {
		t.Fatalf("the key's slot is still served by the killed master %s", victim)
	}
	if got, err := cc.Get(ctx(t), key).Result(); err != nil || got != "100" {
		t.Fatalf("GET after killing master %s and promoting %s = %q, %v; want 100", victim, owner, got, err)
	}
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(settleCtx(t)); err != nil {
		t.Fatal(err)
	}
	role, err := command(victim, "INFO replication")
	if err != nil || fields(role)["role"] != "slave" {
		t.Fatalf("restarted old master: role %q, %v; want slave", fields(role)["role"], err)
	}
}

// slotOwner returns the master serving key's slot as the cluster's first
// running node sees it in CLUSTER NODES.
func slotOwner(t *testing.T, c *Cluster, key string) string {
	t.Helper()
	for _, p := range c.nodes {
		if !p.alive() {
			continue
		}
		s, err := command(p.addr(), "CLUSTER KEYSLOT "+key)
		if err != nil {
			t.Fatal(err)
		}
		slot, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		text, err := command(p.addr(), "CLUSTER NODES")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range parseNodes(text) {
			for _, r := range n.slots {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				l, err1 := strconv.Atoi(lo)
				h, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && l <= slot && slot <= h {
					return n.addr
				}
			}
		}
		t.Fatalf("%s: no node serves slot %d of %s", p.addr(), slot, key)
	}
	t.Fatal("no cluster node is running")
	return ""
}
