package failover_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/failover"
	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
	"github.com/seckill/seckill/internal/waitfor"
)

// A seller's OnConnect checks each new connection for a restarted or
// promoted Redis. A connection opened while its node was a replica and
// kept in the node's pool would skip that check once the node is
// promoted, so connections to replicas are refused: a node is checked on
// every connection of its own as a master.

// promotedCluster is a 3+3 cluster with a cluster client configured as the
// service configures its own (clusterclient, OnConnect the seller's), an
// engine on it wired to a seller that ticks (Tick > 0: OnConnect checks)
// but never within the test (so no recovery repairs anything meanwhile),
// and a sale of stock 3, limit 1, whose master and replica are known.
type promotedCluster struct {
	cluster         *redistest.Cluster
	cc              *redis.ClusterClient
	seller          *failover.Seller
	master, replica string
	replicaPID      int
	resume          func() // set by cutOffReplica
}

func startPromotedCluster(t *testing.T, recheck time.Duration) *promotedCluster {
	t.Helper()
	cluster, err := redistest.StartCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	p := &promotedCluster{cluster: cluster}
	p.seller = failover.New(failover.Config{Tick: time.Hour, Recheck: recheck, Cluster: true})
	p.cc = clusterclient.New(&redis.ClusterOptions{
		Addrs: cluster.Addrs(), DisableIdentity: true, OnConnect: p.seller.OnConnect,
		DialTimeout: time.Second, DialerRetries: 1, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRedirects: 16,
	})
	p.cc.OnNewNode(func(node *redis.Client) { node.AddHook(p.seller.NodeHook(node)) })
	t.Cleanup(func() { _ = p.cc.Close() })
	eng := inventory.New(p.cc, inventory.Options{Prefix: "promoted"})
	p.seller.Wire(failover.Parts{Engine: eng})

	ctx := context.Background()
	if err := eng.CreateSale(ctx, inventory.Sale{ID: "s1", PerUserLimit: 1, Items: []inventory.Item{{SKU: "A", Stock: 3}}}); err != nil {
		t.Fatal(err)
	}
	m, err := p.cc.MasterForKey(ctx, eng.Key("s1", "sale"))
	if err != nil {
		t.Fatal(err)
	}
	p.master = m.Options().Addr
	mc := plain(t, p.master)
	repl, err := mc.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	host, port := "", ""
	for kv := range strings.SplitSeq(field(repl, "slave0"), ",") {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "ip":
			host = v
		case "port":
			port = v
		}
	}
	p.replica = host + ":" + port
	// The replica has the sale before the test cuts it off.
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for %s's replica %s: %d, %v", p.master, p.replica, n, err)
	}
	info, err := plain(t, p.replica).Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if p.replicaPID, err = strconv.Atoi(field(info, "process_id")); err != nil {
		t.Fatal(err)
	}
	return p
}

// buy sells one unit of s1 to user through the seller.
func (p *promotedCluster) buy(t *testing.T, user string) error {
	t.Helper()
	b, err := inventory.CheckBuy(inventory.BuyRequest{SaleID: "s1", UserID: user, Lines: []inventory.Line{{SKU: "A", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.seller.Buy(context.Background(), b)
	return err
}

// cutOffReplica stops the replica and drops its link on the master: what
// the master sells from now on the replica never receives (the lag of a
// replica on a busy network, made certain; see TestClusterMasterKilledMidSale).
func (p *promotedCluster) cutOffReplica(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(p.replicaPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = syscall.Kill(p.replicaPID, syscall.SIGCONT)
		}
	})
	if n, err := plain(t, p.master).ClientKillByFilter(context.Background(), "TYPE", "replica").Result(); err != nil || n != 1 {
		t.Fatalf("drop the replica's link on the master: %d, %v", n, err)
	}
	p.resume = func() {
		stopped = false
		if err := syscall.Kill(p.replicaPID, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// killMasterAndTakeOver kills the master, resumes the replica and makes it
// take the master's slots at once (CLUSTER FAILOVER TAKEOVER: no election,
// no wait for the master to be flagged failed), then waits until every live
// node names the replica as the owner of the sale's slot.
func (p *promotedCluster) killMasterAndTakeOver(t *testing.T) {
	t.Helper()
	if err := p.cluster.Kill(p.master); err != nil {
		t.Fatal(err)
	}
	p.resume()
	ctx := context.Background()
	rc := plain(t, p.replica)
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitOwner(t, p.cluster.Addrs(), p.master, p.replica)
}

// TestPromotedReplicaIsCheckedOnItsOldConnections: the cluster client
// holds a connection to the replica of a sale's master, opened the way
// go-redis opens one (its slot-map load, CLUSTER SLOTS on a node picked at
// random, replicas included, over the node's pooled client). The replica,
// two sales behind its master, is promoted. The next buy must not be sold
// from its stale counters over that connection: it is refused and the
// seller holds Redis back until a recovery repairs it. The node hook does
// not check again within the test (Recheck an hour): the connection to the
// replica is refused (OnConnect), and the node was never checked as a
// master. Without the replica check (OnConnect's and the hook's) the buy
// goes over the old connection unchecked: 4 units sold of 3.
func TestPromotedReplicaIsCheckedOnItsOldConnections(t *testing.T) {
	p := startPromotedCluster(t, time.Hour)
	ctx := context.Background()

	// What go-redis's loadState does on the node it picks, over the node
	// client the cluster client routes the node's commands through (a
	// replica is in the client's slot map once the node the map was read
	// from has heard of its replication offset).
	var onReplica error
	waitfor.Until(t, waitfor.Patience, "the client's slot map lists "+p.replica, func() error {
		seen := false
		err := p.cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			if node.Options().Addr == p.replica {
				seen, onReplica = true, node.ClusterSlots(ctx).Err()
			}
			return nil
		})
		if err == nil && !seen {
			err = errors.New("not listed")
		}
		return err
	})
	if !errors.Is(onReplica, failover.ErrReplicaConnection) {
		t.Errorf("CLUSTER SLOTS on the replica %s: %v, want ErrReplicaConnection", p.replica, onReplica)
	}

	p.cutOffReplica(t)
	for _, u := range []string{"u1", "u2"} {
		if err := p.buy(t, u); err != nil {
			t.Fatalf("buy of %s from the master: %v", u, err)
		}
	}
	p.killMasterAndTakeOver(t)

	sold := 2
	for _, u := range []string{"u3", "u4"} {
		if err := p.buy(t, u); err == nil {
			sold++
		} else if !errors.Is(err, failover.ErrRedisRestarted) && !errors.Is(err, failover.ErrNobodySells) {
			t.Errorf("buy of %s from the promoted replica: %v", u, err)
		}
	}
	if sold > 3 {
		t.Errorf("%d units sold of a stock of 3: the promoted replica sold from its stale counters", sold)
	}
	if !p.seller.HeldBack() {
		t.Errorf("the seller does not hold Redis back after the promotion of %s", p.replica)
	}
}

// waitOwner waits until owns.
func waitOwner(t *testing.T, addrs []string, dead, owner string) {
	t.Helper()
	waitfor.Until(t, redistest.FailoverTimeout, owner+" owns "+dead+"'s slots on every node", func() error {
		return owns(context.Background(), t, addrs, dead, owner)
	})
}

// owns says whether the node at owner says role master, and every live
// node but dead lists owner as a master serving slots, the same ones, and
// dead as serving none.
func owns(ctx context.Context, t *testing.T, addrs []string, dead, owner string) error {
	repl, err := plain(t, owner).Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if role := field(repl, "role"); role != "master" {
		return errors.New(owner + " says role " + role)
	}
	var want string // owner's slots, as the first node lists them
	for _, addr := range addrs {
		if addr == dead {
			continue
		}
		nodes, err := plain(t, addr).ClusterNodes(ctx).Result()
		if err != nil {
			return err
		}
		slots, ok := servedBy(nodes, owner)
		if !ok || slots == "" {
			return errors.New(addr + " does not see " + owner + " as a master serving slots")
		}
		if slots, _ := servedBy(nodes, dead); slots != "" {
			return errors.New(addr + " still sees " + dead + " serve " + slots)
		}
		if want == "" {
			want = slots
		} else if slots != want {
			return errors.New(addr + " sees " + owner + " serve " + slots + ", another node " + want)
		}
	}
	return nil
}

// servedBy returns the slots CLUSTER NODES lists for the master at addr,
// and whether it lists addr as a master.
func servedBy(nodes, addr string) (string, bool) {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		if a, _, _ := strings.Cut(f[1], "@"); a != addr || !strings.Contains(f[2], "master") {
			continue
		}
		return strings.Join(f[8:], " "), true
	}
	return "", false
}

// plain returns a client of the one node at addr (no OnConnect), closed
// when the test ends.
func plain(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// field returns a field of an INFO reply ("" if absent).
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// failOverTo makes the replica at to take its master's (from's) slots by a
// manual failover (CLUSTER FAILOVER: the master stops writes until the
// replica has all of them; nothing is lost) and waits until every node
// names to as their owner; from, still running, becomes to's replica.
func (p *promotedCluster) failOverTo(t *testing.T, from, to string) {
	t.Helper()
	// A manual failover the master does not join within 5 s is abandoned
	// (CLUSTER_MF_TIMEOUT): ask again then.
	ctx := context.Background()
	asked := time.Time{}
	waitfor.Until(t, redistest.FailoverTimeout, to+" takes "+from+"'s slots", func() error {
		if time.Since(asked) > 6*time.Second {
			if err := plain(t, to).ClusterFailover(ctx).Err(); err != nil {
				return err
			}
			asked = time.Now()
		}
		return owns(ctx, t, p.cluster.Addrs(), from, to)
	})
}

// TestRepromotedMasterIsCheckedOnItsOldConnections: the client holds a
// connection to a sale's master, opened and checked while it was the
// master. The master is demoted (its replica takes over) and later
// promoted again: a master with a new replication id, promoted from a
// replica, that a buy must not be sold from before it is repaired
// (OnConnect). The next buy reaches it over the connection of its first
// time as master.
func TestRepromotedMasterIsCheckedOnItsOldConnections(t *testing.T) {
	p := startPromotedCluster(t, time.Nanosecond) // every command checks its node again
	if err := p.buy(t, "u1"); err != nil {
		t.Fatalf("buy from the master: %v", err)
	}
	p.failOverTo(t, p.master, p.replica)
	p.failOverTo(t, p.replica, p.master)
	if err := p.buy(t, "u2"); err == nil {
		t.Errorf("a buy from %s, a master promoted from a replica again, was sold before it was repaired", p.master)
	} else if !errors.Is(err, failover.ErrRedisRestarted) && !errors.Is(err, failover.ErrNobodySells) {
		t.Errorf("buy from the master promoted again: %v", err)
	}
	if !p.seller.HeldBack() {
		t.Errorf("the seller does not hold Redis back after %s was promoted again", p.master)
	}
}
