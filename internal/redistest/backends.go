package redistest

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Backend is a Redis a package's tests run on.
type Backend struct {
	Name   string
	Client func(tb testing.TB) redis.UniversalClient
}

// Backends are the three Redis a package's tests usually run on: the
// machine's ("redis"), in-process miniredis ("miniredis", its clock left
// alone) and a real 3-master Redis Cluster ("cluster") of redis-server
// processes, started by the first test that asks for it and shared by the
// test binary: stop it with StopSharedCluster after m.Run.
func Backends() []Backend {
	return []Backend{
		{Name: "redis", Client: func(tb testing.TB) redis.UniversalClient { return Standalone(tb) }},
		{Name: "miniredis", Client: func(tb testing.TB) redis.UniversalClient { c, _ := Mini(tb); return c }},
		{Name: "cluster", Client: func(tb testing.TB) redis.UniversalClient { return SharedCluster(tb) }},
	}
}

// SingleBackends are Backends but the cluster: the machine's Redis and
// miniredis, whose Lua is gopher-lua, for a script's behaviour on one node.
func SingleBackends() []Backend { return Backends()[:2] }

// shared is the test binary's cluster of SharedCluster.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// SharedCluster returns a client (closed when tb ends) of the test binary's
// 3-master cluster, starting it on first use.
func SharedCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	shared.once.Do(func() { shared.c, shared.err = StartCluster(3, 0) })
	if shared.err != nil {
		tb.Fatalf("start redis cluster: %v", shared.err)
	}
	c := shared.c.Client()
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StopSharedCluster stops the cluster of SharedCluster, if one was started.
func StopSharedCluster() error {
	if shared.c == nil {
		return nil
	}
	return shared.c.Stop()
}

// ForEachBackend runs f as a subtest on each of Backends.
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

// Main is a TestMain for a package that uses Backends: it runs the tests,
// stops the shared cluster, and exits with the tests' code.
func Main(m *testing.M, pkg string) {
	code := m.Run()
	if err := StopSharedCluster(); err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: stop redis cluster: %v\n", pkg, err)
	}
	os.Exit(code)
}
