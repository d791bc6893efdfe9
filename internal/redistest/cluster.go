package redistest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
)

// clusterWait bounds how long StartCluster waits for the cluster to settle.
const clusterWait = 30 * time.Second

// NodeTimeout is the cluster-node-timeout of every node StartCluster starts:
// how long a node may be unreachable before the others consider it failing.
const NodeTimeout = 2 * time.Second

// FailoverTimeout bounds how long the promotion of a dead master's replica may
// take on a loaded test machine, derived from NodeTimeout the way Redis times
// a failover: NodeTimeout until the master is PFAIL, about as long again
// until a majority of masters has marked it FAIL by gossip, the replica's
// election delay (0.5-1 s plus 1 s per rank), and an election that gets its
// votes within twice NodeTimeout or is retried after four times NodeTimeout.
// Two whole election rounds come to about ten NodeTimeouts; 15 leaves room for
// nodes starved of CPU by a parallel -race test run.
const FailoverTimeout = 15 * NodeTimeout

// Cluster is a real Redis Cluster made of redis-server processes on free
// loopback ports, each with its own dir under one temp dir. Create it with
// StartCluster and always Stop it.
type Cluster struct {
	dir     string
	masters int
	nodes   []*proc

	mu      sync.Mutex
	stopped bool
}

// StartCluster starts masters*(1+replicasPerMaster) nodes (cluster-enabled yes,
// cluster-node-timeout NodeTimeout, repl-diskless-sync-delay 0, appendonly no,
// save "", protected-mode no, bind 127.0.0.1), joins them with `redis-cli --cluster create ... --cluster-yes`,
// and waits (at most 30 s) until every node reports cluster_state:ok with all
// 16384 slots assigned and ok, knows every other node, and every replica's link
// to its master is up. redis-cli requires masters >= 3.
//
// It takes no testing.TB so that it can be used from TestMain. On error
// everything started so far has been stopped again.
func StartCluster(masters, replicasPerMaster int) (*Cluster, error) {
	if masters < 3 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: StartCluster(%d, %d): need at least 3 masters and no negative replica count",
			masters, replicasPerMaster)
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	c := &Cluster{dir: dir, masters: masters}
	fail := func(err error) (*Cluster, error) {
		_ = c.Stop()
		return nil, err
	}

	conf := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // relative to the node's dir
		"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
		// Start a replica's diskless full sync at once instead of after the
		// default 5 s wait for more replicas.
		"--repl-diskless-sync-delay", "0",
	}
	for i := range masters * (1 + replicasPerMaster) {
		p, err := startProc(filepath.Join(dir, "node"+strconv.Itoa(i)), conf)
		if err != nil {
			return fail(err)
		}
		c.nodes = append(c.nodes, p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out))
	}
	if err := c.waitHealthy(ctx); err != nil {
		return fail(fmt.Errorf("%w\n--- redis-cli output ---\n%s", err, out))
	}
	return c, nil
}

// Addrs returns the "127.0.0.1:port" address of every node, masters and replicas.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		addrs[i] = p.addr()
	}
	return addrs
}

// Client returns a new cluster client (clusterclient.New, as the service
// builds it) seeded with every node, tuned for tests: short timeouts, one dial
// attempt per try (a dead node refuses at once), and more retries (several
// seconds in all) with a slot map that is never older than 500 ms. It still
// cannot outlast an election: wait for one with WaitFailover. The caller
// closes the client.
func (c *Cluster) Client() *redis.ClusterClient {
	return clusterclient.New(&redis.ClusterOptions{
		Addrs:                      c.Addrs(),
		DialTimeout:                time.Second,
		DialerRetries:              1,
		ReadTimeout:                2 * time.Second,
		WriteTimeout:               2 * time.Second,
		MaxRedirects:               16,
		ClusterStateReloadInterval: 500 * time.Millisecond,
	})
}

// Stop SIGKILLs every node, waits for them to exit and removes the temp dir.
// It is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	for _, p := range c.nodes {
		errs = append(errs, p.kill())
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// Kill SIGKILLs the node at addr (one of Addrs) and waits for it to exit.
// Killing a dead node is a no-op.
func (c *Cluster) Kill(addr string) error {
	p, err := c.node(addr)
	if err != nil {
		return err
	}
	return p.kill()
}

// Restart starts the killed node at addr again with the same port, config and
// dir (its nodes.conf keeps its node ID, so it rejoins the cluster). It returns
// once the node answers; it does not wait for the cluster state to converge.
func (c *Cluster) Restart(addr string) error {
	p, err := c.node(addr)
	if err != nil {
		return err
	}
	return p.start()
}

func (c *Cluster) node(addr string) (*proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, errors.New("redistest: cluster is stopped")
	}
	for _, p := range c.nodes {
		if p.addr() == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("redistest: %s is not a node of this cluster", addr)
}

// waitHealthy polls every node until the whole cluster is healthy (see
// StartCluster) or ctx ends.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_size":           strconv.Itoa(c.masters),
	}
	err := poll(ctx, func() error {
		for _, addr := range c.Addrs() {
			ci, err := command(addr, "CLUSTER INFO")
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			f := fields(ci)
			for k, v := range want {
				if f[k] != v {
					return fmt.Errorf("%s: %s is %q, want %q", addr, k, f[k], v)
				}
			}
			repl, err := command(addr, "INFO replication")
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			f = fields(repl)
			if f["role"] == "slave" && f["master_link_status"] != "up" {
				return fmt.Errorf("%s: replica link to master is %q", addr, f["master_link_status"])
			}
			// A replica's link can say up before it streams what the master
			// writes: WAIT asks each replica to acknowledge the master's offset.
			if replicas := len(c.nodes)/c.masters - 1; f["role"] == "master" && replicas > 0 {
				n, err := command(addr, "WAIT "+strconv.Itoa(replicas)+" 100")
				if err != nil {
					return fmt.Errorf("%s: %w", addr, err)
				}
				if n != strconv.Itoa(replicas) {
					return fmt.Errorf("%s: %s of %d replicas acknowledge the master's writes", addr, n, replicas)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not healthy: %w", err)
	}
	return nil
}

// WaitFailover waits until the cluster has failed over the master at dead (a
// node stopped with Kill): every surviving node reports cluster_state:ok with
// all 16384 slots ok, flags dead as fail and owning no slots, and sees the
// same master for every slot range; and each of those masters says role:master
// in its own INFO replication. It gives up after FailoverTimeout or when ctx
// ends, whichever comes first, with the last thing it was waiting for.
//
// It does not wait for clients: a client's slot map is its own (see Client).
func (c *Cluster) WaitFailover(ctx context.Context, dead string) error {
	p, err := c.node(dead)
	if err != nil {
		return err
	}
	if p.alive() {
		return fmt.Errorf("redistest: WaitFailover: %s is running", dead)
	}
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	began := time.Now()
	err = poll(ctx, func() error {
		var owners map[string]string // slot range -> master, as the first survivor sees it
		for _, q := range c.nodes {
			if q == p || !q.alive() {
				continue
			}
			addr := q.addr()
			ci, err := command(addr, "CLUSTER INFO")
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			if f := fields(ci); f["cluster_state"] != "ok" || f["cluster_slots_ok"] != "16384" {
				return fmt.Errorf("%s: cluster_state %q, cluster_slots_ok %q", addr, f["cluster_state"], f["cluster_slots_ok"])
			}
			text, err := command(addr, "CLUSTER NODES")
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			view, knowsDead := map[string]string{}, false
			for _, n := range parseNodes(text) {
				if n.addr == dead {
					knowsDead = true
					if !n.flags["fail"] || len(n.slots) > 0 {
						return fmt.Errorf("%s: sees %s with flags %v and slots %v, want fail and none", addr, dead, n.flags, n.slots)
					}
					continue
				}
				for _, r := range n.slots {
					view[r] = n.addr
				}
			}
			switch {
			case !knowsDead:
				return fmt.Errorf("%s: does not know %s", addr, dead)
			case owners == nil:
				owners = view
			case !maps.Equal(owners, view):
				return fmt.Errorf("%s: sees slot owners %v, another node %v", addr, view, owners)
			}
		}
		for _, m := range sortedValues(owners) {
			repl, err := command(m, "INFO replication")
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			if role := fields(repl)["role"]; role != "master" {
				return fmt.Errorf("%s: owns slots but says role %q", m, role)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: %s not failed over within %v: %w", dead, time.Since(began).Round(time.Millisecond), err)
	}
	return nil
}

// poll calls check every 100 ms until it returns nil, or returns its last
// error once ctx ends.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id     string
	addr   string          // "127.0.0.1:port", without the bus port and hostname
	flags  map[string]bool // myself, master, slave, fail?, fail, ...
	master string          // the master's id, or "-"
	slots  []string        // "0-5460", "5461"; slots being imported or migrated are left out
}

// parseNodes parses the reply of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
func parseNodes(text string) []nodeLine {
	var nodes []nodeLine
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := nodeLine{id: f[0], addr: addr, flags: map[string]bool{}, master: f[3]}
		for fl := range strings.SplitSeq(f[2], ",") {
			n.flags[fl] = true
		}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") {
				n.slots = append(n.slots, s)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// sortedValues returns m's distinct values, sorted.
func sortedValues(m map[string]string) []string {
	return slices.Compact(slices.Sorted(maps.Values(m)))
}

// fields parses "key:value" lines as returned by INFO and CLUSTER INFO.
func fields(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}
