package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/service"
	"github.com/seckill/seckill/internal/store"
)

// The flags of each command are only those it uses: serve's are
// configFlags, logFlags and the loop periods below; demo's storeFlags (no schema: it makes its own)
// and logFlags; reconcile's storeFlags and keyPrefixFlag. Each defaults
// to its environment variable: a flag wins over the environment.

// stores are the --redis, --redis-cluster, --db and --db-schema flags.
type stores struct {
	redis, cluster, db, schema *string
}

// storeFlags defines where the service's state lives: its Redis (--redis,
// --redis-cluster) and its database (--db, and --db-schema if withSchema).
func storeFlags(fs *flag.FlagSet, getenv func(string) string, withSchema bool) *stores {
	env := func(k, def string) string { return orEnv(getenv, k, def) }
	s := &stores{schema: new(string)}
	s.redis = fs.String("redis", env("SECKILL_REDIS_URL", ""), "Redis URL redis://[user:pass@]host:port/db (env SECKILL_REDIS_URL); unset: embedded in-process server")
	s.cluster = fs.String("redis-cluster", env("SECKILL_REDIS_CLUSTER_ADDRS", ""), "comma-separated host:port seeds of a Redis Cluster (env SECKILL_REDIS_CLUSTER_ADDRS)")
	s.db = fs.String("db", env("SECKILL_DATABASE_URL", ""), "database URL postgres://... or sqlite://PATH (env SECKILL_DATABASE_URL); unset: SQLite file seckill.db")
	if withSchema {
		s.schema = fs.String("db-schema", env("SECKILL_DB_SCHEMA", ""),
			"PostgreSQL schema of seckill's tables, created if missing (env SECKILL_DB_SCHEMA); unset: the URL's search_path if it sets one, else "+store.DefaultSchema)
	}
	return s
}

// set copies the flags into cfg.
func (s *stores) set(cfg *service.Config) {
	cfg.RedisURL, cfg.RedisClusterAddrs, cfg.DatabaseURL, cfg.DatabaseSchema = *s.redis, list(*s.cluster), *s.db, *s.schema
}

// keyPrefixFlag defines --key-prefix.
func keyPrefixFlag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("key-prefix", orEnv(getenv, "SECKILL_KEY_PREFIX", "seckill"), "prefix of every Redis key (env SECKILL_KEY_PREFIX)")
}

// configFlags defines serve's flags of the contract and seckill's own
// (storeFlags with the schema, keyPrefixFlag and the rest); the returned
// function reads them into a seckill.Config once fs is parsed; its errors
// are one line each.
func configFlags(fs *flag.FlagSet, getenv func(string) string) func() (seckill.Config, error) {
	env := func(k, def string) string { return orEnv(getenv, k, def) }
	where := storeFlags(fs, getenv, true)
	prefix := keyPrefixFlag(fs, getenv)
	addr := fs.String("addr", env("SECKILL_ADDR", "127.0.0.1:8080"), "listen address (env SECKILL_ADDR)")
	admin := fs.String("admin-token", env("SECKILL_ADMIN_TOKEN", ""), "bearer token for /v1/admin/* (env SECKILL_ADMIN_TOKEN); unset: generated")
	jwt := fs.String("jwt-secret", env("SECKILL_JWT_SECRET", ""), "HS256 secret of buyers' tokens (env SECKILL_JWT_SECRET); unset: generated")
	rateUser := fs.String("rate-limit-user", env("SECKILL_RATE_LIMIT_USER", service.DefaultRateLimitUser),
		"each buyer's limit on buys and on purchase tokens, like 5/s,burst=10, or off (env SECKILL_RATE_LIMIT_USER)")
	rateIP := fs.String("rate-limit-ip", env("SECKILL_RATE_LIMIT_IP", "off"),
		"each client address's limit on buys and purchase tokens, or off (env SECKILL_RATE_LIMIT_IP)")
	rateSale := fs.String("rate-limit-sale", env("SECKILL_RATE_LIMIT_SALE", "off"),
		"each sale's limit on buys, all buyers together, or off (env SECKILL_RATE_LIMIT_SALE)")
	proxies := fs.String("trusted-proxies", env("SECKILL_TRUSTED_PROXIES", ""),
		"comma-separated addresses or CIDR prefixes of proxies whose X-Forwarded-For is believed (env SECKILL_TRUSTED_PROXIES)")
	instances := fs.String("instances", env("SECKILL_INSTANCES", "1"),
		"how many instances share the rate limits; each enforces its share while Redis is unreachable (env SECKILL_INSTANCES)")
	streamsPerClient := fs.String("live-streams-per-client", env("SECKILL_LIVE_STREAMS_PER_CLIENT", strconv.Itoa(service.DefaultLiveStreamsPerClient)),
		"how many live-view event streams (GET /v1/live) one client (an IPv4 address, an IPv6 /64) may hold open; past it 429 (env SECKILL_LIVE_STREAMS_PER_CLIENT)")
	streams := fs.String("live-streams", env("SECKILL_LIVE_STREAMS", strconv.Itoa(service.DefaultLiveStreams)),
		"how many live-view event streams this instance serves at once; past it 503 (env SECKILL_LIVE_STREAMS)")
	return func() (seckill.Config, error) {
		n, err := strconv.Atoi(*instances)
		if err != nil || n < 1 {
			return seckill.Config{}, fmt.Errorf("--instances must be a whole number of 1 or more, is %q", *instances)
		}
		perClient, err := strconv.Atoi(*streamsPerClient)
		if err != nil || perClient < 1 {
			return seckill.Config{}, fmt.Errorf("--live-streams-per-client must be a whole number of 1 or more, is %q", *streamsPerClient)
		}
		total, err := strconv.Atoi(*streams)
		if err != nil || total < 1 {
			return seckill.Config{}, fmt.Errorf("--live-streams must be a whole number of 1 or more, is %q", *streams)
		}
		return seckill.Config{Addr: *addr, KeyPrefix: *prefix, AdminToken: *admin, JWTSecret: *jwt,
			RateLimitUser: *rateUser, RateLimitIP: *rateIP, RateLimitSale: *rateSale, TrustedProxies: list(*proxies), Instances: n,
			LiveStreamsPerClient: perClient, LiveStreams: total,
			RedisURL: *where.redis, RedisClusterAddrs: list(*where.cluster), DatabaseURL: *where.db, DatabaseSchema: *where.schema}, nil
	}
}

// list splits a comma-separated flag, dropping blanks.
func list(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// reconcileFlag defines --reconcile-every, serve's; the returned function
// reads it, once fs is parsed, as seckill.Config.ReconcileEvery.
func reconcileFlag(fs *flag.FlagSet, getenv func(string) string) func() (time.Duration, error) {
	return durationFlag(fs, getenv, "reconcile-every", "SECKILL_RECONCILE_EVERY", "30s",
		"period of the reconciliation loop, which repairs drift two passes in a row find, like 30s or 5m; 0 turns it off", "turn the loop off")
}

// archiveFlag defines --archive-every, serve's; the returned function
// reads it, once fs is parsed, as seckill.Config.ArchiveEvery.
func archiveFlag(fs *flag.FlagSet, getenv func(string) string) func() (time.Duration, error) {
	return durationFlag(fs, getenv, "archive-every", "SECKILL_ARCHIVE_EVERY", "2s",
		"period of the archiver, which removes from Redis the keys of sales that have ended and are all in the database; 0 turns it off", "turn the archiver off")
}

// degradedFlag defines --degraded-grace, serve's; the returned function
// reads it, once fs is parsed, as seckill.Config.DegradedGrace.
func degradedFlag(fs *flag.FlagSet, getenv func(string) string) func() (time.Duration, error) {
	return durationFlag(fs, getenv, "degraded-grace", "SECKILL_DEGRADED_GRACE", "3s",
		"how long no instance may reach Redis before the database sells (degraded mode), and how long Redis must answer again before it sells again; 0 turns degraded mode off for this instance", "turn degraded mode off")
}

// durationFlag defines a duration flag whose 0 turns something off; the
// returned function reads it as a seckill.Config duration (-1 for off,
// as the config's zero means its default).
func durationFlag(fs *flag.FlagSet, getenv func(string) string, name, env, def, usage, zero string) func() (time.Duration, error) {
	v := fs.String(name, orEnv(getenv, env, def), usage+" (env "+env+")")
	return func() (time.Duration, error) {
		d, err := time.ParseDuration(*v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("--%s must be a duration like %s, or 0 to %s, is %q", name, def, zero, *v)
		}
		if d == 0 {
			return -1, nil
		}
		return d, nil
	}
}

// logFlags defines --log-format and --log-level; the returned function
// makes the logger once fs is parsed.
func logFlags(fs *flag.FlagSet, getenv func(string) string) func(w io.Writer) (*slog.Logger, error) {
	format := fs.String("log-format", orEnv(getenv, "SECKILL_LOG_FORMAT", "text"), "log format: text or json (env SECKILL_LOG_FORMAT)")
	level := fs.String("log-level", orEnv(getenv, "SECKILL_LOG_LEVEL", "info"),
		"least severe level logged: debug (a line per request), info, warn or error (env SECKILL_LOG_LEVEL)")
	return func(w io.Writer) (*slog.Logger, error) {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(*level)); err != nil {
			return nil, fmt.Errorf("--log-level must be debug, info, warn or error, is %q", *level)
		}
		opts := &slog.HandlerOptions{Level: lv}
		switch *format {
		case "text":
			return slog.New(slog.NewTextHandler(w, opts)), nil
		case "json":
			return slog.New(slog.NewJSONHandler(w, opts)), nil
		}
		return nil, fmt.Errorf("--log-format must be text or json, is %q", *format)
	}
}

func orEnv(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}
