package inventory_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/redistest"
)

// TestLinearizableManySalesPipelined records several random histories AT
// ONCE, each of its own sale, on ONE engine, so that the sales' calls meet
// in cross-sale pipelines (Coalesce.Pipelines 1, MaxBatch 2: several calls
// of one sale in one pipeline too), and checks each (linearizability is
// per object: each sale on its own). A hook cuts pipelines short and loses
// replies as a connection broken mid-pipeline would: of some pipelines
// only a prefix of the calls reaches Redis (the rest never run), and of
// the calls that ran some replies are lost; lone calls lose replies too.
// Impatient clients give up mid-call (their buys queue, go, or are dropped
// before their pipeline). Every history must be linearizable once the
// journal settles the calls of unknown outcome.
//
// go test -run TestLinearizableManySalesPipelined -lin.histories=200 ./inventory/
func TestLinearizableManySalesPipelined(t *testing.T) {
	rounds := *linHistories / 6
	if rounds <= 0 {
		rounds = 3
	}
	srv := redistest.StartServer(t)
	for _, v := range []struct {
		name string
		opts inventory.Options
	}{
		{"one pipeline", inventory.Options{Coalesce: inventory.Coalesce{Pipelines: 1, MaxBatch: 2}}},
		{"defaults", inventory.Options{}},
	} {
		t.Run(v.name, func(t *testing.T) {
			cut := &pipelineCutter{buy: inventory.ScriptSHA("buy"), percent: 15}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			rdb.AddHook(cut)
			journal := srv.Client(t)
			seed := uint64(time.Now().UnixNano())
			var calls, unknown int
			for round := range rounds {
				opts := v.opts
				opts.Prefix = "linp"
				eng := inventory.New(rdb, opts)
				const sales = 6
				runs := make([]*linRun, sales)
				histories := make([][]porcupine.Operation, sales)
				for i := range runs {
					sale := fmt.Sprintf("%s-%d-%d-%d", map[bool]string{true: "one", false: "def"}[v.opts.Coalesce.Pipelines == 1], seed, round, i)
					linCreate(t, eng, sale)
					runs[i] = &linRun{t: t, eng: eng, sale: sale, mix: linMix{resends: true}, timeout: 5 * time.Second,
						impatient: 1, impatientTimeout: time.Duration(1+i%3) * time.Millisecond}
				}
				var wg sync.WaitGroup
				for i, r := range runs {
					wg.Go(func() { histories[i] = r.record(4, 15, seed+uint64(round*sales+i)) })
				}
				wg.Wait()
				for i, r := range runs {
					settled, _, _ := linSettle(t, journal, eng, r.sale, histories[i])
					calls, unknown = calls+len(histories[i]), unknown+r.unknown
					if res := porcupine.CheckOperationsTimeout(linModel, settled, linCheckTime); res != porcupine.Ok || t.Failed() {
						linSummary(t, r, histories[i])
						for _, op := range linSorted(settled) {
							t.Logf("  client %d [%d..%d] %s", op.ClientId, op.Call, op.Return, linModel.DescribeOperation(op.Input, op.Output))
						}
						linCheck(t, v.name, settled)
						t.Fatalf("round %d sale %s (seed %d): %s, or the journal disagrees (above)", round, r.sale, seed, res)
					}
				}
			}
			t.Logf("%d rounds of 6 sales at once, %d calls (%d unknown outcome); %d pipelines with buys, %d cut short, %d replies lost: all linearizable",
				rounds, calls, unknown, cut.pipelines.Load(), cut.cut.Load(), cut.lost.Load())
			if cut.pipelines.Load() == 0 {
				t.Error("no buys went through a pipeline: the check did not exercise the pipelined path")
			}
		})
	}
}

// pipelineCutter breaks buy calls the way a connection broken at some point
// does: of a pipeline, only a prefix reaches Redis (the rest fail unsent),
// and of what ran some replies are lost; of a lone call, the reply.
type pipelineCutter struct {
	buy                  string // buy.lua's SHA
	percent              int
	pipelines, cut, lost atomic.Int64
}

func (c *pipelineCutter) isBuy(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && (cmd.Name() == "evalsha" && fmt.Sprint(args[1]) == c.buy || cmd.Name() == "eval")
}

func (c *pipelineCutter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *pipelineCutter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !c.isBuy(cmd) || rand.IntN(100) >= c.percent {
			return err
		}
		c.lost.Add(1)
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

func (c *pipelineCutter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		buys := 0
		for _, cmd := range cmds {
			if c.isBuy(cmd) {
				buys++
			}
		}
		if buys == 0 {
			return next(ctx, cmds)
		}
		c.pipelines.Add(1)
		sent := cmds
		if rand.IntN(100) < c.percent {
			c.cut.Add(1)
			sent = cmds[:rand.IntN(len(cmds))]
			for _, cmd := range cmds[len(sent):] {
				cmd.SetErr(io.ErrUnexpectedEOF)
			}
		}
		var err error
		if len(sent) > 0 {
			err = next(ctx, sent)
		}
		for _, cmd := range sent {
			if cmd.Err() == nil && c.isBuy(cmd) && rand.IntN(100) < c.percent {
				c.lost.Add(1)
				cmd.SetErr(io.ErrUnexpectedEOF)
			}
		}
		if len(sent) < len(cmds) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
}
