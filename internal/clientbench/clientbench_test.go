//go:build unix

package clientbench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill/internal/gcra"
	"github.com/seckill/seckill/internal/inventory"
)

// stock is what the sale starts with, far more than any run buys.
const stock = 1_000_000_000

// addr is the Redis the benchmarks run against.
func addr() string {
	if a := os.Getenv("SECKILL_CLIENTBENCH_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

var (
	srcOnce sync.Once
	src     string
	srcErr  error

	// salt and counter make every order id and user of this process unique.
	salt    [2]byte
	counter atomic.Uint64
	sales   atomic.Uint64
	startMS = uint64(time.Now().UnixMilli())
)

// buySource is the script source the engine loads: the clock and GCRA
// helpers, int.lua, order.lua, then buy.lua (see internal/inventory/scripts.go). The
// inventory's files are read from the repository, as go:embed cannot reach
// a parent directory.
func buySource(b testing.TB) string {
	srcOnce.Do(func() {
		var ints, orders, raw []byte
		if ints, srcErr = os.ReadFile("../inventory/int.lua"); srcErr != nil {
			return
		}
		if orders, srcErr = os.ReadFile("../inventory/order.lua"); srcErr != nil {
			return
		}
		raw, srcErr = os.ReadFile("../inventory/buy.lua")
		src = gcra.ClockLua + "\n" + gcra.TakeLua + "\n" + string(ints) + "\n" + string(orders) + "\n" + string(raw)
		_, _ = rand.Read(salt[:])
	})
	if srcErr != nil {
		b.Fatal(srcErr)
	}
	return src
}

// orderID returns "<sale>.<ULID>", the engine's order id format, the ULID
// made from a counter instead of random bits so that making it costs nothing.
func orderID(sale string, n uint64) string {
	var u ulid.ULID
	_ = u.SetTime(startMS)
	copy(u[6:8], salt[:])
	binary.BigEndian.PutUint64(u[8:], n)
	return sale + "." + u.String()
}

// appendBuys appends the arguments of a batch of n buys, each of one unit of
// A by a user of its own with an order id of its own, no idempotency key and
// no throttle, as the engine sends them (see buy.lua's header): the crowd's
// one shape once, the call's group (the first order id's), each buy as its
// user, order id (its tail when of the call's group) and shape 1, then the
// stream mode (one entry a call) and the distinct flag.
func appendBuys(args []string, sale string, n int) []string {
	first := counter.Add(uint64(n)) - uint64(n) + 1 // n counters of this call's own
	group := orderID(sale, first)
	group = group[:len(group)-4]
	args = append(args, "", strconv.Itoa(n), "0", group)                 // "": the script reads Redis's clock; no throttles
	args = append(args, "1", "", "A=1", "0", "", "0", "1", "A", "1", "") // one shared shape: no key, no throttle, no token, one line, no gate
	for i := range n {
		c := first + uint64(i)
		id := orderID(sale, c)
		if len(id) > 4 && id[:len(id)-4] == group {
			id = id[len(group):]
		}
		args = append(args, "u"+strconv.FormatUint(c, 36), id, "1")
	}
	return append(args, "0", "1", "1") // no id the caller chose, one entry, distinct
}

// client is one way of sending EVALSHA of the buy script.
type client interface {
	// evalBuys runs one call and returns an error unless the reply is
	// {0, 3, 0, at, r, 3, 0, at, r, ...}: one outcome per buy, each after
	// its length (see buy.lua), every one a buy.
	evalBuys(ctx context.Context, sha string, keys, args []string, buys int) error
	close()
}

func checkCodes(top int64, codes []int64, buys int) error {
	if top != 0 {
		return fmt.Errorf("batch code %d", top)
	}
	if len(codes) != buys {
		return fmt.Errorf("%d buy replies for %d buys", len(codes), buys)
	}
	for i, c := range codes {
		if c != 0 {
			return fmt.Errorf("buy %d: code %d", i, c)
		}
	}
	return nil
}

// goRedis sends through a go-redis Cmdable: a *redis.Client, or its
// AutoPipeliner.
type goRedis struct {
	c       redis.Cmdable
	closers []func() error
}

func (g *goRedis) evalBuys(ctx context.Context, sha string, keys, args []string, buys int) error {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	res, err := g.c.EvalSha(ctx, sha, keys, a...).Result()
	if err != nil {
		return err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) == 0 {
		return fmt.Errorf("reply %v", res)
	}
	top, _ := arr[0].(int64)
	codes := make([]int64, 0, buys)
	for p := 1; p < len(arr); {
		k, ok := arr[p].(int64)
		if !ok || k < 1 || p+int(k) >= len(arr) {
			return fmt.Errorf("reply %v", res)
		}
		c, ok := arr[p+1].(int64)
		if !ok {
			return fmt.Errorf("reply %v", res)
		}
		codes = append(codes, c)
		p += 1 + int(k)
	}
	return checkCodes(top, codes, buys)
}

func (g *goRedis) close() {
	for _, c := range g.closers {
		_ = c()
	}
}

type rueidisClient struct{ c rueidis.Client }

func (r *rueidisClient) evalBuys(ctx context.Context, sha string, keys, args []string, buys int) error {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	arr, err := r.c.Do(ctx, cmd).ToArray()
	if err != nil {
		return err
	}
	if len(arr) == 0 {
		return errors.New("empty reply")
	}
	top, err := arr[0].AsInt64()
	if err != nil {
		return err
	}
	codes := make([]int64, 0, buys)
	for p := 1; p < len(arr); {
		k, err := arr[p].AsInt64()
		if err != nil || k < 1 || p+int(k) >= len(arr) {
			return fmt.Errorf("reply length at %d: %v", p, err)
		}
		c, err := arr[p+1].AsInt64()
		if err != nil {
			return err
		}
		codes = append(codes, c)
		p += 1 + int(k)
	}
	return checkCodes(top, codes, buys)
}

func (r *rueidisClient) close() { r.c.Close() }

type variant struct {
	name string
	open func() (client, error)
}

var variants = []variant{
	{"go-redis", func() (client, error) {
		c := redis.NewClient(&redis.Options{Addr: addr()})
		return &goRedis{c: c, closers: []func() error{c.Close}}, nil
	}},
	{"go-redis-pool256", func() (client, error) {
		c := redis.NewClient(&redis.Options{Addr: addr(), PoolSize: 256})
		return &goRedis{c: c, closers: []func() error{c.Close}}, nil
	}},
	// go-redis v9.23's experimental blocking auto-pipeliner, with its
	// defaults (one ordered batch stream).
	{"go-redis-autopipeline", func() (client, error) {
		c := redis.NewClient(&redis.Options{Addr: addr()})
		ap, err := c.AutoPipeline()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		return &goRedis{c: ap, closers: []func() error{ap.Close, c.Close}}, nil
	}},
	// rueidis defaults: concurrent Do calls are auto-pipelined over
	// 2^PipelineMultiplex (4) connections.
	{"rueidis", func() (client, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr()}})
		if err != nil {
			return nil, err
		}
		return &rueidisClient{c}, nil
	}},
	// rueidis taking a connection of its blocking pool per call, like a
	// plain go-redis client does.
	{"rueidis-noautopipe", func() (client, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr()},
			DisableAutoPipelining: true})
		if err != nil {
			return nil, err
		}
		return &rueidisClient{c}, nil
	}},
}

// serverStats is what INFO says of the server's work so far.
type serverStats struct {
	evalshaCalls, evalshaUsec int64
	cpu                       float64 // seconds, user + sys
}

func readServer(ctx context.Context, admin *redis.Client) (serverStats, error) {
	var s serverStats
	info, err := admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		switch {
		case strings.HasPrefix(line, "cmdstat_evalsha:"):
			for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_evalsha:"), ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					s.evalshaCalls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					s.evalshaUsec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		case strings.HasPrefix(line, "used_cpu_user:"), strings.HasPrefix(line, "used_cpu_sys:"):
			_, v, _ := strings.Cut(line, ":")
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		}
	}
	return s, nil
}

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run benchmarks each variant with goroutines callers, each call a batch of
// up to batch buys. b.N counts buys, so ns/op is wall time per buy.
func run(b *testing.B, goroutines, batch int) {
	ctx := context.Background()
	script := buySource(b)
	admin := redis.NewClient(&redis.Options{Addr: addr()})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		b.Skipf("no Redis at %s: %v", addr(), err)
	}
	sha, err := admin.ScriptLoad(ctx, script).Result()
	if err != nil {
		b.Fatal(err)
	}
	par := max(1, goroutines/runtime.GOMAXPROCS(0))

	for _, v := range variants {
		b.Run("client="+v.name, func(b *testing.B) {
			c, err := v.open()
			if err != nil {
				b.Fatal(err)
			}
			defer c.close()

			sale, keys := newSale(b, admin, 1000000, stock)

			var (
				calls, made, failed atomic.Int64
				firstErr            atomic.Value
			)
			call := func(args []string, n int) {
				calls.Add(1)
				if err := c.evalBuys(ctx, sha, keys, args, n); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				made.Add(int64(n))
			}

			// Warm up: every caller at once, so that pools have dialled.
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range 2 {
						call(appendBuys(nil, sale, batch), batch)
					}
				})
			}
			wg.Wait()
			warm := made.Load()
			calls.Store(0)
			made.Store(0)

			srv0, err := readServer(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(par)
			b.ResetTimer()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				args := make([]string, 0, 14+3*batch)
				for {
					n := 0
					for n < batch && pb.Next() {
						n++
					}
					if n == 0 {
						return
					}
					args = appendBuys(args[:0], sale, n)
					call(args, n)
					if n < batch {
						return
					}
				}
			})
			cpu := processCPU() - cpu0
			b.StopTimer()
			elapsed := b.Elapsed()
			srv1, err := readServer(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}

			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d calls failed, first: %v", f, calls.Load(), firstErr.Load())
			}
			bought := made.Load()
			if bought != int64(b.N) {
				b.Fatalf("made %d buys, want %d", bought, b.N)
			}
			left, err := admin.HGet(ctx, keys[0], "r:A").Int64()
			if err != nil {
				b.Fatal(err)
			}
			if want := stock - warm - bought; left != want {
				b.Fatalf("r:A is %d after %d buys, want %d", left, warm+bought, want)
			}
			// The orders hash holds the orders by group (inventory.OrderRecords).
			groups, err := admin.HGetAll(ctx, keys[2]).Result()
			if n := int64(len(inventory.OrderRecords(groups))); err != nil || n != warm+bought {
				b.Fatalf("%d orders after %d buys (%v)", n, warm+bought, err)
			}

			b.ReportMetric(float64(bought)/elapsed.Seconds(), "buys/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(bought), "cpu-µs/buy")
			dc := srv1.evalshaCalls - srv0.evalshaCalls
			if dc > 0 {
				b.ReportMetric(float64(srv1.evalshaUsec-srv0.evalshaUsec)/float64(dc), "srv-µs/call")
			}
			b.ReportMetric((srv1.cpu-srv0.cpu)*1e6/float64(bought), "srv-cpu-µs/buy")
			// Another client of the server running evalsha skews srv-µs/call
			// (and every client skews srv-cpu-µs/buy): say so when it shows.
			if mine := calls.Load(); mine > 100 && float64(dc-mine) > 0.01*float64(mine) {
				b.Logf("server counted %d evalsha calls, this run made %d: the server is shared", dc, mine)
			}
		})
	}
}

// BenchmarkOneBuyPerCall: 256 callers, each call a batch of one buy.
func BenchmarkOneBuyPerCall(b *testing.B) { run(b, 256, 1) }

// BenchmarkBatchedCall: 8 callers, each call a batch of 32 buys, what the
// engine's coalescing sends under load.
func BenchmarkBatchedCall(b *testing.B) { run(b, 8, 32) }

// The benchmarks send buy.lua the arguments it takes: a call of three buys
// made by appendBuys buys all three. (Seen failing with the arguments of
// before shared shapes: "user_script:305: 'for' limit must be a number".)
func TestAppendBuysBuys(t *testing.T) {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr()})
	t.Cleanup(func() { _ = admin.Close() }) // after newSale's clean-up
	sha, err := admin.ScriptLoad(ctx, buySource(t)).Result()
	if err != nil {
		t.Fatalf("no Redis at %s to load the script: %v", addr(), err)
	}
	sale, keys := newSale(t, admin, 1, 10)
	g := &goRedis{c: admin}
	if err := g.evalBuys(ctx, sha, keys, appendBuys(nil, sale, 3), 3); err != nil {
		t.Fatal(err)
	}
	if r, err := admin.HGet(ctx, keys[0], "r:A").Result(); err != nil || r != "7" {
		t.Errorf("remaining %q (%v), want 7", r, err)
	}
}

// newSale writes a sale of its own, under a hash tag of its own, selling
// stock units of sku A with the per-user limit limit, as buy.lua reads it;
// it returns the sale's id and buy.lua's keys, and unlinks them when tb
// ends.
func newSale(tb testing.TB, admin *redis.Client, limit, stock int64) (string, []string) {
	tb.Helper()
	seq := sales.Add(1)
	tag := fmt.Sprintf("{cbench-%x-%d:s%d}", salt, os.Getpid(), seq)
	keys := []string{tag + ":sale", tag + ":bought", tag + ":orders", tag + ":idem",
		tag + ":events", tag + ":throttle:", tag + ":ptoken:"}
	tb.Cleanup(func() { admin.Unlink(context.Background(), keys[:5]...) })
	if err := admin.HSet(context.Background(), keys[0], "limit", limit, "start", 0, "end", 0, "paused", 0,
		"r:A", stock, "t:A", stock, "items", fmt.Sprintf("A=%d", stock)).Err(); err != nil {
		tb.Fatal(err)
	}
	return "s" + strconv.FormatUint(seq, 10), keys
}
