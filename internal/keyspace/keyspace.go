// Package keyspace removes every Redis key of one key prefix: what a
// deployment, a demo or a test wrote under a prefix of its own.
//
// Every key seckill writes carries its prefix in a hash tag that opens
// with "{<prefix>:" (the engine's "{<prefix>:<sale>}:...", the rate
// limiter's "{<prefix>:rl:<key>}", the lock's "{<prefix>:<name>}:lock").
package keyspace

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Pattern is the SCAN MATCH pattern of every key that carries prefix.
// The prefix is taken as it is: a prefix holding *, ?, [ or \ matches
// more than its own keys.
func Pattern(prefix string) string { return "*{" + prefix + ":*" }

// Delete unlinks every key that carries prefix, found with SCAN (never
// KEYS), on every master of a cluster, and returns how many it removed.
func Delete(ctx context.Context, c redis.UniversalClient, prefix string) (int64, error) {
	pattern := Pattern(prefix)
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return scanUnlink(ctx, c, pattern)
	}
	var n atomic.Int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		k, err := scanUnlink(ctx, node, pattern)
		n.Add(k)
		return err
	})
	return n.Load(), err
}

// scanUnlink walks one server's keyspace with SCAN and unlinks the matches
// batch by batch. Each key gets its own UNLINK (pipelined): keys of
// different sales live in different cluster slots, and a multi-key UNLINK
// across slots would fail with CROSSSLOT.
func scanUnlink(ctx context.Context, c redis.Cmdable, pattern string) (int64, error) {
	var cursor uint64
	var n int64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			})
			for _, cmd := range cmds {
				n += cmd.(*redis.IntCmd).Val()
			}
			if err != nil {
				return n, err
			}
		}
		if next == 0 {
			return n, nil
		}
		cursor = next
	}
}
