package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
)

var (
	//go:embed buy.lua
	buySrc string
	//go:embed cancel.lua
	cancelSrc string
	//go:embed restock.lua
	restockSrc string
	//go:embed create.lua
	createSrc string
	//go:embed discard.lua
	discardSrc string
	//go:embed pause.lua
	pauseSrc string
	//go:embed initlock.lua
	initLockSrc string
	//go:embed stage.lua
	stageSrc string
	//go:embed commit.lua
	commitSrc string
	//go:embed unlock.lua
	unlockSrc string
	//go:embed repair.lua
	repairSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed move.lua
	moveSrc string
	//go:embed pay.lua
	paySrc string
	//go:embed expire.lua
	expireSrc string
	//go:embed int.lua
	intSrc string
	//go:embed settled.lua
	settledSrc string
	//go:embed order.lua
	orderSrc string

	buyScript      = luascript.New("buy", gcra.ClockLua+"\n"+gcra.TakeLua+"\n"+intSrc+"\n"+orderSrc+"\n"+buySrc)
	cancelScript   = luascript.New("cancel", intSrc+"\n"+orderSrc+"\n"+cancelSrc)
	restockScript  = luascript.New("restock", gcra.ClockLua+"\n"+intSrc+"\n"+restockSrc)
	createScript   = luascript.New("create", createSrc)
	discardScript  = luascript.New("discard", discardSrc)
	pauseScript    = luascript.New("pause", pauseSrc)
	initLockScript = luascript.New("initlock", initLockSrc)
	stageScript    = luascript.New("stage", stageSrc)
	commitScript   = luascript.New("commit", gcra.ClockLua+"\n"+settledSrc+"\n"+commitSrc)
	unlockScript   = luascript.New("unlock", unlockSrc)
	repairScript   = luascript.New("repair", gcra.ClockLua+"\n"+settledSrc+"\n"+repairSrc)
	fenceScript    = luascript.New("fence", fenceSrc)
	moveScript     = luascript.New("move", intSrc+"\n"+moveSrc)
	payScript      = luascript.New("pay", gcra.ClockLua+"\n"+intSrc+"\n"+orderSrc+"\n"+paySrc)
	expireScript   = luascript.New("expire", gcra.ClockLua+"\n"+intSrc+"\n"+orderSrc+"\n"+expireSrc)

	allScripts = []*luascript.Script{buyScript, cancelScript, restockScript, createScript, discardScript,
		pauseScript, initLockScript, stageScript, commitScript, unlockScript, repairScript, fenceScript, moveScript,
		payScript, expireScript, closeScript, archiveScript}
)

// scriptRunner runs scripts on a client and counts NOSCRIPT reloads.
type scriptRunner struct {
	rdb        Client
	evalAlways bool // send the source every time (Options.EvalEveryCall)
	reloads    atomic.Int64
}

// run executes s by SHA, falling back to the full source on NOSCRIPT. A
// NOSCRIPT reply means the script did not run, so sending it again is safe.
func (r *scriptRunner) run(ctx context.Context, s *luascript.Script, keys []string, args ...any) ([]any, error) {
	if r.evalAlways {
		res, err := r.rdb.Eval(ctx, s.Src, keys, args...).Result()
		if err != nil {
			return nil, scriptErr(s, err)
		}
		return asReply(s, res)
	}
	res, reloaded, err := luascript.Run(ctx, r.rdb, s, keys, args...)
	if reloaded {
		r.reloads.Add(1)
	}
	if err != nil {
		return nil, scriptErr(s, err)
	}
	return asReply(s, res)
}

// scriptErr wraps an error from running s. A key holding the wrong type
// (WRONGTYPE) means Redis holds something the engine did not write: that is
// ErrCorrupt. Scripts touch such a key in their checks or as their first
// write, so the failing call wrote nothing.
func scriptErr(s *luascript.Script, err error) error {
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %s script: %v", ErrCorrupt, s.Name, err)
	}
	return fmt.Errorf("seckill: %s script: %w", s.Name, err)
}

// call is one script invocation of a pipeline.
type call struct {
	s    *luascript.Script
	keys []string
	args []any
}

// callResult is the reply to one call of a pipeline.
type callResult struct {
	reply []any
	err   error
}

// runPipelined sends every call in one pipeline by SHA, then sends the full
// source of just the calls whose node answered NOSCRIPT, in a second
// pipeline. Results are in the order of calls.
func (r *scriptRunner) runPipelined(ctx context.Context, calls []call) []callResult {
	out := make([]callResult, len(calls))
	if len(calls) == 0 {
		return out
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if r.evalAlways {
			cmds[i] = pipe.Eval(ctx, c.s.Src, c.keys, c.args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, c.s.SHA, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below

	var again []int
	for i, cmd := range cmds {
		if luascript.IsNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		r.reloads.Add(int64(len(again)))
		pipe = r.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = pipe.Eval(ctx, calls[i].s.Src, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		res, err := cmd.Result()
		if err != nil {
			out[i].err = scriptErr(calls[i].s, err)
			continue
		}
		out[i].reply, out[i].err = asReply(calls[i].s, res)
	}
	return out
}

// load puts every script in the script cache of every node the client
// reaches (each master of a cluster), so the first calls do not pay for a
// NOSCRIPT round trip. Calling it is optional.
func (r *scriptRunner) load(ctx context.Context) error {
	loadOn := func(ctx context.Context, c Client) error {
		for _, s := range allScripts {
			if err := c.ScriptLoad(ctx, s.Src).Err(); err != nil {
				return fmt.Errorf("seckill: load %s script: %w", s.Name, err)
			}
		}
		return nil
	}
	if cc, ok := r.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return loadOn(ctx, node)
		})
	}
	return loadOn(ctx, r.rdb)
}

// asReply checks the shape every script reply has: a non-empty array whose
// first element is the integer outcome code.
func asReply(s *luascript.Script, res any) ([]any, error) {
	reply, ok := res.([]any)
	if !ok || len(reply) == 0 {
		return nil, fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, res)
	}
	if _, ok := reply[0].(int64); !ok {
		return nil, fmt.Errorf("%w: %s script replied %v", ErrCorrupt, s.Name, res)
	}
	return reply, nil
}
