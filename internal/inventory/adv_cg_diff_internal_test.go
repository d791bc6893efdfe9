package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/luascript"
	"github.com/seckill/seckill/internal/redistest"
)

// Adversarial tests of the call group (cg) of buy.lua: a call's buys of
// group cg send their ids' tails only. The script must do exactly what it
// does for the same call with every id sent whole (cg ""), and what the
// script before cg did: the same replies, the same keys byte for byte
// (orders hash, stream entries, deadlines, room states, idem, spent marks).

// advCgBefore is the commit before cg: its buy.lua takes no cg argument.
const advCgBefore = "642e0e3"

// advCgRefScript is buy.lua before cg, or nil when git cannot show it.
func advCgRefScript() *luascript.Script {
	out, err := exec.Command("git", "show", advCgBefore+":internal/inventory/buy.lua").Output()
	if err != nil {
		return nil
	}
	return luascript.New("buyprecg", gcra.ClockLua+"\n"+gcra.TakeLua+"\n"+intSrc+"\n"+orderSrc+"\n"+string(out))
}

// advCgSplit parses buy.lua's ARGV (cg "", every id whole): the place of
// cg and of each buy's order id.
func advCgSplit(t *testing.T, args []any) (cgAt int, idAt []int) {
	t.Helper()
	n := func(i int) int {
		v, err := strconv.Atoi(fmt.Sprint(args[i]))
		if err != nil {
			t.Fatalf("argument %d = %v: %v", i, args[i], err)
		}
		return v
	}
	count, nth := n(1), n(2)
	cgAt = 3 + 4*nth
	ns := n(cgAt + 1)
	p := cgAt + 2
	var shapes []int
	for range ns {
		shapes = append(shapes, p)
		p += 7 + 2*n(p+5)
	}
	for range count {
		idAt = append(idAt, p+1)
		k := n(p + 2)
		d := p + 3
		next := p + 3
		if k != 0 {
			d = shapes[k-1]
		} else {
			next = d + 7 + 2*n(d+5)
		}
		if fmt.Sprint(args[d+6+2*n(d+5)]) == "1" {
			next += 2
		}
		p = next
	}
	return cgAt, idAt
}

// advCgTails is args with group g as the call's group: each id of it sent
// as its tail, as batchCall does.
func advCgTails(t *testing.T, args []any, g string) (out []any, tails int) {
	cgAt, idAt := advCgSplit(t, args)
	out = append([]any(nil), args...)
	out[cgAt] = g
	for _, i := range idAt {
		id := fmt.Sprint(args[i])
		if len(id) > orderGroupTail && orderGroup(id) == g {
			out[i] = id[len(g):]
			tails++
		}
	}
	return out, tails
}

// advCgOld is args as buy.lua before cg took them: no cg argument.
func advCgOld(t *testing.T, args []any) []any {
	cgAt, _ := advCgSplit(t, args)
	out := append([]any(nil), args[:cgAt]...)
	return append(out, args[cgAt+1:]...)
}

// TestAdvCgTailsDoWhatWholeIdsDo: random calls of diffWorld (resends in
// groups and own fields, ids of several groups, ids twice, idempotency
// keys, tokens, gated buys, payment deadlines, both stream modes, corrupt
// values) run three ways on three copies of one state: every id whole
// (cg ""), the ids of a call group sent as tails (the first buy's group as
// the engine picks it, or another buy's, or a group none is of), and by
// the script before cg. Replies and every key must agree.
func TestAdvCgTailsDoWhatWholeIdsDo(t *testing.T) {
	ref := advCgRefScript()
	if ref == nil {
		t.Log("no git show of the script before cg: comparing whole ids and tails only")
	}
	for _, srv := range redistest.SingleBackends() {
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.Client(t)
			e := New(rdb, Options{Prefix: redistest.Prefix(t, rdb)})
			cases := 250
			if srv.Name == "miniredis" {
				cases = 120
			}
			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("ADV_CG_SEED"); s != "" {
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			t.Logf("seed %d (ADV_CG_SEED)", seed)
			tailed, calls := 0, 0
			codes := map[any]int{}
			for c := 0; c < cases && !t.Failed(); c++ {
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				w := newDiffWorld(rng, srv.Name == "miniredis")
				kw, kt, kr := e.keys(fmt.Sprint("w", c)), e.keys(fmt.Sprint("t", c)), e.keys(fmt.Sprint("r", c))
				w.seedInto(ctx, t, rdb, c, kw, kt, kr)
				for n := range 1 + rng.IntN(4) {
					args := w.call(rng)
					calls++
					_, idAt := advCgSplit(t, args)
					g := orderGroup(fmt.Sprint(args[idAt[0]]))
					switch x := rng.IntN(10); {
					case x == 0:
						g = orderGroup(fmt.Sprint(args[idAt[rng.IntN(len(idAt))]]))
					case x == 1:
						g = "g7.none"
					}
					targs, k := advCgTails(t, args, g)
					tailed += k
					rw, res := runDiff(ctx, rdb, buyScript, kw.buy(), args)
					rt, _ := runDiff(ctx, rdb, buyScript, kt.buy(), targs)
					countCodes(codes, res)
					if rw != rt {
						t.Errorf("seed %d case %d call %d: replies differ\nwhole %s\ntails %s\nargs %v\ntails %v", seed, c, n, rw, rt, args, targs)
						break
					}
					dw, dt := dumpDiff(ctx, t, rdb, kw.tag, w.keys()), dumpDiff(ctx, t, rdb, kt.tag, w.keys())
					if d := diffLines(dw, dt); d != "" {
						t.Errorf("seed %d case %d call %d: states differ (- whole, + tails):\n%s\nreply %s\nargs %v\ntails %v", seed, c, n, d, rw, args, targs)
						break
					}
					if ref == nil {
						continue
					}
					rr, _ := runDiff(ctx, rdb, ref, kr.buy(), advCgOld(t, args))
					if rr != rw {
						t.Errorf("seed %d case %d call %d: replies differ\nbefore cg %s\nnow       %s\nargs %v", seed, c, n, rr, rw, args)
						break
					}
					dr := dumpDiff(ctx, t, rdb, kr.tag, w.keys())
					if d := diffLines(dr, dw); d != "" {
						t.Errorf("seed %d case %d call %d: states differ (- before cg, + now):\n%s\nreply %s\nargs %v", seed, c, n, d, rw, args)
						break
					}
				}
			}
			if tailed == 0 {
				t.Fatal("no id went as a tail: the test compares nothing")
			}
			t.Logf("%d calls, %d ids sent as tails; buys by code %v", calls, tailed, codes)
		})
	}
}
