// Package redistest provides Redis fixtures for tests: a client for the
// machine's shared Redis, in-process miniredis, per-test key prefixes that are
// cleaned up afterwards, and throwaway redis-server processes (standalone or
// a real Redis Cluster) that tests may kill and restart.
//
// It is meant to be imported from _test.go files only. The process fixtures
// need redis-server (and redis-cli for clusters) on PATH.
package redistest

import (
	"context"
	"crypto/rand"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
)

// DefaultURL is the shared Redis used by Standalone unless
// SECKILL_TEST_REDIS_URL is set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URLEnv names the environment variable that overrides DefaultURL.
const URLEnv = "SECKILL_TEST_REDIS_URL"

// URL is the machine's Redis the tests use: $SECKILL_TEST_REDIS_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return DefaultURL
}

// Standalone returns a go-redis client for the machine's shared Redis:
// $SECKILL_TEST_REDIS_URL if set (redis://host:port/db), else DefaultURL.
// It pings the server and calls tb.Fatalf with a one-line reason if that fails
// (it never skips). The client is closed in tb.Cleanup.
//
// The shared Redis is shared with other tests and packages running in
// parallel: use Prefix for every key.
func Standalone(tb testing.TB) *redis.Client {
	tb.Helper()
	url := URL()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("redistest: cannot parse Redis URL %q (from $%s or default): %v", url, URLEnv, err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		tb.Fatalf("redistest: shared Redis %s does not answer PING: %v (start it, or point $%s elsewhere)", url, err, URLEnv)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Mini starts an in-process miniredis (miniredis.RunT) and returns a client
// for it. Both are closed in tb.Cleanup.
func Mini(tb testing.TB) (*redis.Client, *miniredis.Miniredis) {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c, m
}

// Prefix returns a key prefix unique to this test: "t" followed by 10 random
// lowercase letters and digits. Keys are expected to look like
// "{<prefix>:<sale>}:stock".
//
// It registers a tb.Cleanup that deletes every key containing
// "{"+prefix+":" from c, using SCAN MATCH and UNLINK (never KEYS); on a
// *redis.ClusterClient it scans every master. Cleanup failures are logged, not
// fatal: they happen when a fault test leaves a node down, and the keys cannot
// collide with anything else anyway.
//
// c must still be open when the test's cleanups run: close it with a
// tb.Cleanup registered before calling Prefix (Standalone and Mini do), not
// with defer.
func Prefix(tb testing.TB, c redis.UniversalClient) string {
	tb.Helper()
	p := newPrefix()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := deletePrefixed(ctx, c, p); err != nil {
			tb.Logf("redistest: cleanup of keys with prefix %q: %v", p, err)
		}
	})
	return p
}

func newPrefix() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "t" + string(b)
}

// deletePrefixed unlinks every key containing "{"+prefix+":" and returns how
// many keys it removed (keyspace.Delete).
func deletePrefixed(ctx context.Context, c redis.UniversalClient, prefix string) (int64, error) {
	return keyspace.Delete(ctx, c, prefix)
}

// DropOrder removes order id's record from a sale's orders hash (key), as a
// Redis that lost the write would: its line of its group's value (group:
// inventory.OrderGroup(id), which this package cannot import), which names
// the order by what id has after group ("<tail>|<record>") or by id, or the
// group's field when that was its only line. It fails the test unless the
// group holds exactly one record of the order.
func DropOrder(ctx context.Context, tb testing.TB, rdb redis.UniversalClient, key, group, id string) {
	tb.Helper()
	v, err := rdb.HGet(ctx, key, group).Result()
	if err != nil {
		tb.Fatalf("redistest: the group of order %s: %v", id, err)
	}
	lines := strings.Split(v, "\n")
	tail, _ := strings.CutPrefix(id, group)
	keep := slices.DeleteFunc(slices.Clone(lines), func(l string) bool {
		return strings.HasPrefix(l, tail+"|") || strings.HasPrefix(l, id+"|")
	})
	if len(keep) != len(lines)-1 {
		tb.Fatalf("redistest: order %s has %d records in its group %q", id, len(lines)-len(keep), v)
	}
	if len(keep) == 0 {
		err = rdb.HDel(ctx, key, group).Err()
	} else {
		err = rdb.HSet(ctx, key, group, strings.Join(keep, "\n")).Err()
	}
	if err != nil {
		tb.Fatalf("redistest: drop order %s: %v", id, err)
	}
}
