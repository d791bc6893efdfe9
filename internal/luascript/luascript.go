// Package luascript runs embedded Lua scripts on Redis by their SHA1
// (EVALSHA), sending the source (EVAL, which also caches it on that node)
// only when the node answers NOSCRIPT: after SCRIPT FLUSH, a restart, a
// failover to a replica that never saw the script, or on a cluster node
// that has not run it yet. A NOSCRIPT reply means the script did not run,
// so sending it again is safe.
package luascript

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Script is one Lua script and its SHA1.
type Script struct {
	Name, Src, SHA string
}

// New returns the script named name (for error messages) with source src.
func New(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{Name: name, Src: src, SHA: hex.EncodeToString(sum[:])}
}

// Run executes s by SHA and, if the node answers NOSCRIPT, by its source;
// reloaded reports that it had to. Errors are Redis's, unwrapped, so a
// caller can tell a reply from a transport failure.
func Run(ctx context.Context, c redis.Scripter, s *Script, keys []string, args ...any) (res any, reloaded bool, err error) {
	res, err = c.EvalSha(ctx, s.SHA, keys, args...).Result()
	if IsNoScript(err) {
		res, err = c.Eval(ctx, s.Src, keys, args...).Result()
		return res, true, err
	}
	return res, false, err
}

// IsNoScript reports whether err is a node's NOSCRIPT answer.
func IsNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
