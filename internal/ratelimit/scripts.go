package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
)

var (
	//go:embed fixed.lua
	fixedSrc string
	//go:embed sliding.lua
	slidingSrc string
	//go:embed gcra.lua
	gcraSrc string

	fixedScript   = luascript.New("fixed", ClockLua+"\n"+fixedSrc)
	slidingScript = luascript.New("sliding", ClockLua+"\n"+slidingSrc)
	gcraScript    = luascript.New("gcra", ClockLua+"\n"+GCRATakeLua+"\n"+gcraSrc)
)

// ClockLua is the Lua source of script_now (clock.lua, kept with the GCRA
// the inventory's buy script shares): the time a script decides by, the
// Redis server's clock unless the caller passes one (a test's). Prepend it
// to a script of the caller's own that reads the time.
var ClockLua = gcra.ClockLua

// GCRATakeLua is the Lua source of gcra_take (gcra_take.lua), the GCRA
// decision of every GCRA Limit and of the inventory's buy throttle, for a
// script of the caller's own that checks a Bucket in the same call as its
// work: prepend it to the script's source.
var GCRATakeLua = gcra.TakeLua

// scriptRunner runs scripts on a client and counts NOSCRIPT reloads.
type scriptRunner struct {
	rdb     Client
	reloads atomic.Int64
}

// run executes s by SHA, and by its source if the node answers NOSCRIPT. It
// returns Redis' error unwrapped, so the caller can tell a transport failure
// from a reply, and checks the shape every reply has: a non-empty array
// whose first element is the integer outcome code.
func (r *scriptRunner) run(ctx context.Context, s *luascript.Script, keys []string, args ...any) ([]int64, error) {
	res, reloaded, err := luascript.Run(ctx, r.rdb, s, keys, args...)
	if reloaded {
		r.reloads.Add(1)
	}
	if err != nil {
		return nil, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) == 0 {
		return nil, fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, res)
	}
	out := make([]int64, len(arr))
	for i, v := range arr {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, res)
		}
		out[i] = n
	}
	return out, nil
}

// unavailable reports whether err, from a Redis call made with ctx, means
// Redis could not be asked — the case a Fallback answers. That is any
// failure to get a reply (refused or reset connections, timeouts, a full
// pool) and the replies of a server that cannot serve right now (LOADING,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN). It is not any other reply (WRONGTYPE,
// OOM, a script error: Redis answered, and hiding that would hide a bug), a
// closed client, or ctx ending (the caller gave up; no answer is wanted).
func unavailable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrCorrupt) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return redis.IsLoadingError(err) || redis.IsMasterDownError(err) ||
			redis.IsClusterDownError(err) || redis.IsTryAgainError(err)
	}
	return true
}
