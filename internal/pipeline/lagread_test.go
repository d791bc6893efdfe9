package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/pipeline"
)

// xranges records the XRANGE commands a client sends and the entries each
// read.
type xranges struct {
	mu   sync.Mutex
	args [][]any
	read []int
}

func (h *xranges) note(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if c.Name() == "xrange" {
			h.args = append(h.args, c.Args())
			msgs, _ := c.(*redis.XMessageSliceCmd).Result()
			h.read = append(h.read, len(msgs))
		}
	}
}

func (h *xranges) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *xranges) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(cmd)
		return err
	}
}
func (h *xranges) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.note(cmds...)
		return err
	}
}

// TestLagUnknownReadsABoundedPart (Redis): where Redis cannot tell the
// group's lag (an entry deleted past its position, as a rebuild's floor
// does) and the database is behind (an outage: nothing is delivered), the
// backlog's count of the undelivered entries reads a bounded part of the
// stream, not all of it at every look of the live view, and says it is a
// lower bound.
func TestLagUnknownReadsABoundedPart(t *testing.T) {
	forEachStack(t, func(t *testing.T, r *rig) {
		if strings.Contains(t.Name(), "miniredis") {
			t.Skip("the embedded server always tells the lag")
		}
		defer pipeline.SetLagRead(4)()
		key := r.eng.EventsKey("s1")
		if err := r.rdb.XGroupCreateMkStream(r.ctx, key, pipeline.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		r.sale(0)
		r.buyMany(20, 0, 2) // created, then 10 entries of 2 orders
		msgs, _ := r.rdb.XRange(r.ctx, key, "-", "+").Result()
		if err := r.rdb.XDel(r.ctx, key, msgs[1].ID).Err(); err != nil {
			t.Fatal(err)
		}
		if gs, _ := r.rdb.XInfoGroups(r.ctx, key).Result(); len(gs) != 1 || gs[0].Lag != -1 {
			t.Fatalf("groups %+v: want a lag Redis cannot tell", gs)
		}
		h := &xranges{}
		c := redis.NewClient(&redis.Options{Addr: r.rdb.(*redis.Client).Options().Addr})
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(h)
		lag, err := pipeline.ReadLag(r.ctx, c, r.eng, "s1")
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range h.args {
			if h.read[i] > 5 {
				t.Errorf("%v read %d entries: want at most 5", a, h.read[i])
			}
		}
		if lag.Entries != 4 || !lag.AtLeast || lag.Oldest.IsZero() {
			t.Fatalf("lag %+v: want at least 4 entries (10 undelivered, 4 counted)", lag)
		}
		// Under the bound, the count is exact.
		defer pipeline.SetLagRead(100)()
		lag, err = pipeline.ReadLag(r.ctx, c, r.eng, "s1")
		if err != nil || lag.Entries != 10 || lag.AtLeast {
			t.Fatalf("lag %+v (%v): want exactly 10 entries", lag, err)
		}
	})
}
