// Package clusterclient builds seckill's Redis Cluster clients: go-redis
// ClusterClients that find a promoted replica soon after a master dies.
//
// go-redis routes a key to the master its slot map names, and refreshes that
// map only when a node answers MOVED or ASK, and every
// ClusterStateReloadInterval (60 s by default) when a command finds the map
// older than that. A dead master answers nothing, so after a failover a
// default client keeps dialling it until the next periodic reload, and with
// its default retries (MaxRedirects 3, backoff of 10 ms and up) a command gives
// up within a fraction of a second: commands for the dead master's slots keep
// failing for up to a minute after the cluster has promoted its replica.
//
// A client from New reloads its slot map whenever a node cannot be reached,
// and retries for about two seconds (longer than a reload takes), so that a
// command issued once the promotion is done reaches the new master. A command
// issued while the cluster is still electing (Redis's cluster-node-timeout,
// 15 s by default, plus about a second) fails after its retries; no client
// setting can bridge that, and the service's degraded mode deals with it.
package clusterclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The values New gives the options left unset (zero).
const (
	// ReloadInterval bounds how old the slot map may be when a command runs.
	ReloadInterval = time.Second
	// MaxRedirects is the number of retries of a command (after a MOVED or
	// ASK, a dial error, CLUSTERDOWN or TRYAGAIN while a failover is under
	// way, ...), each after a backoff of MinRetryBackoff doubled per retry
	// (randomised) up to MaxRetryBackoff: about two seconds in all.
	MaxRedirects    = 8
	MinRetryBackoff = 20 * time.Millisecond
	MaxRetryBackoff = 500 * time.Millisecond
)

// New returns a cluster client for opts (which it fills in: see the
// constants) that reloads its slot map, in the background, whenever a command
// on a node fails because the node cannot be dialled.
func New(opts *redis.ClusterOptions) *redis.ClusterClient {
	if opts.ClusterStateReloadInterval == 0 {
		opts.ClusterStateReloadInterval = ReloadInterval
	}
	if opts.MaxRedirects == 0 {
		opts.MaxRedirects = MaxRedirects
	}
	if opts.MinRetryBackoff == 0 {
		opts.MinRetryBackoff = MinRetryBackoff
	}
	if opts.MaxRetryBackoff == 0 {
		opts.MaxRetryBackoff = MaxRetryBackoff
	}
	c := redis.NewClusterClient(opts)
	c.OnNewNode(func(node *redis.Client) { node.AddHook(reloadHook{c}) })
	return c
}

// reloadHook asks the cluster client for a new slot map when a command on a
// node client fails because the node is unreachable. The cluster client runs
// one reload (one CLUSTER SLOTS) at a time, pauses 200 ms after each, and
// coalesces the requests made meanwhile into one more: a dead node costs at
// most a few reloads a second, however many commands fail on it.
type reloadHook struct{ c *redis.ClusterClient }

func (h reloadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadHook) check(ctx context.Context, err error) {
	if unreachable(err) {
		h.c.ReloadState(ctx)
	}
}

// unreachable reports whether err says the node could not be dialled (also
// when the pool returns its last dial error without dialling again).
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// WithMasters returns seeds with the masters of the cluster put first, as
// the first seed that answers CLUSTER SLOTS names them (seeds alone if none
// answers). It asks over a connection of its own, closed at once: a client
// that refuses connections to replicas (failover.Seller.OnConnect) could
// not read the slot map from a seed list of replicas alone (one node named,
// which a failover has made a replica since), and go-redis reads it from
// the seeds until it has read it once. A master on a loopback address
// reached through a seed that is not is named by the seed's host, as
// go-redis does.
func WithMasters(ctx context.Context, seeds []string) []string {
	for _, seed := range seeds {
		c := redis.NewClient(&redis.Options{Addr: seed, DisableIdentity: true, DialerRetries: 1,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
		slots, err := c.ClusterSlots(ctx).Result()
		_ = c.Close()
		if err != nil {
			continue
		}
		seedHost, _, _ := net.SplitHostPort(seed)
		var out []string
		for _, r := range slots {
			if len(r.Nodes) == 0 {
				continue
			}
			addr := r.Nodes[0].Addr
			if host, port, err := net.SplitHostPort(addr); err == nil && isLoopback(host) && !isLoopback(seedHost) {
				addr = net.JoinHostPort(seedHost, port)
			}
			if !slices.Contains(out, addr) {
				out = append(out, addr)
			}
		}
		for _, s := range seeds {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	return seeds
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
