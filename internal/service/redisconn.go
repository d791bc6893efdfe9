package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/failover"
)

// connectRedis makes the service's Redis clients: the API's pool, the
// background work's own, every connection checked by the failover seller
// (OnConnect, NodeHook); the embedded server when none is configured.
func (s *Service) connectRedis(ctx context.Context) error {
	if s.cfg.RedisOptions != nil && s.cfg.RedisClusterOptions != nil {
		return errors.New("redis: set RedisOptions or RedisClusterOptions, not both")
	}
	if (s.cfg.RedisOptions != nil || s.cfg.RedisClusterOptions != nil) && (s.cfg.RedisURL != "" || len(s.cfg.RedisClusterAddrs) > 0) {
		return errors.New("redis: set RedisOptions or RedisClusterOptions instead of a redis url or cluster addresses, not with them")
	}
	if !s.cfg.cluster() && s.cfg.RedisURL == "" && s.cfg.RedisOptions == nil {
		mini, stop, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		s.mini, s.miniStop = mini, stop
		s.log.Warn("using an embedded in-process Redis-compatible server (miniredis): not for production; its data lives as long as this process")
	}
	if s.cfg.cluster() {
		// The clients connect to masters only (failover.Seller.OnConnect):
		// seed them with the masters too.
		seeds := s.cfg.RedisClusterAddrs
		if o := s.cfg.RedisClusterOptions; o != nil {
			seeds = o.Addrs
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s.clusterSeeds = clusterclient.WithMasters(wctx, seeds)
		cancel()
	}
	var err error
	if s.rdb, err = s.newClient(clientAPI, 0); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(failover.AllowedToDial(ctx), 5*time.Second)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("cannot reach redis at %s: %w", s.redisName(), err)
	}
	s.consumer, _ = s.newClient(clientConsumer, s.consumerReaders())
	s.probe, _ = s.newClient(clientProbe, 1)
	return nil
}

// The names of the service's Redis connections (CLIENT LIST): the API's
// pool, which buys use, and the background work's own small ones, so that
// no background work ever takes a connection a buy waits for.
const (
	clientAPI      = "seckill-api"
	clientConsumer = "seckill-consumer" // Pipeline.Readers connections (per node)
	clientProbe    = "seckill-probe"    // one connection (per node)
)

func (s *Service) consumerReaders() int {
	if s.cfg.Pipeline.Readers <= 0 {
		return 2
	}
	return s.cfg.Pipeline.Readers
}

// newClient returns a client of the configured Redis whose connections are
// named name. With conns > 0 its pool holds exactly conns connections (per
// node, on a Cluster), which pipelines share; 0 is go-redis's default pool.
func (s *Service) newClient(name string, conns int) (redis.UniversalClient, error) {
	pool := func(size, maxActive, pipelines *int) {
		if conns > 0 {
			*size, *maxActive, *pipelines = conns, conns, -1
		}
	}
	switch {
	case s.cfg.cluster():
		// clusterclient: after a failover, finds the promoted replica (go-redis
		// alone keeps dialling the dead master until its next slot map reload).
		o := &redis.ClusterOptions{}
		if given := s.cfg.RedisClusterOptions; given != nil {
			*o = *given
		}
		o.Addrs, o.DisableIdentity, o.OnConnect, o.ClientName = s.clusterSeeds, true, s.onConnect(o.OnConnect), name
		o.PushNotificationProcessor = nil // the caller's, with its handlers (redisOptions)
		pool(&o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
		c := clusterclient.New(o)
		// Each node is checked again under connections already open: a
		// node's role can change under them (failover.Seller.NodeHook).
		c.OnNewNode(func(node *redis.Client) { node.AddHook(s.seller.NodeHook(node)) })
		return c, nil
	case s.cfg.RedisURL != "" || s.cfg.RedisOptions != nil:
		o, err := s.redisOptions()
		if err != nil {
			return nil, err
		}
		// No CLIENT SETINFO on connect: the least-privilege ACL user
		// (deploy/redis/seckill.acl) is not allowed it, and on Redis 7.2+
		// each connection would leave a denial in ACL LOG.
		o.DisableIdentity = true
		o.OnConnect = s.onConnect(o.OnConnect)
		o.ClientName = name
		pool(&o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
		c := redis.NewClient(o)
		c.AddHook(s.seller.NodeHook(c))
		return c, nil
	default:
		o := &redis.Options{Addr: s.mini.Addr(), ClientName: name}
		pool(&o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
		return redis.NewClient(o), nil
	}
}

// redisOptions are new options of the configured single Redis: a copy of
// Config.RedisOptions without a client-side cache (the service's scripts
// read nothing a cache would keep), or the URL's. A client's Options()
// also hold what go-redis made for that client: its push-notification
// processor, where the client registered its handlers (a client made on
// it registers them again, fails to, and logs "failed to initialize
// maintnotifications ... cannot overwrite existing handler"; and the
// caller's handlers would act on the service's connections), and the
// worker and queue sizes of its maintenance notifications, derived from
// its pools. The copy has neither: each client of the service makes its
// own processor, and derives the sizes from its own pools.
func (s *Service) redisOptions() (*redis.Options, error) {
	if given := s.cfg.RedisOptions; given != nil {
		o := *given
		o.ClientSideCacheConfig, o.ClientSideCache = nil, nil
		o.PushNotificationProcessor = nil
		if m := given.MaintNotificationsConfig; m != nil {
			own := *m
			own.MaxWorkers, own.HandoffQueueSize = 0, 0
			o.MaintNotificationsConfig = &own
		}
		return &o, nil
	}
	o, err := redis.ParseURL(s.cfg.RedisURL)
	if err != nil {
		// Not the parser's message: it quotes the URL, password and all.
		return nil, errors.New("bad redis url: want redis://[user:password@]host:port/db, special characters percent-encoded")
	}
	return o, nil
}

// onConnect is the check of every new connection of the service's clients
// (failover.Seller.OnConnect), followed by then, if not nil: the OnConnect
// of the options the service was given.
func (s *Service) onConnect(then func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	if then == nil {
		return s.seller.OnConnect
	}
	return func(ctx context.Context, cn *redis.Conn) error {
		if err := s.seller.OnConnect(ctx, cn); err != nil {
			return err
		}
		return then(ctx, cn)
	}
}

// cluster reports whether the configured Redis is a Redis Cluster.
func (c *Config) cluster() bool { return len(c.RedisClusterAddrs) > 0 || c.RedisClusterOptions != nil }

func (s *Service) redisName() string {
	switch {
	case s.cfg.RedisClusterOptions != nil:
		return "cluster " + fmt.Sprint(s.cfg.RedisClusterOptions.Addrs)
	case len(s.cfg.RedisClusterAddrs) > 0:
		return "cluster " + fmt.Sprint(s.cfg.RedisClusterAddrs)
	case s.cfg.RedisOptions != nil:
		return s.cfg.RedisOptions.Addr
	case s.cfg.RedisURL != "":
		if o, err := redis.ParseURL(s.cfg.RedisURL); err == nil {
			return o.Addr
		}
		return "?"
	}
	return "embedded"
}

// startEmbeddedRedis starts miniredis and lets its key expiry follow the
// wall clock (miniredis only expires keys when told time has passed).
func startEmbeddedRedis() (*miniredis.Miniredis, func(), error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, fmt.Errorf("start embedded redis: %w", err)
	}
	done := make(chan struct{})
	go func() {
		const step = 100 * time.Millisecond
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m.FastForward(step)
			}
		}
	}()
	return m, func() { close(done) }, nil
}
