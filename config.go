package seckill

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/service"
)

// Config says where a System keeps its data and how it runs. The zero
// Config runs on the embedded defaults: an in-process Redis stand-in and an
// SQLite file seckill.db in the working directory, fine for trying it, not
// for production (they are logged as such).
type Config struct {
	// Redis is the Redis the inventory lives in: a *redis.Client (single
	// node or Sentinel's failover client) or a *redis.ClusterClient.
	// seckill opens connections of its own with a copy of the client's
	// options (so its hooks, pools and push-notification handlers never
	// touch the client), and never closes the client. Nil: RedisURL, then
	// RedisClusterAddrs, then the embedded stand-in.
	Redis redis.UniversalClient
	// RedisURL is redis://[user:password@]host:port/db, used when Redis is nil.
	RedisURL string
	// RedisClusterAddrs are host:port seeds of a Redis Cluster, used when
	// Redis and RedisURL are not set.
	RedisClusterAddrs []string
	// KeyPrefix starts every Redis key (several deployments can share one
	// Redis); default "seckill". It namespaces Redis only: the database
	// belongs to the prefix of the first System (or `seckill serve`) that
	// starts on it, and Open refuses another prefix on it, which would sell
	// each of its sales once more. Deployments sharing a PostgreSQL database
	// each take their own DatabaseSchema.
	KeyPrefix string

	// DatabaseURL is the system of record: postgres://... (or
	// postgresql://), or sqlite://PATH; empty: the SQLite file seckill.db in
	// the working directory.
	DatabaseURL string
	// DatabaseSchema is the PostgreSQL schema of seckill's tables (created
	// if missing); empty: the URL's search_path if it sets one, else
	// "seckill". A schema belongs to one KeyPrefix.
	DatabaseSchema string

	// Addr is where the HTTP API listens ("127.0.0.1:8080"; ":0" picks a
	// free port). Empty: nothing listens, and System.Handler serves the API
	// wherever the program mounts it.
	Addr string
	// HTTPServer is the server Addr runs: "net/http" (the default) or
	// "fasthttp" (the buy served natively by fasthttp, the rest through
	// net/http's handler; what `seckill serve` runs).
	HTTPServer string
	// AdminToken is the operators' bearer token and JWTSecret the HS256
	// secret of buyers' tokens, for the HTTP API; empty: generated at Open
	// and logged once (to Logger: set them when the logs are discarded).
	AdminToken, JWTSecret string
	// RateLimitUser, RateLimitIP and RateLimitSale limit buys per buyer,
	// per client address and per sale: "5/s,burst=10", "100/m", "off".
	// Defaults: "5/s,burst=10" per buyer, off per address and per sale. A
	// sale's own RateLimits take precedence.
	RateLimitUser, RateLimitIP, RateLimitSale string
	// TrustedProxies are addresses or CIDR prefixes of proxies whose
	// X-Forwarded-For is believed when finding a client's address.
	TrustedProxies []string
	// LiveStreamsPerClient and LiveStreams cap the live view's event
	// streams (GET /v1/live) per client and in all; defaults 4 and 256.
	LiveStreamsPerClient, LiveStreams int

	// Instances is how many Systems share the rate limits: while Redis
	// cannot be asked, each enforces its share. Default 1.
	Instances int
	// ReconcileEvery is how often a reconciliation pass runs (default 30s);
	// ArchiveEvery how often ended sales that are all in the database leave
	// Redis (default 2s). Negative turns either off.
	ReconcileEvery, ArchiveEvery time.Duration
	// DegradedGrace is how long no System may reach Redis before the
	// database sells, and how long Redis must answer again before it sells
	// again (default 3s). Negative turns degraded mode off for this System.
	DegradedGrace time.Duration

	// Logger receives the System's logs; nil discards them.
	Logger *slog.Logger
}

// internal is the service's configuration for c.
func (c Config) internal() (service.Config, error) {
	sc := service.Config{
		Addr:                 c.Addr,
		NoListener:           c.Addr == "",
		RedisURL:             c.RedisURL,
		RedisClusterAddrs:    c.RedisClusterAddrs,
		KeyPrefix:            c.KeyPrefix,
		DatabaseURL:          c.DatabaseURL,
		DatabaseSchema:       c.DatabaseSchema,
		HTTPServer:           c.HTTPServer,
		AdminToken:           c.AdminToken,
		JWTSecret:            c.JWTSecret,
		RateLimitUser:        c.RateLimitUser,
		RateLimitIP:          c.RateLimitIP,
		RateLimitSale:        c.RateLimitSale,
		TrustedProxies:       c.TrustedProxies,
		LiveStreamsPerClient: c.LiveStreamsPerClient,
		LiveStreams:          c.LiveStreams,
		Instances:            c.Instances,
		ReconcileEvery:       c.ReconcileEvery,
		ArchiveEvery:         c.ArchiveEvery,
		DegradedGrace:        c.DegradedGrace,
		Logger:               c.Logger,
	}
	if c.DegradedGrace < 0 {
		sc.DegradedGrace, sc.DegradedTick = 0, -1
	}
	switch rdb := c.Redis.(type) {
	case nil:
	case *redis.Client:
		sc.RedisOptions = rdb.Options()
	case *redis.ClusterClient:
		sc.RedisClusterOptions = rdb.Options()
	default:
		return sc, fmt.Errorf("seckill: Config.Redis: a %T is not supported (want a *redis.Client or a *redis.ClusterClient)", c.Redis)
	}
	return sc, nil
}
