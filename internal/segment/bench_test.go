package segment_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/inventory"
	"github.com/seckill/seckill/internal/segment"
)

// benchCallers is how many goroutines buy at once, as in the inventory
// package's BenchmarkBuy at GOMAXPROCS x 128 on a 2-core machine.
const benchCallers = 256

// BenchmarkSegmentedBuy measures one-unit buys of one hot item through
// Seller.Buy, each by a new buyer, from 256 parallel callers, with the
// item's stock split over K segments:
//
//	redis=cluster   the package's 3-master Redis Cluster, K=1 (every buy on
//	                one master), K=3 (one segment per master), K=6 (two)
//	redis=local     the machine's Redis (one core, 127.0.0.1:6379), K=1, K=3
//
// and two stocks:
//
//	stock=huge   a billion units, never sold out: every buy must succeed,
//	             and no units should move between segments
//	stock=exact  b.N units for b.N buyers: the segments drain unevenly at
//	             the end, so buys fall through and units move; every buy
//	             should still succeed (nothing is sold out before the very
//	             end), and nothing may be oversold
//
// Each run checks that every error is a sold-out (and, for stock=huge, that
// there is none), that the units sold (summed over the segments) equal the
// successful buys and the units in the order records, that the units still
// stocked add up to the stock (no move left half done) and, for
// stock=exact, that no buy was refused while units were left.
//
// Metrics: buys/s; redis-cpu-us/buy, the CPU time (used_cpu_user +
// used_cpu_sys of INFO cpu, the whole server) of every Redis node serving
// the sale, summed, per buy; on the cluster, cpu-share-m0..m2, each
// master's share of that CPU (masters sorted by address; K=1's segment is
// on m0), and max-master-cpu-share, the largest; client-cpu-us/buy, this
// process's CPU per buy (from /proc, 10ms ticks); machine-busy, the share
// of all cores busy during the run (from /proc/stat); moves and
// moved-units, the refills that moved stock between segments. The segment
// each master holds and how many units each segment sold are logged.
//
// On the local Redis, redis-cpu-us/buy counts every client of that shared
// server: it is exact only when nothing else uses it meanwhile.
//
// Run: go test -run '^$' -bench BenchmarkSegmentedBuy -benchtime 300000x -count 3 ./segment/
// (3 to 8 s a run on a 2-core machine). buys/s moves with whatever else
// the machine runs; the CPU per buy and the shares far less. To compare the
// configurations on a noisy machine, run the command several times with
// -count 1, so they interleave.
func BenchmarkSegmentedBuy(b *testing.B) {
	cases := []struct {
		backend string
		k       int
	}{
		{"cluster", 1}, {"cluster", 3}, {"cluster", 6},
		{"redis", 1}, {"redis", 3},
	}
	for _, stock := range []string{"huge", "exact"} {
		for _, c := range cases {
			name := c.backend
			if name == "redis" {
				name = "local"
			}
			b.Run(fmt.Sprintf("stock=%s/redis=%s/K=%d", stock, name, c.k), func(b *testing.B) {
				benchSegmentedBuy(b, backendNamed(b, c.backend), c.k, stock == "exact")
			})
		}
	}
}

func benchSegmentedBuy(b *testing.B, be backend, k int, exact bool) {
	const sale, sku = "hot", "A"
	r := newRig(b, be, inventory.Options{}, segment.Options{})
	ctx := r.ctx
	stock := int64(inventory.MaxQty)
	if exact {
		stock = int64(b.N)
	}
	ids := r.create(inventory.Sale{ID: sale, PerUserLimit: 1, Items: []inventory.Item{{SKU: sku, Stock: stock}}}, k)
	if err := r.eng.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	masters := redisNodes(b, r.rdb)
	where := segmentMasters(b, r, ids, masters)

	var (
		next, ok, soldOut, failed atomic.Int64
		firstErr                  sync.Once
	)
	par := (benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	cpu0 := redisCPU(b, r.rdb)
	self0, selfOK := processCPU()
	busy0, busyOK := machineTicks()
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		lines := []inventory.Line{{SKU: sku, Qty: 1}}
		for pb.Next() {
			user := "u" + strconv.FormatInt(next.Add(1), 36)
			_, err := r.sel.Buy(ctx, inventory.BuyRequest{SaleID: sale, UserID: user, Lines: lines})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				if soldOut.Add(1) <= 5 && exact {
					// Left in each segment right after: nonzero is a buy
					// refused while units were left.
					rem, _ := r.eng.Remaining(ctx, sku, ids...)
					b.Logf("buy by %s (home %s) sold out; left in the segments right after: %v",
						user, segment.Home(ids, user), rem)
				}
			default:
				failed.Add(1)
				firstErr.Do(func() { b.Errorf("buy by %s: %v", user, err) })
			}
		}
	})
	b.StopTimer()
	elapsed := b.Elapsed()
	cpu1 := redisCPU(b, r.rdb)
	self1, _ := processCPU()
	busy1, _ := machineTicks()

	// What the segments hold now.
	sum, per, err := r.sel.Stock(ctx, sale)
	if err != nil {
		b.Fatal(err)
	}
	it := sum.Items[0]
	ordered := r.ordered(sale)[sku]
	moves, units := r.sel.Moved()
	if failed.Load() > 0 {
		b.Errorf("%d buys failed with an error other than sold out", failed.Load())
	}
	if it.Sold != ok.Load() {
		b.Errorf("segments sold %d units; %d buys succeeded", it.Sold, ok.Load())
	}
	if ordered != ok.Load() {
		b.Errorf("the order records hold %d units; %d buys succeeded", ordered, ok.Load())
	}
	if it.Stocked != stock {
		b.Errorf("the segments hold %d units in all (sold + remaining); the sale was stocked with %d: a move is half done",
			it.Stocked, stock)
	}
	if it.Sold > stock {
		b.Errorf("oversold: %d units sold of %d", it.Sold, stock)
	}
	switch {
	case !exact && soldOut.Load() > 0:
		b.Errorf("%d buys refused as sold out with %d units left", soldOut.Load(), it.Remaining)
	case exact && soldOut.Load() > 0 && it.Remaining > 0:
		b.Errorf("%d of %d buys refused as sold out, yet %d units are left unsold (%d moves of %d units)",
			soldOut.Load(), b.N, it.Remaining, moves, units)
	}
	if b.N < 1000 {
		return // the first, one-iteration run: nothing worth reporting
	}

	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "buys/s")
	var total float64
	delta := make([]float64, len(masters))
	for i, addr := range masters {
		delta[i] = cpu1[addr] - cpu0[addr]
		total += delta[i]
	}
	b.ReportMetric(total*1e6/n, "redis-cpu-us/buy")
	if len(masters) > 1 {
		var most float64
		for i, d := range delta {
			share := d / total
			b.ReportMetric(share, fmt.Sprintf("cpu-share-m%d", i))
			most = max(most, share)
		}
		b.ReportMetric(most, "max-master-cpu-share")
	}
	if selfOK {
		b.ReportMetric((self1-self0)*1e6/n, "client-cpu-us/buy")
	}
	if busyOK {
		b.ReportMetric(busy1.busyShare(busy0), "machine-busy")
	}
	b.ReportMetric(float64(moves), "moves")
	b.ReportMetric(float64(units), "moved-units")

	var sb strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&sb, " %s@m%d sold %d (%.1f%%) left %d;", id, where[i], per[i].Items[0].Sold,
			100*float64(per[i].Items[0].Sold)/float64(max(it.Sold, 1)), per[i].Items[0].Remaining)
	}
	cpuSplit := make([]string, len(masters))
	for i, addr := range masters {
		cpuSplit[i] = fmt.Sprintf("m%d=%s %.2fs", i, addr, delta[i])
	}
	b.Logf("N=%d in %v: ok %d, sold out %d, failed %d; moves %d (%d units); segments:%s redis cpu: %s",
		b.N, elapsed.Round(1e6), ok.Load(), soldOut.Load(), failed.Load(), moves, units,
		sb.String(), strings.Join(cpuSplit, ", "))
}

// backendNamed returns the package's test backend of that name.
func backendNamed(b *testing.B, name string) backend {
	for _, be := range backends {
		if be.Name == name {
			return be
		}
	}
	b.Fatalf("no backend %q", name)
	return backend{}
}

// redisNodes returns the addresses of the Redis servers behind rdb, sorted:
// the cluster's masters, or the one server.
func redisNodes(b *testing.B, rdb redis.UniversalClient) []string {
	b.Helper()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return []string{standaloneAddr}
	}
	var mu sync.Mutex
	var addrs []string
	err := cc.ForEachMaster(b.Context(), func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		addrs = append(addrs, node.Options().Addr)
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(addrs)
	return addrs
}

// standaloneAddr names the one server of a non-cluster client.
const standaloneAddr = "standalone"

// segmentMasters returns, for each segment, the index in masters of the
// master holding it.
func segmentMasters(b *testing.B, r *rig, ids, masters []string) []int {
	b.Helper()
	out := make([]int, len(ids))
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return out
	}
	for i, id := range ids {
		node, err := cc.MasterForKey(b.Context(), r.eng.Key(id, "sale"))
		if err != nil {
			b.Fatal(err)
		}
		out[i] = slices.Index(masters, node.Options().Addr)
	}
	return out
}

// redisCPU returns the CPU seconds (used_cpu_user + used_cpu_sys) each Redis
// server behind rdb has used since it started, by address (redisNodes).
func redisCPU(b *testing.B, rdb redis.UniversalClient) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		out[standaloneAddr] = serverCPU(b, b.Context(), rdb)
		return out
	}
	var mu sync.Mutex
	err := cc.ForEachMaster(b.Context(), func(ctx context.Context, node *redis.Client) error {
		s := serverCPU(b, ctx, node)
		mu.Lock()
		out[node.Options().Addr] = s
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func serverCPU(b *testing.B, ctx context.Context, c redis.Cmdable) float64 {
	info, err := c.InfoMap(ctx, "cpu").Result()
	if err != nil {
		b.Error(err)
		return 0
	}
	var seconds float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info["CPU"][f], 64)
		if err != nil {
			b.Errorf("INFO cpu: %s = %q", f, info["CPU"][f])
		}
		seconds += v
	}
	return seconds
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux build that matters.
const clockTicks = 100

// processCPU returns the CPU seconds (user + system) this process has used,
// from /proc/self/stat; false where there is no /proc.
func processCPU() (float64, bool) {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: count from the ')'.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(utime+stime) / clockTicks, true
}

// cpuTicks is the first line of /proc/stat: all cores' time, in ticks.
type cpuTicks struct{ idle, total int64 }

func (t cpuTicks) busyShare(before cpuTicks) float64 {
	total := t.total - before.total
	if total <= 0 {
		return 0
	}
	return 1 - float64(t.idle-before.idle)/float64(total)
}

// machineTicks reads the machine's CPU time, idle (idle + iowait) and in all.
func machineTicks() (cpuTicks, bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTicks{}, false
	}
	var t cpuTicks
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return cpuTicks{}, false
		}
		if i == 8 || i == 9 { // guest and guest_nice are counted in user and nice already
			continue
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, true
}
