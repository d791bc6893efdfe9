package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/clusterclient"
	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/service"
)

// own is what the demo makes on servers it was given, and removes at its
// end: its Redis keys, under a key prefix of its own, and its tables, in
// a PostgreSQL schema of its own. Both are named name.
type own struct {
	name  string
	redis func() redis.UniversalClient // nil: the embedded server, gone with the process
	pgURL string                       // "": not PostgreSQL (an SQLite file is the caller's)
}

// takeOwn points cfg at a key prefix and, on PostgreSQL, a schema of the
// demo's own, "seckill_demo_" and 10 random letters and digits. The
// schema is set as the URL's search_path, not as cfg.DatabaseSchema: a
// schema the URL names never takes in another release's tables from
// "public" (store.OpenSchema), which the demo would then drop.
func takeOwn(cfg *service.Config) (*own, error) {
	o := &own{name: "seckill_demo_" + randomName(10)}
	cfg.KeyPrefix = o.name
	switch {
	case len(cfg.RedisClusterAddrs) > 0:
		addrs := cfg.RedisClusterAddrs
		o.redis = func() redis.UniversalClient { return clusterclient.New(&redis.ClusterOptions{Addrs: addrs}) }
	case cfg.RedisURL != "":
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("bad redis url: %w", err)
		}
		o.redis = func() redis.UniversalClient { return redis.NewClient(opts) }
	}
	if strings.HasPrefix(cfg.DatabaseURL, "postgres://") || strings.HasPrefix(cfg.DatabaseURL, "postgresql://") {
		u, err := url.Parse(cfg.DatabaseURL)
		if err != nil {
			return nil, errors.New("bad database url: want postgres://user:password@host:port/db?options")
		}
		q := u.Query()
		q.Del("search_path")
		u.RawQuery = q.Encode()
		o.pgURL = u.String()
		q.Set("search_path", o.name)
		u.RawQuery = q.Encode()
		cfg.DatabaseURL, cfg.DatabaseSchema = u.String(), ""
	}
	return o, nil
}

// remove deletes the demo's keys and drops its schema, even if ctx is
// cancelled (a Ctrl-C), within a minute.
func (o *own) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	if o.redis != nil {
		c := o.redis()
		if _, err := keyspace.Delete(ctx, c, o.name); err != nil {
			errs = append(errs, fmt.Errorf("delete the keys of prefix %s: %w", o.name, err))
		}
		c.Close()
	}
	if o.pgURL != "" {
		conn, err := pgx.Connect(ctx, o.pgURL)
		if err == nil {
			// The name is ours (letters, digits and _): safe to splice in.
			_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+o.name+" CASCADE")
			conn.Close(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", o.name, err))
		}
	}
	return errors.Join(errs...)
}

func randomName(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
