package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"

	"github.com/seckill/seckill/service"
)

// configFlags defines the contract's flags on fs, each defaulting to its
// environment variable: a flag wins over the environment.
func configFlags(fs *flag.FlagSet, getenv func(string) string) func() service.Config {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	addr := fs.String("addr", env("SECKILL_ADDR", "127.0.0.1:8080"), "listen address (env SECKILL_ADDR)")
	redisURL := fs.String("redis", env("SECKILL_REDIS_URL", ""), "Redis URL redis://[user:pass@]host:port/db (env SECKILL_REDIS_URL); unset: embedded in-process server")
	cluster := fs.String("redis-cluster", env("SECKILL_REDIS_CLUSTER_ADDRS", ""), "comma-separated host:port seeds of a Redis Cluster (env SECKILL_REDIS_CLUSTER_ADDRS)")
	db := fs.String("db", env("SECKILL_DATABASE_URL", ""), "database URL postgres://... or sqlite://PATH (env SECKILL_DATABASE_URL); unset: SQLite file seckill.db")
	admin := fs.String("admin-token", env("SECKILL_ADMIN_TOKEN", ""), "bearer token for /v1/admin/* (env SECKILL_ADMIN_TOKEN); unset: generated")
	jwt := fs.String("jwt-secret", env("SECKILL_JWT_SECRET", ""), "HS256 secret of buyers' tokens (env SECKILL_JWT_SECRET); unset: generated")
	prefix := fs.String("key-prefix", env("SECKILL_KEY_PREFIX", "seckill"), "prefix of every Redis key (env SECKILL_KEY_PREFIX)")
	return func() service.Config {
		var addrs []string
		for _, a := range strings.Split(*cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return service.Config{Addr: *addr, RedisURL: *redisURL, RedisClusterAddrs: addrs, DatabaseURL: *db,
			AdminToken: *admin, JWTSecret: *jwt, KeyPrefix: *prefix}
	}
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
